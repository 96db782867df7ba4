// Shared by the plugin tests: where the fixture plugins are, a fake set of run services, and small helpers.
#pragma once

#include <rudder/plugins/plugins.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::plugins::testing {

inline std::filesystem::path fixture_dir() { return RUDDER_TEST_FIXTURE_DIR; }
inline std::filesystem::path fixture(const std::string& name) { return fixture_dir() / ("rudder_" + name + ".so"); }

// What a probe fixture reports of one evaluation of a three-token state.
inline std::string detail_of(ControllerInstance& instance) {
    return instance.evaluate(0, {1, 2, 3}, 3, "the cat sat").detail;
}

// The one controller of a fixture library (or the one with `id` for a library with several).
inline ControllerType fixture_type(const std::string& name, const std::string& id = "") {
    for (auto& type : load_library(fixture(name)))
        if (id.empty() || type.id() == id) return type;
    throw std::runtime_error("fixture " + name + " has no controller " + id);
}

// The PluginError message `body` throws, or a marker that makes the expectation fail.
template <class Body>
std::string plugin_error_of(Body&& body) {
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
        auto logits = at::empty(
            {static_cast<int64_t>(conditions.size()), batch_size, seq_len, static_cast<int64_t>(vocab.size())});
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

// x0 log-probabilities whose values differ within each row, so that a row's most likely tokens have one order.
inline at::Tensor distinct_x0(const RunShape& shape) {
    const int64_t B = shape.batch_size, L = shape.seq_len, V = shape.vocab_size;
    return at::log_softmax(at::sin(at::arange(B * L * V, at::kFloat) * 1.7).view({B, L, V}), -1);
}

// `in` as the reverse loop hands a 1.2 PREDICT step: the rows (flat b * L + i, ascending), x0 at the rows and each
// row's k most likely tokens (none for k = 0).
inline StepInputs with_rows(StepInputs in, const RunShape& shape, const std::vector<int64_t>& rows, int64_t k) {
    in.rows = at::tensor(rows, at::kLong);
    in.x0_rows = in.x0_logits.reshape({-1, shape.vocab_size}).index_select(0, in.rows);
    if (k > 0) {
        auto [logp, ids] = at::topk(in.x0_rows, k, -1, true, true);
        in.candidate_ids = ids;
        in.candidate_logp = logp;
    }
    return in;
}

// The step's rows as the instance takes them: `in.rows`, or every position.
inline at::Tensor rows_of(const StepInputs& in, const RunShape& shape) {
    return in.rows.defined() ? in.rows : at::arange(shape.batch_size * shape.seq_len, at::kLong);
}

// A row-shaped [N, X] tensor over `rows` spread to [B, L, X] (0 elsewhere), or a dense one kept at `rows` only.
inline at::Tensor at_rows_as_dense(const at::Tensor& value, const at::Tensor& rows, const RunShape& shape) {
    const int64_t B = shape.batch_size, L = shape.seq_len, X = value.size(-1);
    const at::Tensor flat = value.reshape({-1, X});
    at::Tensor dense = at::zeros({B * L, X}, value.options());
    dense.index_copy_(0, rows, flat.size(0) == rows.size(0) ? flat : flat.index_select(0, rows));
    return dense.view({B, L, X});
}

// The token mask a StepOutputs carries, whatever its form (forbidden bytes, dense or at the rows; token bits of
// forbidden or allowed tokens), as bool [B, L, V] at `rows` (false elsewhere): what a composer would forbid there.
inline at::Tensor forbidden_as_dense(const StepOutputs& out, const at::Tensor& rows, const RunShape& shape) {
    const int64_t V = shape.vocab_size;
    if (out.forbidden.defined()) return at_rows_as_dense(out.forbidden.ne(0).to(at::kByte), rows, shape).to(at::kBool);
    if (!out.token_bits.defined()) return at::zeros({shape.batch_size, shape.seq_len, V}, at::kBool);
    const at::Tensor words = out.token_bits.reshape({-1, out.token_bits.size(-1)}).contiguous();
    at::Tensor listed = at::zeros({words.size(0), V}, at::kByte);
    const auto w = words.accessor<int32_t, 2>();
    auto l = listed.accessor<uint8_t, 2>();
    for (int64_t r = 0; r < words.size(0); ++r)
        for (int64_t v = 0; v < V; ++v) l[r][v] = (static_cast<uint32_t>(w[r][v / 32]) >> (v % 32)) & 1u;
    const at::Tensor forbidden = out.bits_allowed ? listed.eq(0).to(at::kByte) : listed;
    return at_rows_as_dense(
               forbidden.view(out.token_bits.dim() == 2 ? std::vector<int64_t>{-1, V}
                                                        : std::vector<int64_t>{shape.batch_size, shape.seq_len, V}),
               rows, shape)
        .to(at::kBool);
}

// The logit deltas a StepOutputs carries (logit_delta, dense or at the rows, plus candidate_delta at the step's
// candidate_ids) as float [B, L, V] at `rows` (0 elsewhere).
inline at::Tensor delta_as_dense(const StepOutputs& out, const StepInputs& in, const RunShape& shape) {
    const at::Tensor rows = rows_of(in, shape);
    at::Tensor delta = at::zeros({rows.size(0), shape.vocab_size});
    if (out.logit_delta.defined())
        delta += out.logit_delta.dim() == 2 ? out.logit_delta
                                            : out.logit_delta.reshape({-1, shape.vocab_size}).index_select(0, rows);
    if (out.candidate_delta.defined()) delta.scatter_add_(1, in.candidate_ids, out.candidate_delta);
    return at_rows_as_dense(delta, rows, shape);
}

// Sets an environment variable for the life of the object, then restores what was there.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        ::setenv(name, value, 1);
    }
    ~ScopedEnv() {
        if (had_)
            ::setenv(name_, old_.c_str(), 1);
        else
            ::unsetenv(name_);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

}  // namespace rudder::plugins::testing
