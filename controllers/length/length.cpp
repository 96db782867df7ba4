// length: the text has exactly N tokens. A hard constraint, so it holds in every sample of both families.
#include <rudder/rudder_controller.hpp>

#include "../common/layout.hpp"
#include "../common/params.hpp"

namespace {

class Length final : public rudder::Controller {
public:
    Length(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        tokens_ = p->integer("tokens", 1, 1 << 20, rudder::json_input::kRequired).value_or(1);
        p.finish();
    }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        rudder::layout::check_length(tokens_, run, "length " + std::to_string(tokens_));
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        rudder::layout::write_length(step, out, run_.info(), tokens_);
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        verdict.satisfied = sample.n_tokens == tokens_ ? 1 : 0;
        verdict.score = static_cast<double>(sample.n_tokens);
    }

private:
    int64_t tokens_ = 0;
};

}  // namespace

static const char kSchema[] = R"schema({
  "type": "object",
  "properties": { "tokens": { "type": "integer", "minimum": 1, "description": "exact number of tokens" } },
  "required": ["tokens"], "additionalProperties": false
})schema";

RUDDER_CONTROLLER(length_desc, Length, "length", "1.0.0", "the text has exactly N tokens (hard constraint)", kSchema,
                  rudder::layout::kHardConstraintForms | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-length", &length_desc)
