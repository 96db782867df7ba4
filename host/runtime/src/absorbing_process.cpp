// Absorbing (masked) discrete diffusion (MDLM, SEDD's absorbing graph, BD3-LM, LLaDA, Dream): positions start masked
// and unmask once; euler, analytic (with ReMDM's remasking), first hitting and confidence (in blocks) decide which and
// when; MDLM's cache skips the network while no token changed; prompt guidance; particles chosen at the end.
#include <ATen/ATen.h>

#include <limits>

#include "commit.hpp"
#include "composer.hpp"
#include "diffusion_process.hpp"
#include "particles.hpp"
#include "sampler.hpp"
#include "step_inputs.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;

// ReMDM remasking (Wang et al. 2025): each reverse step from t to s masks every committed token again with
// probability sigma, and unmasks masked positions a little more often, so that the share masked at s stays m(s).
// sigma is at most sigma_max = min(1, m(s) / (1 - m(t))), the most the process allows; "cap" takes min(eta,
// sigma_max), "rescale" eta * sigma_max. Only while from_t >= t >= to_t.
struct RemaskSettings {
    std::string strategy = "none";  // none | cap | rescale
    double eta = 0.02;
    double from_t = 1.0, to_t = 0.0;
};

struct AbsorbingSettings {
    std::string name = "analytic";  // euler | analytic | first_hitting | confidence
    int64_t steps = 200;            // first_hitting: max_length
    bool cache = true;              // skip the network when no token changed since its last call
    double temperature = 1.0;       // divides the controlled clean-token log-probabilities before they are drawn from
    int64_t top_k = 0;              // draw among each position's k most likely tokens only (0: all)
    double top_p = 1.0;             // draw within the smallest set of tokens holding this probability
    std::string order =
        "probability";         // confidence: which drawn tokens are kept first (probability | margin | entropy)
    int64_t block_length = 0;  // confidence, first_hitting: positions unmask block by block, left to right (0: one)
    RemaskSettings remask;     // analytic: committed tokens may be masked again (ReMDM)
    // Classifier-free guidance towards the tokens hard constraints fix (LLaDA's unsupervised cfg_scale w): scores
    // uncond + (w + 1)(cond - uncond), uncond the network with those tokens masked again.
    double prompt_guidance = 0.0;
};

const std::string kDiscrete = "the discrete samplers";

AbsorbingSettings read_settings(SamplerObject& o) {
    AbsorbingSettings out;
    if (!o.name.empty()) out.name = o.name;
    auto& r = o.reader;
    read_steps(o, out.steps);
    if (o.applies("cache"))
        if (auto v = r.boolean("cache")) out.cache = *v;
    read_temperature(o, out.temperature);
    read_truncation(o, out.top_k, out.top_p);
    if (o.applies("order"))
        if (auto v = r.choice("order", {"probability", "margin", "entropy"})) out.order = *v;
    if (o.applies("block_length"))
        if (auto v = r.integer("block_length", 1, int64_t{1} << 31)) out.block_length = *v;
    if (o.applies("prompt_guidance"))
        if (auto v = r.number("prompt_guidance", 0.0, 100.0)) out.prompt_guidance = *v;
    if (o.applies("remask"))
        if (auto remask = r.object("remask")) {
            json_input::ObjectReader m(*remask, r.pointer("remask"), r.issues());
            if (auto v = m.choice("strategy", {"none", "cap", "rescale"}, json_input::kRequired))
                out.remask.strategy = *v;
            if (auto v = m.number("eta", 0.0, 1.0)) out.remask.eta = *v;
            read_time_window(m, r, "remask", out.remask.from_t, out.remask.to_t);
        }
    return out;
}

DiscreteSampler::Kind kind_of(const std::string& name) {
    if (name == "first_hitting") return DiscreteSampler::Kind::first_hitting;
    if (name == "confidence") return DiscreteSampler::Kind::confidence;
    return name == "euler" ? DiscreteSampler::Kind::euler : DiscreteSampler::Kind::analytic;
}

