// cfg: classifier-free guidance towards an E2E meaning representation, for both families. Each PREDICT step asks the
// host's re-entrant denoiser for the conditional and unconditional log-probabilities in one batched forward and
// contributes gamma * (cond - uncond) as a logit delta; on the loop's unconditional output that gives
// uncond + gamma * (cond - uncond): gamma 0 is the unconditional model, 1 the conditional one, above 1 extrapolates.
// Judges a sample by the share of the meaning representation's values the text realises (rudder/text/meaning.hpp).
// semantic: the same guidance towards a few fields ({"fields": ["food[Italian]", "area[riverside]"]}), the
// condition being just those fields, as Diffusion-LM's semantic-content control; satisfied when every value is
// realised. The conditional denoiser plays the classifier's part (p(c | x) ∝ p(x | c) / p(x)), so no separate
// classifier is trained.
#include <rudder/rudder_controller.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <rudder/text/meaning.hpp>

#include "../common/params.hpp"

namespace {

class ClassifierFreeGuidance : public rudder::Controller {
public:
    ClassifierFreeGuidance(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        const auto condition = p->text("condition", rudder::json_input::kRequired);
        read_gamma(p);
        p.finish();
        set_condition(*condition, "/condition");
    }

protected:
    ClassifierFreeGuidance() = default;

    void set_condition(const std::string& condition, const std::string& where) {
        condition_ = condition;
        try {
            fields_ = rudder::meaning::parse(condition_);
        } catch (const std::invalid_argument& e) {
            throw rudder::Error(where + ": " + e.what());
        }
    }

    void read_gamma(rudder::Params& p) { gamma_ = p->number("gamma", 0.0, 100.0).value_or(gamma_); }

public:
    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT || out.logit_delta == nullptr) return;
        const rudder_run_info& run = run_.info();
        const char* conditions[] = {condition_.c_str(), ""};
        const DLTensor* logits = nullptr;
        const rudder_status status = run.denoise(run.run_ctx, conditions, 2, &logits);
        if (status == RUDDER_ERR_UNSUPPORTED)
            throw rudder::Error("the model takes no condition (it was not trained with meaning representations)",
                                status);
        if (status != RUDDER_OK || logits == nullptr) throw rudder::Error("the host's denoise call failed", status);
        const auto* lp = static_cast<const float*>(logits->data);
        const int64_t n = run.batch_size * run.seq_len * run.vocab_size;  // [2, B, L, V]: conditional, then not
        auto* delta = static_cast<float*>(out.logit_delta->data);
        for (int64_t i = 0; i < n; ++i) delta[i] = static_cast<float>(gamma_ * (lp[i] - lp[n + i]));
        out.written |= RUDDER_WROTE_LOGIT_DELTA;
    }

    // Score: the share of the meaning representation's values the text realises; satisfied when all are.
    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        const std::string text = sample.text != nullptr ? sample.text : "";
        int64_t hits = 0;
        for (const auto& f : fields_) hits += rudder::meaning::realised(f, text) ? 1 : 0;
        verdict.score = static_cast<double>(hits) / static_cast<double>(fields_.size());
        verdict.satisfied = hits == static_cast<int64_t>(fields_.size()) ? 1 : 0;
    }

private:
    std::string condition_;  // the meaning representation the denoiser is conditioned on
    std::vector<rudder::meaning::Field> fields_;
    double gamma_ = 2.0;
};

class Semantic final : public ClassifierFreeGuidance {
public:
    Semantic(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        const nlohmann::json* fields = p->any("fields", rudder::json_input::kRequired,
                                              "E2E fields, e.g. [\"food[Italian]\", \"area[riverside]\"]");
        read_gamma(p);
        std::string condition;
        if (fields != nullptr && fields->is_string()) {
            condition = fields->get<std::string>();
        } else if (fields != nullptr && fields->is_array() && !fields->empty()) {
            for (size_t i = 0; i < fields->size(); ++i) {
                if (!(*fields)[i].is_string())
                    p->issues().push_back({p->pointer("fields") + "/" + std::to_string(i),
                                           "expected a field such as \"food[Italian]\", got " + (*fields)[i].dump()});
                else
                    condition += (condition.empty() ? "" : ", ") + (*fields)[i].get<std::string>();
            }
        } else if (fields != nullptr) {
            p->issue("fields", "expected a non-empty array of fields such as \"food[Italian]\", or one string of them");
        }
        p.finish();
        set_condition(condition, "/fields");
    }
};

}  // namespace

static const char kSchema[] = R"schema({
  "type": "object",
  "properties": {
    "condition": { "type": "string", "description": "E2E meaning representation, e.g. \"name[Aromi], food[Italian]\"" },
    "gamma": { "type": "number", "minimum": 0, "maximum": 100, "description": "guidance scale: 0 unconditional, 1 conditional (default 2)" }
  },
  "required": ["condition"], "additionalProperties": false
})schema";

RUDDER_CONTROLLER(cfg_desc, ClassifierFreeGuidance, "cfg", "1.0.0",
                  "classifier-free guidance towards a meaning representation (both families)", kSchema,
                  RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_IGNORES_X0 | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
static const char kSemanticSchema[] = R"schema({
  "type": "object",
  "properties": {
    "fields": { "description": "E2E fields the text must express: an array such as [\"food[Italian]\", \"area[riverside]\"], or one string of them" },
    "gamma": { "type": "number", "minimum": 0, "maximum": 100, "description": "guidance scale (default 2)" }
  },
  "required": ["fields"], "additionalProperties": false
})schema";

RUDDER_CONTROLLER(semantic_desc, Semantic, "semantic", "1.0.0",
                  "the text expresses given meaning-representation fields (classifier-free guidance; both families)",
                  kSemanticSchema,
                  RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_IGNORES_X0 | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-cfg", &cfg_desc, &semantic_desc)
