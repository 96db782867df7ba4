// Continuous embedding diffusion (Diffusion-LM, CDCD): DDPM and DDIM over the model's Gaussian schedule, x0 from the
// controlled clean-token distribution, Diffusion-LM's gradient guidance and infilling, particles with resampling.
#include <ATen/ATen.h>

#include <cmath>

#include "commit.hpp"
#include "composer.hpp"
#include "diffusion_process.hpp"
#include "particles.hpp"
#include "sampler.hpp"
#include "step_inputs.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;

struct ContinuousSettings {
    std::string name = "ddim";
    int64_t steps = 200;
    double eta = 0.0;                // ddim only
    std::string x0 = "interpolate";  // model | interpolate | clamp
    double clamp_below_t = 0.0;      // clamp x0 to the nearest embedding once t <= this
    double noise_scale = 1.0;        // multiplies the noise each stochastic reverse step adds
    double temperature = 1.0;        // divides the controlled clean-token log-probabilities before they are used
};

const std::string kEvery = "the continuous samplers (ddpm, ddim)";

ContinuousSettings read_settings(SamplerObject& o) {
    ContinuousSettings out;
    if (!o.name.empty()) out.name = o.name;
    auto& r = o.reader;
    read_steps(o, out.steps);
    if (o.applies("eta"))
        if (auto v = r.number("eta", 0.0, 1.0)) out.eta = *v;
    if (o.applies("x0"))
        if (auto v = r.choice("x0", {"model", "interpolate", "clamp"})) out.x0 = *v;
    if (o.applies("clamp_below_t"))
        if (auto v = r.number("clamp_below_t", 0.0, 1.0)) out.clamp_below_t = *v;
    if (o.applies("noise_scale"))
        if (auto v = r.number("noise_scale", 0.0, 2.0)) out.noise_scale = *v;
    read_temperature(o, out.temperature);
    return out;
}

class ContinuousProcess final : public DiffusionProcess {
public:
    explicit ContinuousProcess(ContinuousSettings settings) : s_(std::move(settings)) {}
    const std::string& sampler() const override { return s_.name; }
    int64_t steps() const override { return s_.steps; }
    json settings() const override {
        json out = {{"name", s_.name},
                    {"steps", s_.steps},
                    {"x0", s_.x0},
                    {"clamp_below_t", s_.clamp_below_t},
                    {"noise_scale", s_.noise_scale},
                    {"temperature", s_.temperature}};
        if (s_.name == "ddim") out["eta"] = s_.eta;
        return out;
    }
    // Clamping keeps nothing of the distribution; the softmax and its product with the embeddings take two.
    double step_units() const override { return s_.x0 == "clamp" ? 0 : 2; }
    double gradient_units() const override { return 1; }
    at::Tensor run(int64_t samples, ReverseRun& run) const override;

private:
    at::Tensor estimate_x0(const at::Tensor& E, const at::Tensor& controlled, const at::Tensor& logits,
                           const at::Tensor& model_x0, double t) const;
    ContinuousSettings s_;
};

// The clean-token estimate from the controlled scores [B, L, V] (unnormalised; temperature not applied).
at::Tensor ContinuousProcess::estimate_x0(const at::Tensor& E, const at::Tensor& controlled, const at::Tensor& logits,
                                          const at::Tensor& model_x0, double t) const {
    // Diffusion-LM's clamping trick: snap to the embedding of the most likely token (the temperature cannot move it).
    if (s_.x0 == "clamp" || t <= s_.clamp_below_t) return at::embedding(E, most_likely(controlled));
    const double T = s_.temperature;
    auto probabilities = [T](const at::Tensor& scores) { return at::softmax(T == 1.0 ? scores : scores / T, -1); };
    const at::Tensor interpolated = at::matmul(probabilities(controlled), E);  // CDCD's score interpolation
    if (s_.x0 == "model" && model_x0.defined()) {
        // Keep the network's own estimate and move it by what the controllers changed in the distribution.
        return model_x0 + interpolated - at::matmul(probabilities(logits), E);
    }
    return interpolated;
}