DiscreteSampler sampler_of(const AbsorbingSettings& s, const MaskSchedule& schedule) {
    const auto order = s.order == "margin"    ? DiscreteSampler::Order::margin
                       : s.order == "entropy" ? DiscreteSampler::Order::entropy
                                              : DiscreteSampler::Order::probability;
    DiscreteSampler::Remasking remasking;
    using Strategy = DiscreteSampler::Remasking::Strategy;
    remasking.strategy = s.remask.strategy == "cap"       ? Strategy::cap
                         : s.remask.strategy == "rescale" ? Strategy::rescale
                                                          : Strategy::none;
    remasking.eta = s.remask.eta;
    remasking.from_t = s.remask.from_t;
    remasking.to_t = s.remask.to_t;
    return DiscreteSampler(schedule, kind_of(s.name), s.steps, s.block_length, order, remasking);
}

// One batch's reverse loop: its state between steps, and the step.
class AbsorbingLoop {
public:
    AbsorbingLoop(const AbsorbingSettings& s, ReverseRun& run, int64_t samples)
        : s_(s), run_(run), particles_(run.recipe.guidance.particles), batch_(samples * particles_),
          L_(run.recipe.max_length), V_(run.model.tokenizer->vocab_size()), mask_id_(run.model.tokenizer->mask_id()),
          sampler_(sampler_of(s, run.model.mask_schedule)),
          always_fresh_(!s.cache || run.composer.needs_fresh_logits()), every_row_(run.model.denoiser->uses_evidence()),
          swarm_(samples, particles_, run.recipe.guidance.resample_scale) {
        tokens_ = sampler_.init(batch_, L_, mask_id_, run.device);
        const auto flags = tokens_.options().dtype(at::kBool);
        if (s.prompt_guidance > 0) prompt_ = at::zeros({batch_, L_}, flags);
        // Remasking never touches a position a controller fixed: a hard constraint stays met.
        if (sampler_.remasks()) pinned_ = at::zeros({batch_, L_}, flags);
    }

    at::Tensor run() {
        for (int64_t i = 0; i < sampler_.steps(); ++i) step(i);
        run_.stats.steps += sampler_.steps();
        return swarm_.chosen(tokens_);
    }

private:
    void step(int64_t i);
    void denoise(double t, const Combined& constraints);
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits);

    // The current best guess: committed tokens, and the network's most likely token where still masked.
    at::Tensor best_guess() const {
        if (!logits_.defined()) return tokens_;
        at::Tensor scores = logits_.clone();
        scores.select(1, mask_id_).fill_(-std::numeric_limits<float>::infinity());
        return at::where(tokens_.eq(mask_id_), most_likely(scores).view({batch_, L_}), tokens_);
    }

    const AbsorbingSettings& s_;
    ReverseRun& run_;
    // Each sample is `particles_` sequences, particle j of sample s at row s * particles_ + j; the one whose reward
    // (the steering controllers' weighted log p(c | x) at the last step they scored) is highest is the sample.
    const int64_t particles_, batch_, L_, V_, mask_id_;
    const DiscreteSampler sampler_;
    const bool always_fresh_;
    // A denoiser that conditions on the constraints takes them whole: the controllers then see every position.
    const bool every_row_;
    Particles swarm_;
    at::Tensor tokens_;
    at::Tensor logits_, logp_;  // the network's scores for `tokens_` [B * L, V], and their log-softmax once needed
    Combined seen_;             // the constraints the denoiser's last call was given
    bool stale_ = true;
    // Prompt guidance (LLaDA's unsupervised classifier-free guidance): the positions hard constraints have fixed are
    // the prompt; the unconditional pass sees them masked again, without the constraints as evidence.
    at::Tensor prompt_;
    at::Tensor pinned_;  // remasking: the positions a controller fixed
};

void AbsorbingLoop::denoise(double t, const Combined& constraints) {
    Denoiser& denoiser = *run_.model.denoiser;
    logits_ =
        denoiser.denoise(tokens_, t, {}, evidence_of(constraints, batch_, L_, V_, every_row_)).logits.to(at::kFloat);
    ++run_.stats.denoiser_calls;
    run_.stats.denoised_sequences += batch_;
    if (prompt_.defined() && prompt_.any().item<bool>()) {
        const at::Tensor unconditional =
            denoiser.denoise(tokens_.masked_fill(prompt_, mask_id_), t, {}, {}).logits.to(at::kFloat);
        logits_ = unconditional + (s_.prompt_guidance + 1.0) * (logits_ - unconditional);
        ++run_.stats.denoiser_calls;
        run_.stats.denoised_sequences += batch_;
    }
    logits_ = logits_.reshape({batch_ * L_, V_});
    logp_ = at::Tensor();
    stale_ = false;
    seen_ = constraints;
}

