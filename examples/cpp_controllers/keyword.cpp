// keyword: a gradient controller. Params {"word": "Indian"}: guides the text to mention the word somewhere.
//
// Its constraint's log-likelihood is a soft count, log p(c | x) = log(1 + sum_i x[i, k]), where x is the sequence
// as one-hot vectors and k the word's id. The gradient with respect to x is 1 / (1 + count) at the word's column
// of every position, and 0 elsewhere: strong while the word is missing, weaker once it is there. For the discrete
// family the host turns this gradient into a logit delta by first-order Taylor expansion, g[v] - g[current token].
#include <rudder/rudder_controller.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace {

class Keyword final : public rudder::Controller {
public:
    Keyword(const rudder_host&, std::string_view params_json) {
        const auto params = nlohmann::json::parse(params_json, nullptr, /*allow_exceptions=*/false);
        if (!params.is_object() || !params.contains("word") || !params["word"].is_string())
            throw rudder::Error("/word: required, the word the text must mention");
        word_ = params["word"].get<std::string>();
    }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        // The gradient is with respect to one-hot tokens: the discrete family's state.
        if (run.family != RUDDER_FAMILY_DISCRETE)
            throw rudder::Error("keyword guides discrete models only", RUDDER_ERR_UNSUPPORTED);
        const auto ids = run_.tokenize(word_);
        if (ids.size() != 1 || ids[0] == run.unk_id)
            throw rudder::Error("'" + word_ + "' is not one word of the vocabulary");
        id_ = ids[0];
    }

    // PREDICT phase, discrete family: tokens [B, L] is the current state, grad [B, L, V] is zero-filled.
    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT || out.grad == nullptr) return;
        rudder::View<const int64_t> tokens(step.tokens);
        rudder::View<float> grad(out.grad);
        for (int64_t b = 0; b < grad.size(0); ++b) {
            int64_t count = 0;
            for (int64_t i = 0; i < grad.size(1); ++i) count += tokens(b, i) == id_ ? 1 : 0;
            for (int64_t i = 0; i < grad.size(1); ++i) grad(b, i, id_) = 1.0f / static_cast<float>(1 + count);
        }
        out.written |= RUDDER_WROTE_GRAD;
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        verdict.satisfied = 0;
        for (int64_t i = 0; i < sample.n_tokens; ++i)
            if (sample.tokens[i] == id_) verdict.satisfied = 1;
    }

private:
    std::string word_;
    int64_t id_ = -1;
};

}  // namespace

RUDDER_CONTROLLER(keyword_desc, Keyword, "keyword", "1.0.0", "guides the text to mention a word (gradient)",
                  R"({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]})",
                  RUDDER_CAP_GRADIENT | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("keyword", &keyword_desc)