// Diffusion-LM's guidance: K Adagrad steps on x_{t-1} maximising sum_i w_i log p_i(c | x) minus the fluency term
// lambda |x - mu|^2 / sigma^2. DDIM with eta = 0 has sigma = 0; the marginal standard deviation at t_next stands in
// for it there. Returns the guided x.
at::Tensor guide(at::Tensor x, const ContinuousSampler::Result& step, const plugins::StepInputs& in, ReverseRun& run,
                 Particles& swarm, int64_t i) {
    const GuidanceSpec& guidance = run.recipe.guidance;
    const double ab = run.model.schedule.alpha_bar_at(in.t_next);
    const double sigma = step.sigma > 0 ? step.sigma : std::sqrt(std::max(1.0 - ab, 1e-8));
    at::Tensor accum = at::zeros_like(x);
    for (int64_t k = 0; k < guidance.gradient_steps; ++k) {
        Composer::Guided guided = run.composer.guide(guide_inputs(in, x, k));
        if (!guided.grad.defined()) break;
        if (guidance.particles > 1) swarm.score(guided.reward, i);
        at::Tensor grad = guided.grad - (2.0 * guidance.fluency_weight / (sigma * sigma)) * (x - step.mean);
        accum.add_(grad * grad);
        x = x + guidance.step_size * grad / (accum.sqrt() + 1e-10);
    }
    return x;
}

at::Tensor ContinuousProcess::run(int64_t samples, ReverseRun& run) const {
    // Each sample is `particles` sequences, particle j of sample s at row s * particles + j.
    const GuidanceSpec& guidance = run.recipe.guidance;
    const int64_t particles = guidance.particles, batch = samples * particles;
    const int64_t L = run.recipe.max_length, V = run.model.tokenizer->vocab_size();
    const at::Tensor E = run.model.denoiser->embedding();
    const ContinuousSampler sampler(run.model.schedule,
                                    s_.name == "ddpm" ? ContinuousSampler::Kind::ddpm : ContinuousSampler::Kind::ddim,
                                    s_.steps, s_.eta, s_.noise_scale);
    const int64_t steps = sampler.steps(), mask_id = run.model.tokenizer->mask_id();
    Denoiser& denoiser = *run.model.denoiser;
    at::Tensor x = sampler.init({batch, L, E.size(1)}, run.gen, E);
    const at::Tensor every_row = at::arange(batch * L, at::TensorOptions().dtype(at::kLong).device(run.device));
    const bool uses_evidence = denoiser.traits().uses_evidence;
    // The previous step's clean estimate, for a self-conditioned network (CDCD); none before the first step.
    at::Tensor previous_x0;
    const auto denoise = [&](double t, const Combined& constraints) {
        Evidence e = evidence_of(constraints, batch, L, V, uses_evidence);
        e.self_condition = previous_x0;
        DenoiserOutput out = denoiser.denoise(x, t, {}, e);
        ++run.stats.denoiser_calls;
        run.stats.denoised_sequences += batch;
        return out;
    };
    Combined last;
    // Particles: each one's reward (the controllers' weighted log p(c | x) at its last guidance) and its reward when
    // last resampled.
    Particles swarm(samples, particles, guidance.resample_scale);

    for (int64_t i = 0; i < steps; ++i) {
        const double t = sampler.t(i), t_next = sampler.t_next(i);
        DenoiserOutput out = denoise(t, last);
        at::Tensor logits = out.logits.to(at::kFloat).reshape({batch * L, V}), logp;

        // The controllers see the log-probabilities and their most likely tokens only when one of them reads them.
        const Composer::Reads reads = run.composer.reads(t);
        const bool steered = reads.any || run.composer.wants_guidance(t_next);
        const at::Tensor tokens =
            steered ? most_likely(logits).view({batch, L}) : at::zeros({batch, L}, every_row.options());
        const plugins::StepInputs in = predict_inputs({i, steps, t, t_next, x, tokens, {}, every_row, previous_x0},
                                                      reads, logits, logits, logp, run.recipe.candidates);
        Combined combined = reads.any ? run.composer.predict(in) : Combined{};
        combined.rows = every_row;
        if (uses_evidence && !same_constraints(combined, last)) {
            out = denoise(t, combined);
            logits = out.logits.to(at::kFloat).reshape({batch * L, V});
        }

        const at::Tensor controlled = Composer::controlled(logits, combined, {}, mask_id).view({batch, L, V});
        at::Tensor x0_hat = estimate_x0(E, controlled, logits.view({batch, L, V}), out.x0, t);
        at::Tensor fixed_mask;
        if (combined.fixed.defined()) {
            fixed_mask = combined.fixed.ge(0).unsqueeze(-1);
            x0_hat = at::where(fixed_mask, at::embedding(E, combined.fixed.clamp_min(0)), x0_hat);
        }
        previous_x0 = x0_hat;
        const ContinuousSampler::Result res = sampler.step(x, x0_hat, i, run.gen);
        x = res.sample;
        if (t_next > 0 && guidance.gradient_steps > 0 && t_next > guidance.until_t &&
            run.composer.wants_guidance(t_next))
            x = guide(x, res, in, run, swarm, i);
        if (fixed_mask.defined() && i + 1 < steps) {
            // Infilling as Diffusion-LM does it: fixed positions carry the fixed token's embedding, noised to the
            // level of the next step.
            const at::Tensor noised =
                sampler.q_sample(at::embedding(E, combined.fixed.clamp_min(0)), sampler.timestep(i + 1), run.gen);
            x = at::where(fixed_mask, noised, x);
        }
        // A NaN state would round to arbitrary tokens (empty texts) and go unnoticed: checked on [B, L, D] only.
        if (!x.isfinite().all().item<bool>()) {
            const at::Tensor bad = x.isfinite().all(-1).logical_not().nonzero()[0];
            const int64_t b = bad[0].item<int64_t>(), position = bad[1].item<int64_t>();
            throw run.fault_at(i, b, position, logits[b * L + position]);
        }
        last = std::move(combined);
        if (guidance.resample_every > 0 && (i + 1) % guidance.resample_every == 0 && i + 1 < steps && swarm.scored()) {
            const at::Tensor rows = swarm.resample(run.gen).to(run.device);
            x = x.index_select(0, rows);
            if (previous_x0.defined()) previous_x0 = previous_x0.index_select(0, rows);
            last = select_sequences(last, rows, batch, L);
            ++run.stats.resamplings;
        }
        // The current best guess: the most likely token of the controlled clean-token distribution (each sample's
        // leading particle).
        run.tick(i + 1, t_next, [&] { return swarm.leading(most_likely(controlled)); });
    }
    // Round to the nearest embedding (Diffusion-LM's decoding), within the last step's hard constraints: the nearest
    // embedding has the largest 2 x.e - |e|^2 (|x|^2 is the same for every token).
    const at::Tensor closeness = at::addmm(E.pow(2).sum(-1).neg(), x.reshape({batch * L, -1}), E.t(), 1.0, 2.0);
    run.stats.steps += steps;
    const at::Tensor rounded = Composer::controlled(closeness, last, {}, mask_id);
    at::Tensor tokens = most_likely(rounded).view({batch, L});
    if (run.composer.commits()) {
        // The COMMIT controllers see every position as free and the rounding as proposals; a position they refuse
        // takes the nearest embedding they allow there.
        const Redraw nearest = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
            at::Tensor again = rounded.index_select(0, which);
            Composer::forbid(again, forbidden_bits);
            return most_likely(again);
        };
        // Nothing is placed before the rounding: the positions not committed yet read as masked, those committed in
        // an earlier round hold their tokens.
        const CommitState state = [&](const at::Tensor& pending) {
            const at::Tensor masked =
                at::zeros({batch * L}, tokens.options().dtype(at::kByte)).index_fill_(0, pending, 1);
            return std::make_pair(tokens, masked.view({batch, L}));
        };
        run.stats.redrawn += commit_drawn(run.composer, tokens, every_row, tokens.reshape({-1}).clone(), state, nearest,
                                          steps, steps, 0.0, 0.0)
                                 .redrawn;
    }
    return swarm.chosen(tokens);
}