void AbsorbingLoop::step(int64_t i) {
    const double t = sampler_.t(i), t_next = sampler_.t_next(i);
    const at::Tensor masked = tokens_.eq(mask_id_);
    // Which positions unmask is drawn first: a step where none does changes nothing, and costs nothing more.
    at::Tensor unmask = sampler_.choose(masked, i, run_.gen);
    // Which committed tokens are masked again (remasking): chosen from the step's state, as unmasking is, and
    // applied after the draw, so this step's draws still see them.
    at::Tensor remask = sampler_.remasks()
                            ? sampler_.remask(masked.logical_not().logical_and_(pinned_.logical_not()), i, run_.gen)
                            : at::Tensor();
    const bool remasks = remask.defined() && remask.any().item<bool>();
    const auto apply_remask = [&] {
        if (!remasks) return;
        tokens_ = tokens_.masked_fill(remask, mask_id_);
        run_.stats.remasked += remask.sum().item<int64_t>();
        stale_ = true;
    };
    const auto tick = [&] { run_.tick(i + 1, t_next, [&] { return swarm_.leading(best_guess()); }); };
    if (!unmask.any().item<bool>()) {
        apply_remask();
        tick();
        return;
    }
    // MDLM's cache: the network's output depends only on the tokens, so reuse it while none changed.
    if (stale_ || always_fresh_) denoise(t, seen_);

    const at::Tensor rows =
        every_row_ ? at::arange(batch_ * L_, tokens_.options()) : unmask.view({-1}).nonzero().squeeze(1);
    // The network's scores at the step's rows: the controllers' candidates and the draw read them.
    at::Tensor row_logits = every_row_ ? logits_ : logits_.index_select(0, rows);
    const Composer::Reads reads = run_.composer.reads(t);
    const plugins::StepInputs in =
        predict_inputs({i, sampler_.steps(), t, t_next, {}, tokens_, masked.to(at::kByte), rows, {}}, reads, logits_,
                       row_logits, logp_, run_.recipe.candidates);
    const Combined combined = reads.any ? run_.composer.predict(in) : rows_only(in.rows);
    if (particles_ > 1 && combined.reward.any()) swarm_.score(combined.reward, i);

    // Fixed tokens are committed at once, and the denoiser sees them (and, if it can use them, the other
    // constraints) before this step samples. A position fixed now is not drawn.
    bool changed = false;
    if (combined.fixed.defined()) {
        const at::Tensor is_fixed = combined.fixed.ge(0);
        if (is_fixed.logical_and(tokens_.ne(combined.fixed)).any().item<bool>()) {
            tokens_ = at::where(is_fixed, combined.fixed, tokens_);
            changed = true;
        }
        unmask.logical_and_(is_fixed.logical_not());
        if (prompt_.defined()) prompt_.logical_or_(is_fixed);
        if (pinned_.defined()) {
            pinned_.logical_or_(is_fixed);
            remask.logical_and_(is_fixed.logical_not());
        }
    }
    if (changed || (every_row_ && !same_constraints(combined, seen_))) {
        denoise(t, combined);
        row_logits = every_row_ ? logits_ : logits_.index_select(0, in.rows);
    }
    draw(i, unmask, combined, row_logits);
    apply_remask();
    tick();
}

