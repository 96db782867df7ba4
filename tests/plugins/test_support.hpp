// Shared by the plugin tests: where the fixture plugins are, a fake set of run services, and small helpers.
#pragma once

#include <rudder/plugins/plugins.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::plugins::testing {

inline std::filesystem::path fixture_dir() { return RUDDER_TEST_FIXTURE_DIR; }
inline std::filesystem::path fixture(const std::string& name) { return fixture_dir() / ("rudder_" + name + ".so"); }

// The one controller of a fixture library (or the one with `id` for a library with several).
inline ControllerType fixture_type(const std::string& name, const std::string& id = "") {
    for (auto& type : load_library(fixture(name)))
        if (id.empty() || type.id() == id) return type;
    throw std::runtime_error("fixture " + name + " has no controller " + id);
}

// The PluginError message `body` throws, or a marker that makes the expectation fail.
template <class Body> std::string plugin_error_of(Body&& body) {
    try {
        body();
    } catch (const PluginError& e) {
        return e.what();
    }
    return "<no PluginError was thrown>";
}

// A word-level tokenizer over a fixed vocabulary and a denoiser whose output encodes the condition:
// every logit under condition c is 1.5 * c.size() + 0.25.
class FakeServices : public RunServices {
public:
    std::vector<std::string> vocab{"<pad>", "the", "cat", "sat", "on", "a", "mat", "<mask>"};
    bool fail = false;             // every service throws std::runtime_error
    bool no_conditioning = false;  // denoise throws std::logic_error, as for a model without conditioning
    std::vector<std::vector<std::string>> denoise_calls;
    std::vector<StepInputs> denoise_steps;  // the step each denoise call was asked for
    int64_t batch_size = 0, seq_len = 0;

    std::vector<int64_t> tokenize(const std::string& text) override {
        if (fail) throw std::runtime_error("fake tokenizer exploded");
        std::vector<int64_t> ids;
        std::istringstream words(text);
        for (std::string word; words >> word;) {
            const auto found = std::find(vocab.begin(), vocab.end(), word);
            if (found == vocab.end()) throw std::invalid_argument("unknown word " + word);
            ids.push_back(found - vocab.begin());
        }
        return ids;
    }
    std::string detokenize(const int64_t* ids, int64_t n) override {
        if (fail) throw std::runtime_error("fake detokenizer exploded");
        std::string text;
        for (int64_t i = 0; i < n && ids[i] != 0; ++i) text += (text.empty() ? "" : " ") + vocab.at(ids[i]);
        return text;
    }
    const std::string* token_text(int64_t id) override {
        if (fail) throw std::runtime_error("fake token_text exploded");
        return id >= 0 && id < static_cast<int64_t>(vocab.size()) ? &vocab[id] : nullptr;
    }
    at::Tensor denoise(const StepInputs& step, const std::vector<std::string>& conditions) override {
        if (fail) throw std::runtime_error("fake denoiser exploded");
        if (no_conditioning) throw std::logic_error("this model takes no conditioning");
        denoise_calls.push_back(conditions);
        denoise_steps.push_back(step);
        auto logits = at::empty({static_cast<int64_t>(conditions.size()), batch_size, seq_len,
                                 static_cast<int64_t>(vocab.size())});
        for (size_t k = 0; k < conditions.size(); ++k)
            logits[static_cast<int64_t>(k)].fill_(1.5 * static_cast<double>(conditions[k].size()) + 0.25);
        return logits;
    }
};

inline RunShape discrete_shape() {
    RunShape shape;
    shape.family = RUDDER_FAMILY_DISCRETE;
    shape.batch_size = 2;
    shape.seq_len = 3;
    shape.vocab_size = 8;
    shape.embed_dim = 0;
    shape.pad_id = 0;
    shape.mask_id = 7;
    shape.unk_id = -1;
    shape.total_steps = 10;
    return shape;
}

inline RunShape continuous_shape() {
    RunShape shape = discrete_shape();
    shape.family = RUDDER_FAMILY_CONTINUOUS;
    shape.embed_dim = 4;
    shape.mask_id = -1;
    return shape;
}

// Inputs of one PREDICT step (GUIDE with `phase`), shaped for `shape`: uniform x0 log-probs, all positions masked.
inline StepInputs step_inputs(const RunShape& shape, int32_t step, rudder_phase phase = RUDDER_PHASE_PREDICT) {
    StepInputs in;
    in.phase = phase;
    in.step = step;
    in.total_steps = shape.total_steps;
    in.t = 1.0 - static_cast<double>(step) / shape.total_steps;
    in.t_next = in.t - 1.0 / shape.total_steps;
    const int64_t B = shape.batch_size, L = shape.seq_len, V = shape.vocab_size;
    if (phase == RUDDER_PHASE_PREDICT)
        in.x0_logits = at::full({B, L, V}, -std::log(static_cast<double>(V)), at::kFloat);
    if (shape.family == RUDDER_FAMILY_CONTINUOUS) {
        in.latent = at::ones({B, L, shape.embed_dim}, at::kFloat);
        in.tokens = at::ones({B, L}, at::kLong);
    } else {
        in.tokens = at::full({B, L}, shape.mask_id, at::kLong);
        in.masked = at::ones({B, L}, at::kByte);
    }
    return in;
}

}  // namespace rudder::plugins::testing