// The checks of a continuous recipe against its model.
void check(const ContinuousSettings& s, const Model& model, const Recipe& recipe, std::vector<RecipeIssue>& issues) {
    if (recipe.guidance.particles > 1 && recipe.guidance.gradient_steps == 0)
        issues.push_back({"/guidance/particles",
                          "particles are weighed by the controllers' log p(c | x), which "
                          "they report during gradient guidance; gradient_steps is 0"});
    if (s.steps > model.schedule.T())
        issues.push_back({"/sampler/steps", "model '" + model.name + "' was trained with " +
                                                std::to_string(model.schedule.T()) + " steps; asked for " +
                                                std::to_string(s.steps)});
}

}  // namespace

ProcessRoom continuous_room() {
    ProcessRoom room;
    room.family = Family::continuous;
    room.models = "continuous models";
    room.model_is = "is continuous";
    room.default_sampler = "ddim";
    room.samplers = {"ddpm", "ddim"};
    room.keys = {SamplerKey::of("steps", {}, kEvery),
                 SamplerKey::of("temperature", {}, kEvery),
                 SamplerKey::of("eta", {"ddim"}, "the ddim sampler"),
                 SamplerKey::of("x0", {}, kEvery),
                 SamplerKey::of("clamp_below_t", {}, kEvery),
                 SamplerKey::of("noise_scale", {}, kEvery)};
    room.runs = [](const Model& model) { return model.family == Family::continuous; };
    room.read = [](SamplerObject& o) { read_settings(o); };
    room.make = [](const Model& model, const Recipe& recipe, SamplerObject& sampler,
                   std::vector<RecipeIssue>& issues) -> std::unique_ptr<DiffusionProcess> {
        ContinuousSettings settings = read_settings(sampler);
        check(settings, model, recipe, issues);
        return std::make_unique<ContinuousProcess>(std::move(settings));
    };
    return room;
}

}  // namespace rudder