// Draws at the positions that unmask: the controlled scores of those rows only, at the temperature; commits them
// through the COMMIT controllers (commit.hpp), drawing again within what they allow the rows they refuse.
void AbsorbingLoop::draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits) {
    const at::Tensor drawn_at_row = unmask.view({-1}).index_select(0, combined.rows).nonzero().squeeze(1);
    if (drawn_at_row.size(0) == 0) return;
    const at::Tensor positions = combined.rows.index_select(0, drawn_at_row);
    // Every row drawn (none fixed this step): the combination's rows as they are, no copy of them.
    const bool every_row_drawn = drawn_at_row.size(0) == combined.rows.size(0);
    const at::Tensor pick = every_row_drawn ? at::Tensor() : drawn_at_row;
    at::Tensor scores =
        Composer::controlled(pick.defined() ? row_logits.index_select(0, pick) : row_logits, combined, pick, mask_id_);
    if (s_.temperature != 1.0) scores.div_(s_.temperature);
    const bool truncates = s_.top_k > 0 || s_.top_p < 1.0;
    // A row a COMMIT controller refuses is drawn again from its scores before truncation, within what it allows.
    const at::Tensor untruncated = run_.composer.commits() && truncates ? scores.clone() : scores;
    if (truncates) DiscreteSampler::truncate(scores, s_.top_k, s_.top_p);
    const auto draw_rows = [&](const at::Tensor& rows_scores, const at::Tensor& at_positions) {
        try {
            return DiscreteSampler::draw(rows_scores, run_.gen);
        } catch (const NothingToSample& e) {
            const int64_t position = at_positions[e.row].item<int64_t>();
            throw run_.fault_at(i, position / L_, position % L_, logits_[position]);
        }
    };
    at::Tensor drawn = draw_rows(scores, positions);
    at::Tensor committed = positions, kept;
    if (sampler_.kind() == DiscreteSampler::Kind::confidence) {
        // Of the tokens drawn, the ones the model is most confident in are kept; the rest stay masked.
        kept = sampler_.kept_rows(positions, scores, drawn, batch_, L_, i);
        committed = positions.index_select(0, kept);
        drawn = drawn.index_select(0, kept);
    }
    run_.stats.rows_drawn += positions.size(0);
    const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
        const at::Tensor rows = kept.defined() ? kept.index_select(0, which) : which;
        at::Tensor again = untruncated.index_select(0, rows);
        Composer::forbid(again, forbidden_bits);
        if (truncates) DiscreteSampler::truncate(again, s_.top_k, s_.top_p);
        return draw_rows(again, positions.index_select(0, rows));
    };
    const CommitState state = [&](const at::Tensor&) {  // the rows not committed yet are still masked
        return std::make_pair(tokens_, tokens_.eq(mask_id_).to(at::kByte));
    };
    const CommitOutcome outcome = commit_drawn(run_.composer, tokens_, committed, drawn, state, redraw, i,
                                               sampler_.steps(), sampler_.t(i), sampler_.t_next(i));
    run_.stats.redrawn += outcome.redrawn;
    stale_ = true;
}

class AbsorbingProcess final : public DiffusionProcess {
public:
    explicit AbsorbingProcess(AbsorbingSettings settings) : s_(std::move(settings)) {}
    const std::string& sampler() const override { return s_.name; }
    int64_t steps() const override { return s_.steps; }
    json settings() const override;
    at::Tensor run(int64_t samples, ReverseRun& run) const override { return AbsorbingLoop(s_, run, samples).run(); }
    // The network's output in its SUBS form (log-softmax, clamp, carry-over); prompt guidance adds the unconditional
    // output and the combination. A discrete gradient adds its buffer and the Taylor terms.
    double step_units() const override { return 3.5 + (s_.prompt_guidance > 0 ? 2 : 0); }
    double gradient_units() const override { return 3; }
    // The analytic sampler skips a step's evaluation when no position of the batch unmasks (most steps, for one short
    // sequence; almost none in a large batch).
    bool batching_pays() const override { return s_.name != "analytic"; }

private:
    AbsorbingSettings s_;
};

json AbsorbingProcess::settings() const {
    json out = {{"name", s_.name},   {"cache", s_.cache}, {"temperature", s_.temperature},
                {"top_k", s_.top_k}, {"top_p", s_.top_p}, {"prompt_guidance", s_.prompt_guidance}};
    if (s_.name != "first_hitting") out["steps"] = s_.steps;
    if (s_.name == "confidence") out["order"] = s_.order;
    if ((s_.name == "confidence" || s_.name == "first_hitting") && s_.block_length > 0)
        out["block_length"] = s_.block_length;
    if (s_.name == "analytic" && s_.remask.strategy != "none")
        out["remask"] = {{"strategy", s_.remask.strategy},
                         {"eta", s_.remask.eta},
                         {"from_t", s_.remask.from_t},
                         {"to_t", s_.remask.to_t}};
    return out;
}

