// Uniform discrete diffusion (SEDD's uniform graph, UDLM, DUO): every position holds a token and is drawn anew at
// every step, so the network runs at every step and the controllers see every position (`masked` all zero, x0 the
// clean-token estimate). Their deltas reweight the step's transition probabilities, p(x_s = y | x_t) exp(delta_y), as
// classifier guidance does for uniform-noise models (Schiff et al. 2025, "Simple guidance mechanisms for discrete
// diffusion models"; on the last step that is the clean estimate itself): a forbidden token is never drawn, at any
// step, and a fixed token holds from the step that fixes it on. Temperature, top-k and top-p shape the clean
// estimate the step is built from.
#include <ATen/ATen.h>

#include "commit.hpp"
#include "composer.hpp"
#include "diffusion_process.hpp"
#include "sampler.hpp"
#include "step_inputs.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;

struct UniformSettings {
    std::string name = "analytic";  // euler | analytic
    int64_t steps = 200;
    double temperature = 1.0;  // shapes the model's prediction (UniformSampler::step_log_probs)
    int64_t top_k = 0;
    double top_p = 1.0;
};

UniformSettings read_uniform_settings(SamplerObject& o) {
    UniformSettings out;
    if (!o.name.empty()) out.name = o.name;
    read_steps(o, out.steps);
    read_temperature(o, out.temperature, /*zero_is_arg_max=*/true);
    read_truncation(o, out.top_k, out.top_p);
    return out;
}

class UniformProcess final : public DiffusionProcess {
public:
    explicit UniformProcess(UniformSettings settings) : s_(std::move(settings)) {}
    const std::string& sampler() const override { return s_.name; }
    int64_t steps() const override { return s_.steps; }
    json settings() const override {
        return {{"name", s_.name},
                {"steps", s_.steps},
                {"temperature", s_.temperature},
                {"top_k", s_.top_k},
                {"top_p", s_.top_p}};
    }
    at::Tensor run(int64_t batch, ReverseRun& run) const override;
    // The network's output (3.5, as absorbing), the step's deltas and clean estimate (2 float32) and its
    // transition, about four float64 passes.
    double step_units() const override { return 13.5; }
    double gradient_units() const override { return 3; }

private:
    UniformSettings s_;
};

at::Tensor UniformProcess::run(int64_t batch, ReverseRun& run) const {
    const int64_t L = run.recipe.max_length, V = run.model.tokenizer->vocab_size();
    const int64_t mask_id = run.model.tokenizer->mask_id();
    Denoiser& denoiser = *run.model.denoiser;
    const UniformSampler sampler(*denoiser.traits().uniform_noise,
                                 s_.name == "euler" ? UniformSampler::Kind::euler : UniformSampler::Kind::analytic,
                                 s_.steps);
    const bool every_row = denoiser.traits().uses_evidence;
    const at::Tensor all_rows = at::arange(batch * L, at::TensorOptions().dtype(at::kLong).device(run.device));
    at::Tensor tokens = sampler.init(batch, L, V, run.gen, run.device);
    at::Tensor logits, logp;
    Combined seen;
    auto denoise = [&](double t, const Combined& constraints) {
        logits = denoiser.denoise(tokens, t, {}, evidence_of(constraints, batch, L, V, every_row))
                     .logits.to(at::kFloat)
                     .reshape({batch * L, V});
        logp = at::Tensor();
        ++run.stats.denoiser_calls;
        run.stats.denoised_sequences += batch;
        seen = constraints;
    };
    const auto best_guess = [&] { return logits.defined() ? most_likely(logits).view({batch, L}) : tokens; };
    const at::Tensor nothing_masked = at::zeros({batch, L}, tokens.options().dtype(at::kByte));

    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const double t = sampler.t(i), t_next = sampler.t_next(i);
        denoise(t, seen);
        const Composer::Reads reads = run.composer.reads(t);
        const plugins::StepInputs in =
            predict_inputs({i, sampler.steps(), t, t_next, {}, tokens, nothing_masked, all_rows, {}}, reads, logits,
                           logits, logp, run.recipe.candidates);
        const Combined combined = reads.any ? run.composer.predict(in) : rows_only(in.rows);
        if (combined.fixed.defined()) {
            const at::Tensor is_fixed = combined.fixed.ge(0);
            if (is_fixed.logical_and(tokens.ne(combined.fixed)).any().item<bool>()) {
                tokens = at::where(is_fixed, combined.fixed, tokens);
                denoise(t, combined);
            }
        }
        if (every_row && !same_constraints(combined, seen)) denoise(t, combined);

        // The controls as deltas on the network's (finite) scores: -inf where a token is forbidden or not the fixed
        // one.
        const at::Tensor delta = Composer::controlled(logits, combined, {}, mask_id) - logits;
        at::Tensor scores =
            sampler.step_log_probs(logits, tokens.view({-1}), i, s_.temperature, s_.top_k, s_.top_p) + delta;
        // A fixed position keeps its token whatever the step would give it (Euler's large steps can give staying
        // probability 0): its row is the constraint alone.
        if (combined.fixed.defined())
            scores = at::where(combined.fixed.ge(0).view({-1, 1}), delta.to(scores.scalar_type()), scores);
        const auto draw = [&](const at::Tensor& rows_scores, const at::Tensor& rows) {
            try {
                return DiscreteSampler::draw(rows_scores, run.gen);
            } catch (const NothingToSample& e) {
                const int64_t position = rows.defined() ? rows[e.row].item<int64_t>() : e.row;
                throw run.fault_at(i, position / L, position % L, logits[position]);
            }
        };
        const at::Tensor drawn = draw(scores, at::Tensor());
        run.stats.rows_drawn += batch * L;
        // Every position is drawn anew: the COMMIT controllers (commit.hpp) see them all as free.
        const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
            at::Tensor again = scores.index_select(0, which);
            Composer::forbid(again, forbidden_bits);
            return draw(again, which);
        };
        const CommitState state = [&](const at::Tensor&) { return std::make_pair(tokens, nothing_masked); };
        run.stats.redrawn +=
            commit_drawn(run.composer, tokens, all_rows, drawn, state, redraw, i, sampler.steps(), t, t_next).redrawn;
        run.tick(i + 1, t_next, best_guess);
    }
    run.stats.steps += sampler.steps();
    return tokens;
}

