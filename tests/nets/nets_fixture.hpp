// A tiny conditional corpus and micro network configs shared by the network tests.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/text/tokenizer.hpp>

#include "transformer_denoiser.hpp"

namespace rudder::testing {

// Eight short sentences, each with its meaning representation.
inline const std::vector<std::string>& sentences() {
    static const std::vector<std::string> s = {
        "The Eagle is a pub .",
        "Aromi serves French food .",
        "Zizzi is a cheap restaurant .",
        "Cotto is near the river .",
        "Strada has a high rating .",
        "The Mill serves Italian food in the city centre .",
        "Browns is a family friendly coffee shop .",
        "Giraffe is not expensive .",
    };
    return s;
}

inline const std::vector<std::string>& meaning_representations() {
    static const std::vector<std::string> s = {
        "name[The Eagle], eatType[pub]",
        "name[Aromi], food[French]",
        "name[Zizzi], eatType[restaurant], priceRange[cheap]",
        "name[Cotto], area[riverside]",
        "name[Strada], customer rating[high]",
        "name[The Mill], food[Italian], area[city centre]",
        "name[Browns], eatType[coffee shop], familyFriendly[yes]",
        "name[Giraffe], priceRange[moderate]",
    };
    return s;
}

constexpr int64_t kLength = 12;           // every sentence fits, with pads after it
constexpr int64_t kConditionLength = 16;  // every meaning representation fits

inline std::shared_ptr<const Tokenizer> tokenizer() {
    static const auto tok = [] {
        std::vector<std::string> lines = sentences();
        lines.insert(lines.end(), meaning_representations().begin(), meaning_representations().end());
        return std::make_shared<const WordTokenizer>(WordTokenizer::build(lines));
    }();
    return tok;
}

// [N, kLength] int64: the sentences, pad-padded.
inline at::Tensor sentence_tokens() {
    const auto& tok = *tokenizer();
    at::Tensor out = at::full({static_cast<int64_t>(sentences().size()), kLength}, tok.pad_id(), at::kLong);
    for (size_t i = 0; i < sentences().size(); ++i) {
        const auto ids = tok.encode(sentences()[i]);
        for (size_t j = 0; j < ids.size(); ++j) out[static_cast<int64_t>(i)][static_cast<int64_t>(j)] = ids[j];
    }
    return out;
}

inline at::Tensor condition_tokens() {
    return nn::encode_conditions(*tokenizer(), meaning_representations(), kConditionLength);
}

// The smallest useful network: the tests check plumbing, not quality.
inline nlohmann::json micro_config(const std::string& family, bool conditional) {
    nlohmann::json c = {{"family", family},
                        {"dim", 16},
                        {"layers", 1},
                        {"heads", 2},
                        {"ff_dim", 32},
                        {"max_length", kLength},
                        {"max_condition_length", conditional ? kConditionLength : 0},
                        {"dropout", 0.0},
                        {"condition_dropout", 0.0}};
    if (family == "continuous") c["schedule"] = {{"name", "sqrt"}, {"T", 200}};
    return c;
}

// Which rows of `tokens` [B, L] are exactly a corpus sentence (followed only by pads).
inline std::vector<int64_t> matching_sentence(const at::Tensor& tokens) {
    const at::Tensor corpus = sentence_tokens();
    const at::Tensor cpu = tokens.to(at::kCPU);
    std::vector<int64_t> out;
    for (int64_t b = 0; b < cpu.size(0); ++b) {
        int64_t found = -1;
        for (int64_t n = 0; n < corpus.size(0); ++n) {
            if (cpu[b].equal(corpus[n])) found = n;
        }
        out.push_back(found);
    }
    return out;
}

}  // namespace rudder::testing