// BD3-LM: a block is predicted from the finished blocks before it, never from masked ones.
void check_blocks(const AbsorbingSettings& s, const Model& model, int64_t block, std::vector<RecipeIssue>& issues) {
    const std::string of = "model '" + model.name + "' predicts each block of " + std::to_string(block) +
                           " positions from the finished blocks before it";
    const std::string how =
        "; sample it block by block, e.g. {\"name\": \"first_hitting\", \"block_length\": " + std::to_string(block) +
        "}";
    const int64_t b = s.block_length;
    if (s.name != "first_hitting" && s.name != "confidence")
        issues.push_back({"/sampler/name", of + " (block diffusion); sampler '" + s.name +
                                               "' unmasks the whole sequence at once" + how});
    else if (b < 1 || block % b != 0)
        issues.push_back({"/sampler/block_length", of + ": block_length must divide " + std::to_string(block) +
                                                       (b < 1 ? " (none given)" : ", not be " + std::to_string(b)) +
                                                       how});
    // Its training never shows it a masked block before the one it predicts, which is what the unconditional pass
    // would be.
    if (s.prompt_guidance > 0)
        issues.push_back({"/sampler/prompt_guidance", "model '" + model.name +
                                                          "' predicts each block from the "
                                                          "finished blocks before it and was never trained with them "
                                                          "masked, so it has no unconditional prediction to guide away "
                                                          "from; prompt guidance is for models that unmask anywhere"});
}

// The checks of an absorbing recipe against its model and length.
void check(const AbsorbingSettings& s, const Model& model, const Recipe& recipe, std::vector<RecipeIssue>& issues) {
    if (const int64_t block = model.denoiser->decoding_block(); block > 0) check_blocks(s, model, block, issues);
    const int64_t L = recipe.max_length, b = s.block_length;
    if ((s.name == "confidence" || s.name == "first_hitting") && b > L)
        issues.push_back({"/sampler/block_length",
                          "block_length " + std::to_string(b) + " is longer than max_length " + std::to_string(L)});
    if (s.name == "confidence") {
        const int64_t blocks = DiscreteSampler::block_count(L, b);
        if (s.steps < blocks)
            issues.push_back({"/sampler/steps", std::to_string(s.steps) + " steps for " + std::to_string(blocks) +
                                                    " blocks of " + std::to_string(b) +
                                                    " positions: the confidence sampler needs a step per block"});
    }
    if (recipe.guidance.particles > 1 && recipe.guidance.resample_every > 0)
        issues.push_back({"/guidance/resample_every",
                          "discrete particles are only chosen between at the end: "
                          "resampling them is for continuous models"});
}

}  // namespace

ProcessRoom absorbing_room() {
    ProcessRoom room;
    room.family = Family::discrete;
    room.models = "absorbing discrete models";
    room.model_is = "is discrete";
    room.default_sampler = "analytic";
    room.samplers = {"euler", "analytic", "first_hitting", "confidence"};
    room.keys = {SamplerKey::except("steps", {"euler", "analytic", "confidence"},
                                    "'steps' does not apply to the first_hitting sampler: it takes one step per "
                                    "position (max_length), each unmasking one position per sample"),
                 SamplerKey::of("temperature", {}, kDiscrete),
                 SamplerKey::of("cache", {}, kDiscrete),
                 SamplerKey::of("top_k", {}, kDiscrete),
                 SamplerKey::of("top_p", {}, kDiscrete),
                 SamplerKey::of("prompt_guidance", {}, kDiscrete),
                 SamplerKey::of("order", {"confidence"}, "the confidence sampler", true),
                 SamplerKey::of("block_length", {"confidence", "first_hitting"},
                                "the confidence and first_hitting samplers", true),
                 SamplerKey::of("remask", {"analytic"}, "the analytic sampler", true)};
    room.runs = [](const Model& model) { return model.family == Family::discrete; };
    room.read = [](SamplerObject& o) { read_settings(o); };
    room.make = [](const Model& model, const Recipe& recipe, SamplerObject& sampler,
                   std::vector<RecipeIssue>& issues) -> std::unique_ptr<DiffusionProcess> {
        AbsorbingSettings settings = read_settings(sampler);
        if (settings.name == "first_hitting") settings.steps = recipe.max_length;
        check(settings, model, recipe, issues);
        return std::make_unique<AbsorbingProcess>(std::move(settings));
    };
    return room;
}

}  // namespace rudder
