// The bare reverse loop, with no controllers, over the exact corpus denoiser: most samples must be corpus sentences.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <rudder/runtime/denoiser.hpp>
#include <rudder/text/tokenizer.hpp>

#include "sampler.hpp"
#include "toy_corpus.hpp"

namespace rudder {
namespace {

constexpr int64_t kSamples = 32;

struct ToyCorpus {
    WordTokenizer tokenizer;
    std::vector<std::vector<int64_t>> sentences;
    int64_t length = 0;  // the longest sentence: every sentence fits
};

ToyCorpus make_toy_corpus() {
    ToyCorpus corpus{WordTokenizer::build(test::toy_corpus()), {}, 0};
    for (const auto& line : test::toy_corpus()) {
        corpus.sentences.push_back(corpus.tokenizer.encode(line));
        corpus.length = std::max<int64_t>(corpus.length, static_cast<int64_t>(corpus.sentences.back().size()));
    }
    return corpus;
}

// The exact denoiser's options for the corpus in `family`.
CorpusDenoiser::Options corpus_options(const ToyCorpus& corpus, Family family) {
    CorpusDenoiser::Options options;
    options.family = family;
    options.vocab_size = corpus.tokenizer.vocab_size();
    options.pad_id = corpus.tokenizer.pad_id();
    options.mask_id = corpus.tokenizer.mask_id();
    return options;
}

// How many rows of `tokens` [B, L] are a corpus sentence followed only by padding; prints every sample.
int64_t count_exact(const ToyCorpus& corpus, const at::Tensor& tokens, const char* family) {
    const at::Tensor cpu = tokens.to(at::kCPU).contiguous();
    const int64_t B = cpu.size(0), L = cpu.size(1);
    int64_t exact = 0;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t* row = cpu.data_ptr<int64_t>() + b * L;
        bool found = false;
        for (const auto& s : corpus.sentences) {
            std::vector<int64_t> padded = s;
            padded.resize(static_cast<size_t>(L), corpus.tokenizer.pad_id());
            found = found || std::equal(padded.begin(), padded.end(), row);
        }
        exact += found ? 1 : 0;
        std::cout << "[" << family << "] " << (found ? "corpus " : "NEW    ") << corpus.tokenizer.decode(row, L)
                  << "\n";
    }
    std::cout << "[" << family << "] exact corpus sentences: " << exact << " / " << B << std::endl;
    return exact;
}

// The exact denoiser gives the exact per-position marginals, but positions unmasked in the same step are drawn
// independently, so two of them can come from different sentences: masked diffusion's factorisation error. Each
// position's unmasking step is uniform over the chain, so the chance of such a collision falls like 1/steps. On
// this corpus (L = 12) and 2048 samples the share of exact sentences was 79.7% at 25 steps, 88.7% at 50, 94.5% at
// 100, 97.2% at 200 and 99.5% at 1000. So 50 steps is held to 80% and 200 steps to the 90% bar.
at::Tensor run_discrete(const ToyCorpus& corpus, int64_t steps, uint64_t seed,
                        DiscreteSampler::Kind kind = DiscreteSampler::Kind::analytic,
                        DiscreteSampler::Remasking remasking = {}) {
    CorpusDenoiser::Options options = corpus_options(corpus, Family::discrete);
    CorpusDenoiser denoiser(corpus.sentences, options, GaussianSchedule::make("sqrt", 1000));
    const DiscreteSampler sampler(MaskSchedule(), kind, steps, 0, DiscreteSampler::Order::probability, remasking);

    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor x = sampler.init(kSamples, corpus.length, options.mask_id, at::Device(at::kCPU));
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const DenoiserOutput out = denoiser.denoise(x, sampler.t(i), {});
        x = sampler.step(x, out.logits, i, options.mask_id, gen);
    }
    EXPECT_FALSE(x.eq(options.mask_id).any().item<bool>());
    return x;
}

TEST(ReverseLoop, DiscreteAnalyticReproducesCorpusSentences) {
    const ToyCorpus corpus = make_toy_corpus();
    const int64_t exact_50 = count_exact(corpus, run_discrete(corpus, 50, 2024), "discrete, 50 steps");
    RecordProperty("exact_corpus_sentences_50_steps", static_cast<int>(exact_50));
    EXPECT_GE(exact_50 * 10, kSamples * 8) << exact_50 << " of " << kSamples;

    const int64_t exact_200 = count_exact(corpus, run_discrete(corpus, 200, 2024), "discrete, 200 steps");
    RecordProperty("exact_corpus_sentences_200_steps", static_cast<int>(exact_200));
    EXPECT_GE(exact_200 * 10, kSamples * 9) << exact_200 << " of " << kSamples;
}

// First hitting unmasks one position per network call, each from the exact conditional given every token placed
// before it: the chain rule, so every sample is a corpus sentence (no factorisation error, whatever the seed).
TEST(ReverseLoop, DiscreteFirstHittingIsExactOnTheCorpus) {
    const ToyCorpus corpus = make_toy_corpus();
    const at::Tensor x = run_discrete(corpus, corpus.length, 2024, DiscreteSampler::Kind::first_hitting);
    EXPECT_EQ(count_exact(corpus, x, "discrete, first hitting"), kSamples);
}

