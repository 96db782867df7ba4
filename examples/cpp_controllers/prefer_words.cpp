// prefer_words: a logit-delta controller. Params {"words": ["expensive"], "bonus": 2.0}: adds `bonus` to the
// log-probability of each word at every position, so the words become more likely wherever they fit.
#include <rudder/rudder_controller.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace {

class PreferWords final : public rudder::Controller {
public:
    // Check params fully here: an error becomes a recipe error at /controllers/<i>/params.
    PreferWords(const rudder_host&, std::string_view params_json) {
        const auto params = nlohmann::json::parse(params_json, nullptr, /*allow_exceptions=*/false);
        if (!params.is_object() || !params.contains("words") || !params["words"].is_array())
            throw rudder::Error("/words: required, an array of words");
        for (const auto& w : params["words"]) {
            if (!w.is_string()) throw rudder::Error("/words: expected strings");
            words_.push_back(w.get<std::string>());
        }
        bonus_ = params.value("bonus", 2.0);
    }

    // Once per run: the words become token ids of this model's vocabulary.
    void begin(const rudder_run_info& run) override {
        Controller::begin(run);  // keeps run_ for tokenize() and friends
        ids_.clear();
        for (const auto& w : words_) {
            const std::vector<int64_t> ids = run_.tokenize(w);
            if (ids.size() != 1 || ids[0] == run.unk_id)
                throw rudder::Error("'" + w + "' is not one word of the vocabulary");
            ids_.push_back(ids[0]);
        }
    }

    // Every reverse step (PREDICT phase): logit_delta is [B, L, V], zero-filled by the host.
    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        rudder::View<float> delta(out.logit_delta);
        for (int64_t b = 0; b < delta.size(0); ++b)
            for (int64_t i = 0; i < delta.size(1); ++i)
                for (int64_t id : ids_) delta(b, i, id) = static_cast<float>(bonus_);
        out.written |= RUDDER_WROTE_LOGIT_DELTA;
    }

    // Each finished sample: met if it has one of the words; the score counts them.
    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        int64_t found = 0;
        for (int64_t i = 0; i < sample.n_tokens; ++i)
            for (int64_t id : ids_) found += sample.tokens[i] == id ? 1 : 0;
        verdict.satisfied = found > 0 ? 1 : 0;
        verdict.score = static_cast<double>(found);
    }

private:
    std::vector<std::string> words_;
    std::vector<int64_t> ids_;
    double bonus_ = 2.0;
};

}  // namespace

RUDDER_CONTROLLER(prefer_words_desc, PreferWords, "prefer_words", "1.0.0", "makes the given words more likely",
                  R"({"type": "object", "properties": {"words": {"type": "array"}, "bonus": {"type": "number"}}})",
                  RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("prefer-words", &prefer_words_desc)
