// A discrete model with a large made-up vocabulary and a denoiser that returns random log-probabilities, for
// benchmarks of what the host and the controllers cost per reverse step (large_vocab_bench.cpp). It goes into a
// Generator through the bring-your-own-denoiser constructor; nothing about it is in the product.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/runtime/model.hpp>

namespace rudder::bench {

// Random log-probabilities [B, L, V], drawn once per batch shape (at the first denoise() of that shape) and
// returned by every call, whatever the tokens: the reverse loop's per-step cost is then its own work on the
// output plus holding it, and no network. Sequence 0 gets L rows of standard normal logits, each log-softmaxed;
// sequence b > 0 gets the same rows rotated by 97 b positions (a copy: drawing B * L * V normals again would take
// seconds at B = 8 and measure nothing more).
class SyntheticDenoiser final : public Denoiser {
public:
    SyntheticDenoiser(int64_t vocab_size, uint64_t seed)
        : Denoiser({Family::discrete, vocab_size}), vocab_size_(vocab_size), seed_(seed) {}

    void to(const at::Device& device) override {
        if (!device.is_cpu()) throw std::invalid_argument("the synthetic denoiser runs on the CPU only");
    }
    // It holds its output and nothing else.
    uint64_t working_bytes(int64_t batch, int64_t length) const override {
        return static_cast<uint64_t>(batch) * static_cast<uint64_t>(length) * static_cast<uint64_t>(vocab_size_) * 4;
    }
    DenoiserOutput denoise(const at::Tensor& x, double, const std::vector<std::string>&, const Evidence&) override {
        const int64_t B = x.size(0), L = x.size(1);
        if (!logits_.defined() || logits_.size(0) != B || logits_.size(1) != L) draw(B, L);
        return {logits_, {}, {}, {}};
    }

private:
    void draw(int64_t B, int64_t L) {
        logits_ = at::Tensor();  // the old shape's output is not kept
        logits_ = at::empty({B, L, vocab_size_}, at::kFloat);
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_);
        const at::Tensor first = logits_.select(0, 0);
        // In chunks of rows, so the draw needs no second [L, V] tensor.
        constexpr int64_t kChunk = 32;
        for (int64_t r = 0; r < L; r += kChunk) {
            at::Tensor rows = first.narrow(0, r, std::min(kChunk, L - r));
            rows.normal_(0.0, 1.0, gen);
            rows.copy_(at::log_softmax(rows, 1));
        }
        for (int64_t b = 1; b < B; ++b) {
            const at::Tensor order = at::arange(L, at::kLong).add_(97 * b).remainder_(L);
            at::Tensor out = logits_.select(0, b);
            at::index_select_out(out, first, 0, order);
        }
    }

    int64_t vocab_size_;
    uint64_t seed_;
    at::Tensor logits_;
};

// The made-up word of token id `id` (ids 0-2 are the tokenizer's pad, unk and mask).
inline std::string synthetic_word(int64_t id) {
    char word[24];
    std::snprintf(word, sizeof word, "w%06lld", static_cast<long long>(id - 3));
    return word;
}

// Model "synthetic": discrete, a WordTokenizer of vocab_size tokens (<pad>, <unk>, <mask>, then made-up words
// w000000, w000001, ... so that synthetic_word(id) has id `id`), and the synthetic denoiser.
inline Model synthetic_model(int64_t vocab_size, uint64_t seed) {
    std::vector<std::string> words;
    words.reserve(static_cast<size_t>(vocab_size - 3));
    for (int64_t id = 3; id < vocab_size; ++id) words.push_back(synthetic_word(id));
    Model m;
    m.name = "synthetic";
    m.family = Family::discrete;
    m.tokenizer = std::make_shared<WordTokenizer>(WordTokenizer::from_words(words));
    m.denoiser = std::make_shared<SyntheticDenoiser>(vocab_size, seed);
    return m;
}

}  // namespace rudder::bench