// The checks of a uniform-noise recipe against its model.
void check(const Model& model, const Recipe& recipe, std::vector<RecipeIssue>& issues) {
    if (recipe.guidance.particles <= 1) return;
    issues.push_back({"/guidance/particles", "model '" + model.name +
                                                 "' diffuses with uniform noise; "
                                                 "particles are for continuous and absorbing models"});
    if (recipe.guidance.resample_every > 0)
        issues.push_back({"/guidance/resample_every",
                          "discrete particles are only chosen between at the end: "
                          "resampling them is for continuous models"});
}

}  // namespace

ProcessRoom uniform_room() {
    ProcessRoom room;
    room.family = Family::discrete;
    room.models = "uniform-noise discrete models";
    room.model_is = "diffuses with uniform noise (no position is ever masked)";
    room.default_sampler = "analytic";
    room.samplers = {"analytic", "euler"};
    room.other_samplers_refusal = "unmasks positions";
    // The absorbing process's keys that have no meaning here are refused, saying why.
    room.keys = {SamplerKey::of("steps", {}, kDiscreteSamplers),
                 SamplerKey::of("temperature", {}, kDiscreteSamplers),
                 SamplerKey::of("top_k", {}, kDiscreteSamplers),
                 SamplerKey::of("top_p", {}, kDiscreteSamplers),
                 SamplerKey::refuse("prompt_guidance",
                                    "there is no mask to hide the fixed tokens with, so no "
                                    "unconditional pass; prompt guidance is for absorbing models"),
                 SamplerKey::refuse("remask",
                                    "every token may change at every step already; remasking is for "
                                    "absorbing models"),
                 SamplerKey::refuse("cache",
                                    "every token may change at every step, so the network runs at every "
                                    "step; 'cache' is for absorbing models")};
    room.runs = [](const Model& model) {
        return model.family == Family::discrete && model.denoiser->traits().uniform_noise.has_value();
    };
    room.read = [](SamplerObject& o) { read_uniform_settings(o); };
    room.make = [](const Model& model, const Recipe& recipe, SamplerObject& sampler,
                   std::vector<RecipeIssue>& issues) -> std::unique_ptr<DiffusionProcess> {
        check(model, recipe, issues);
        return std::make_unique<UniformProcess>(read_uniform_settings(sampler));
    };
    return room;
}

}  // namespace rudder