// Remasking (ReMDM) with the exact denoiser: a token remasked is drawn again from the posterior given the others, so
// a sentence mixed from two can be mended; the share of corpus sentences holds the analytic sampler's bar.
TEST(ReverseLoop, DiscreteRemaskingReproducesCorpusSentences) {
    const ToyCorpus corpus = make_toy_corpus();
    DiscreteSampler::Remasking remasking;
    remasking.strategy = DiscreteSampler::Remasking::Strategy::cap;
    remasking.eta = 0.05;
    const at::Tensor x = run_discrete(corpus, 200, 2024, DiscreteSampler::Kind::analytic, remasking);
    const int64_t exact = count_exact(corpus, x, "discrete, 200 steps, remasking");
    RecordProperty("exact_corpus_sentences_remasking", static_cast<int>(exact));
    EXPECT_GE(exact * 10, kSamples * 9) << exact << " of " << kSamples;
}

TEST(ReverseLoop, ContinuousDdimReproducesCorpusSentences) {
    const ToyCorpus corpus = make_toy_corpus();
    CorpusDenoiser::Options options = corpus_options(corpus, Family::continuous);
    options.embed_dim = 16;
    options.embed_seed = 7;
    const GaussianSchedule schedule = GaussianSchedule::make("sqrt", 1000);
    CorpusDenoiser denoiser(corpus.sentences, options, schedule);
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, 100, 0.0);

    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(2024);
    at::Tensor x = sampler.init({kSamples, corpus.length, options.embed_dim}, gen, at::Tensor());
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const DenoiserOutput out = denoiser.denoise(x, sampler.t(i), {});
        x = sampler.step(x, out.x0, i, gen).sample;
    }
    // x is now x0: round it to tokens by the denoiser's argmax at the smallest time of the chain.
    const at::Tensor logits = denoiser.denoise(x, sampler.t(sampler.steps() - 1), {}).logits;
    const int64_t exact = count_exact(corpus, logits.argmax(2), "continuous");
    RecordProperty("exact_corpus_sentences", static_cast<int>(exact));
    EXPECT_GE(exact * 10, kSamples * 9) << exact << " of " << kSamples;
}

// Uniform noise with the exact corpus posterior (the oracle): every position is drawn anew at every step from
// Tweedie's transition, and the samples follow the corpus distribution (uniform over its sentences). Positions are
// drawn independently given x_t, so a step can mix two sentences; late steps, where the posterior is sure, mend that.
TEST(ReverseLoop, DiscreteUniformNoiseTauLeapingReproducesTheCorpusDistribution) {
    const ToyCorpus corpus = make_toy_corpus();
    CorpusDenoiser::Options options = corpus_options(corpus, Family::discrete);
    options.uniform_noise = UniformNoiseSchedule(1e-4, 20.0);
    CorpusDenoiser denoiser(corpus.sentences, options, GaussianSchedule::make("sqrt", 1000));
    constexpr int64_t kDraws = 480;
    for (const auto kind : {UniformSampler::Kind::analytic, UniformSampler::Kind::euler}) {
        const bool analytic = kind == UniformSampler::Kind::analytic;
        const UniformSampler sampler(*options.uniform_noise, kind, 100);
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(2024);
        at::Tensor x = sampler.init(kDraws, corpus.length, options.vocab_size, gen, at::kCPU);
        for (int64_t i = 0; i < sampler.steps(); ++i) {
            const at::Tensor log_post =
                denoiser.denoise(x, sampler.t(i), {}).logits.reshape({kDraws * corpus.length, -1});
            x = DiscreteSampler::draw(sampler.step_log_probs(log_post, x.reshape({-1}), i), gen)
                    .view({kDraws, corpus.length});
        }
        // How often each corpus sentence was drawn.
        std::vector<int64_t> count(corpus.sentences.size(), 0);
        int64_t exact = 0;
        for (int64_t b = 0; b < kDraws; ++b) {
            const at::Tensor row = x[b].contiguous();
            for (size_t n = 0; n < corpus.sentences.size(); ++n) {
                std::vector<int64_t> padded = corpus.sentences[n];
                padded.resize(static_cast<size_t>(corpus.length), corpus.tokenizer.pad_id());
                if (std::equal(padded.begin(), padded.end(), row.data_ptr<int64_t>())) {
                    ++count[n];
                    ++exact;
                }
            }
        }
        const double expected = static_cast<double>(exact) / static_cast<double>(count.size());
        double chi2 = 0;
        for (int64_t c : count)
            chi2 += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
        std::cout << "[uniform noise, " << (analytic ? "tweedie" : "euler") << "] exact corpus sentences " << exact
                  << " / " << kDraws << ", chi-square over " << count.size() << " sentences " << chi2 << std::endl;
        EXPECT_GE(exact * 10, kDraws * 9) << exact << " of " << kDraws;
        // Uniform over the 20 sentences: chi-square with 19 degrees of freedom stays under 43.8 with probability 0.999.
        EXPECT_LT(chi2, 43.8);
    }
}

}  // namespace
}  // namespace rudder
