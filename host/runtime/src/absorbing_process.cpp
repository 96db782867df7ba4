// Absorbing (masked) discrete diffusion (MDLM, SEDD's absorbing graph, BD3-LM, LLaDA, Dream): positions start masked
// and unmask once; euler, analytic (with ReMDM's remasking), first hitting, confidence (in blocks) and the LLaDA,
// Dream, MDLM and SEDD authors' samplers decide which and when; MDLM's cache skips the network while no token changed;
// prompt guidance; particles chosen at the end.
#include <ATen/ATen.h>

#include <limits>
#include <optional>

#include "authors_samplers.hpp"

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
    // euler | analytic | first_hitting | confidence | llada | dream | mdlm | sedd | bd3lm
    std::string name = "analytic";
    int64_t steps = 200;  // first_hitting, bd3lm, threshold and factor decoding: max_length; mdlm, sedd: 128
    bool cache = true;    // skip the network when no token changed since its last call
    // Divides the controlled clean-token log-probabilities before they are drawn from; 0: the arg-max (the default of
    // llada and dream, as of the authors' code).
    double temperature = 1.0;
    int64_t top_k = 0;   // draw among each position's k most likely tokens only (0: all)
    double top_p = 1.0;  // draw within the smallest set of tokens holding this probability
    std::string order =
        "probability";  // confidence: which drawn tokens are kept first (probability | margin | entropy)
    // confidence, first_hitting, llada, dream: positions unmask block by block, left to right (0: one); llada and
    // dream count them after the prompt.
    int64_t block_length = 0;
    RemaskSettings remask;                     // analytic: committed tokens may be masked again (ReMDM)
    std::string remasking = "low_confidence";  // llada: low_confidence | random
    double threshold = 0.0;                    // llada, dream: Fast-dLLM's threshold decoding (0: off)
    double factor = 0.0;                       // llada: Fast-dLLM's factor decoding (0: off)
    std::string kv_cache = "none";             // llada, dream: Fast-dLLM's key/value cache: none | prefix | dual
    std::string alg = "origin";                // dream: origin | maskgit_plus | topk_margin | entropy
    double alg_temp = 0.0;                     // dream: > 0 draws the positions by softmax(confidence / alg_temp)
    double eps = 1e-3;                         // dream, mdlm, sedd: its last time (mdlm, sedd: 1e-5)
    bool noise_removal = true;                 // mdlm, sedd: a last call commits the tokens where still masked
    std::string predictor = "euler";           // sedd: euler | analytic
    // Classifier-free guidance towards the tokens hard constraints fix (LLaDA's unsupervised cfg_scale w): scores
    // uncond + (w + 1)(cond - uncond), uncond the network with those tokens masked again.
    double prompt_guidance = 0.0;
};

bool is_authors(const std::string& name) { return name == "llada" || name == "dream"; }
// mdlm and sedd: a draw over the whole grid says whether a position unmasks; a noise removal's call may end the run.
bool draws_the_grid(const std::string& name) { return name == "mdlm" || name == "sedd"; }
// first_hitting and bd3lm unmask one position of a sequence a step: max_length steps.
bool one_position_a_step(const std::string& name) { return name == "first_hitting" || name == "bd3lm"; }
// dream with Fast-dLLM's block decoding: any of its settings turns it on.
bool dream_blocks(const AbsorbingSettings& s) {
    return s.name == "dream" && (s.block_length > 0 || s.threshold > 0 || s.kv_cache != "none");
}
// Threshold and factor decoding: blocks take the steps they need, so the loop's bound is one step a position.
bool decodes_in_parallel(const AbsorbingSettings& s) {
    return (s.name == "llada" && (s.threshold > 0 || s.factor > 0)) || (dream_blocks(s) && s.threshold > 0);
}

AbsorbingSettings read_absorbing_settings(SamplerObject& o) {
    AbsorbingSettings out;
    if (!o.name.empty()) out.name = o.name;
    auto& r = o.reader;
    if (draws_the_grid(out.name)) {  // their configs' sampling.steps and their samplers' eps
        out.steps = 128;
        out.eps = 1e-5;
    }
    read_steps(o, out.steps);
    if (o.applies("cache"))
        if (auto v = r.boolean("cache")) out.cache = *v;
    if (is_authors(out.name)) out.temperature = 0.0;
    read_temperature(o, out.temperature, /*zero_is_arg_max=*/true);
    read_truncation(o, out.top_k, out.top_p);
    if (o.applies("order"))
        if (auto v = r.choice("order", {"probability", "margin", "entropy"})) out.order = *v;
    if (o.applies("block_length"))
        if (auto v = r.integer("block_length", 1, int64_t{1} << 31)) out.block_length = *v;
    if (o.applies("prompt_guidance"))
        if (auto v = r.number("prompt_guidance", 0.0, 100.0)) out.prompt_guidance = *v;
    if (o.applies("remasking"))
        if (auto v = r.choice("remasking", {"low_confidence", "random"})) out.remasking = *v;
    if (o.applies("threshold"))
        if (auto v = r.number("threshold", 0.0, 1.0)) out.threshold = *v;
    if (o.applies("factor"))
        if (auto v = r.number("factor", 0.0, 100.0)) out.factor = *v;
    if (o.applies("kv_cache"))
        if (auto v = r.choice("kv_cache", {"none", "prefix", "dual"})) out.kv_cache = *v;
    if (r.has("threshold") && r.has("factor"))
        r.issue("factor", "'threshold' and 'factor' are two rules of Fast-dLLM's parallel decoding: give one");
    // Fast-dLLM's Dream block decoding orders by entropy: its default alg.
    if (dream_blocks(out)) out.alg = "entropy";
    if (o.applies("alg"))
        if (auto v = r.choice("alg", {"origin", "maskgit_plus", "topk_margin", "entropy"})) out.alg = *v;
    if (o.applies("alg_temp"))
        if (auto v = r.number("alg_temp", 0.0, 100.0)) out.alg_temp = *v;
    if (o.applies("eps"))
        if (auto v = r.number("eps", 1e-6, 0.5)) out.eps = *v;
    if (o.applies("noise_removal"))
        if (auto v = r.boolean("noise_removal")) out.noise_removal = *v;
    if (o.applies("predictor"))
        if (auto v = r.choice("predictor", {"euler", "analytic"})) out.predictor = *v;
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

// The authors' samplers (authors_samplers.hpp); the loop runs them in place of a DiscreteSampler.
std::optional<LladaSampler> llada_of(const AbsorbingSettings& s) {
    if (s.name != "llada") return std::nullopt;
    LladaSampler::Parallel parallel;
    using Rule = LladaSampler::Parallel::Rule;
    if (s.threshold > 0) parallel = {Rule::threshold, s.threshold};
    if (s.factor > 0) parallel = {Rule::factor, s.factor};
    return LladaSampler(
        s.steps, s.block_length,
        s.remasking == "random" ? LladaSampler::Remasking::random : LladaSampler::Remasking::low_confidence,
        s.temperature, parallel);
}

std::optional<DreamSampler> dream_of(const AbsorbingSettings& s) {
    if (s.name != "dream") return std::nullopt;
    const auto alg = s.alg == "maskgit_plus"  ? DreamSampler::Alg::maskgit_plus
                     : s.alg == "topk_margin" ? DreamSampler::Alg::topk_margin
                     : s.alg == "entropy"     ? DreamSampler::Alg::entropy
                                              : DreamSampler::Alg::origin;
    const DreamBlocks blocks{dream_blocks(s), s.block_length, s.threshold};
    return DreamSampler(s.steps, s.eps, alg, s.alg_temp, s.temperature, s.top_k, s.top_p, blocks);
}

std::optional<MdlmSampler> mdlm_of(const AbsorbingSettings& s) {
    if (s.name != "mdlm") return std::nullopt;
    return MdlmSampler(s.steps, s.eps, s.noise_removal);
}

std::optional<Bd3lmSampler> bd3lm_of(const AbsorbingSettings& s, const ReverseRun& run) {
    if (s.name != "bd3lm") return std::nullopt;
    return Bd3lmSampler(run.recipe.max_length, run.model.denoiser->decoding_block(), s.top_p, s.temperature);
}

std::optional<SeddSampler> sedd_of(const AbsorbingSettings& s) {
    if (s.name != "sedd") return std::nullopt;
    return SeddSampler(s.steps, s.eps,
                       s.predictor == "analytic" ? SeddSampler::Predictor::analytic : SeddSampler::Predictor::euler,
                       s.noise_removal);
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
          sampler_(sampler_of(s, run.model.mask_schedule)), llada_(llada_of(s)), dream_(dream_of(s)), mdlm_(mdlm_of(s)),
          sedd_(sedd_of(s)), bd3lm_(bd3lm_of(s, run)), starts_(static_cast<size_t>(bd3lm_ ? batch_ : 0), 1),
          kv_(s.kv_cache != "none" ? run.model.denoiser->window_cache() : nullptr), kv_prefix_(s.kv_cache == "prefix"),
          always_fresh_(!s.cache || run.composer.needs_fresh_logits() || run.model.denoiser->reads_time()),
          every_row_(run.model.denoiser->uses_evidence()),
          swarm_(samples, particles_, run.recipe.guidance.resample_scale) {
        tokens_ = sampler_.init(batch_, L_, mask_id_, run.device);
        const auto flags = tokens_.options().dtype(at::kBool);
        if (s.prompt_guidance > 0) prompt_ = at::zeros({batch_, L_}, flags);
        // Remasking never touches a position a controller fixed: a hard constraint stays met.
        if (sampler_.remasks()) pinned_ = at::zeros({batch_, L_}, flags);
    }

    at::Tensor run() {
        int64_t i = 0;
        for (; i < steps(); ++i) {
            // Parallel decoding takes as many steps as the blocks need, bd3lm as its starts do: none once nothing is
            // masked.
            if ((dynamic_blocks() || bd3lm_) && i > 0 && !tokens_.eq(mask_id_).any().item<bool>()) break;
            step(i);
        }
        run_.stats.steps += i;
        return swarm_.chosen(tokens_);
    }

private:
    // The time grid: the authors' samplers keep their own.
    template <class Get>
    auto on_time_grid(const Get& get) const {
        if (llada_) return get(*llada_);
        if (dream_) return get(*dream_);
        if (mdlm_) return get(mdlm_->grid());
        if (sedd_) return get(sedd_->grid());
        if (bd3lm_) return get(*bd3lm_);
        return get(sampler_);
    }
    int64_t steps() const {
        return on_time_grid([](const auto& grid) { return grid.steps(); });
    }
    double t(int64_t i) const {
        return on_time_grid([i](const auto& grid) { return grid.t(i); });
    }
    double t_next(int64_t i) const {
        return on_time_grid([i](const auto& grid) { return grid.t_next(i); });
    }
    // mdlm and sedd: a step's draw also says whether a position unmasks, from uniforms over the whole grid.
    bool draws_the_grid() const { return mdlm_ || sedd_; }
    bool removes_noise(int64_t i) const {
        return mdlm_ ? mdlm_->grid().removes_noise(i) : sedd_->grid().removes_noise(i);
    }
    at::Tensor grid_uniforms(int64_t i) {
        return mdlm_ ? mdlm_->uniforms(batch_, L_, grid_columns(), run_.gen)
                     : sedd_->uniforms(batch_, L_, grid_columns(), i, run_.gen);
    }
    at::Tensor choose(const at::Tensor& masked, int64_t i);
    // The blocks after the prompt (llada; dream with Fast-dLLM's block decoding).
    bool blocked() const { return llada_ || (dream_ && dream_->blocks_on()); }
    bool blocks_started() const { return llada_ ? llada_->started() : dream_->started(); }
    bool dynamic_blocks() const {
        return (llada_ && llada_->dynamic()) || (dream_ && dream_->blocks_on() && dream_->dynamic());
    }
    bool advance_blocks(const at::Tensor& masked) { return llada_ ? llada_->advance(masked) : dream_->advance(masked); }
    std::pair<int64_t, int64_t> block_of(int64_t i) const { return llada_ ? llada_->block(i) : dream_->block(i); }
    void step(int64_t i);
    void denoise(double t, const Combined& constraints);
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits);
    void draw_as_authors(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits);
    void draw_over_the_grid(int64_t i, const at::Tensor& unmask, const Combined& combined,
                            const at::Tensor& row_logits);
    at::Tensor bd3lm_block(const at::Tensor& masked) const;
    void draw_bd3lm(int64_t i, const at::Tensor& unmask, const Combined& combined, const at::Tensor& row_logits);
    void start_again_where_low_entropy(const at::Tensor& drawn, int64_t i);
    at::Tensor every_network_row(const at::Tensor& scores, const at::Tensor& positions, const at::Tensor& drawn_at_row,
                                 const Combined& combined) const;
    // mdlm, sedd: the columns of their draws' grid, the network's every row (0 until its first call).
    int64_t grid_columns() const {
        return !logits_.defined() ? 0 : outside_.defined() ? V_ + outside_.size(1) - 1 : logits_.size(1);
    }
    // `pick()`'s rows drawn; a row with nothing to draw (NothingToSample) is the run's fault at step i, at its
    // position of `at_positions`.
    template <class Pick>
    at::Tensor fault_if_empty(int64_t i, const at::Tensor& at_positions, const Pick& pick) {
        try {
            return pick();
        } catch (const NothingToSample& e) {
            const int64_t position = at_positions[e.row].item<int64_t>();
            throw run_.fault_at(i, position / L_, position % L_, logits_[position]);
        }
    }
    // Commits the `drawn` tokens at `positions` through the COMMIT controllers (commit.hpp), which see the tokens with
    // the rows not committed yet still masked; `redraw` draws a refused row again within what they allow.
    void commit_rows(int64_t i, const at::Tensor& positions, const at::Tensor& drawn, const Redraw& redraw) {
        const CommitState state = [this](const at::Tensor&) {
            return std::make_pair(tokens_, tokens_.eq(mask_id_).to(at::kByte));
        };
        run_.stats.redrawn +=
            commit_drawn(run_.composer, tokens_, positions, drawn, state, redraw, i, steps(), t(i), t_next(i)).redrawn;
        stale_ = true;
    }
    // Gumbel-max takes an arg-max whatever a row holds: a row of `scores` with no token left (NaN, or every one
    // forbidden) is the run's fault at step i, reported as DiscreteSampler::draw reports it.
    void fault_if_any_empty(int64_t i, const at::Tensor& positions, const at::Tensor& scores) {
        fault_if_empty(i, positions, [&] {
            const at::Tensor empty = scores.isnan().any(1).logical_or_(at::isfinite(scores).any(1).logical_not_());
            if (empty.any().item<bool>()) throw NothingToSample(empty.nonzero()[0][0].item<int64_t>());
            return at::Tensor();
        });
    }
    // Commits the `tokens` drawn at `positions` from the controlled `scores` (a row each), as commit_rows does; a draw
    // of the mask (or of a row past the tokenizer) leaves its position masked, and a row a COMMIT controller refuses
    // is drawn again from its scores within what it allows (the arg-max with `arg_max`).
    void commit_draws(int64_t i, const at::Tensor& positions, const at::Tensor& tokens, const at::Tensor& scores,
                      bool arg_max) {
        const at::Tensor rows = tokens.lt(V_).logical_and_(tokens.ne(mask_id_)).nonzero().squeeze(1);
        if (rows.size(0) == 0) return;
        const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
            const at::Tensor again_rows = rows.index_select(0, which);
            at::Tensor again = scores.index_select(0, again_rows);
            Composer::forbid(again, forbidden_bits);
            return fault_if_empty(i, positions.index_select(0, again_rows), [&] {
                return arg_max ? DiscreteSampler::arg_max(again) : DiscreteSampler::draw(again, run_.gen);
            });
        };
        commit_rows(i, positions.index_select(0, rows), tokens.index_select(0, rows), redraw);
    }
    void start_blocks(at::Tensor& unmask, int64_t i);
    void call_denoiser(double t, const Combined& constraints);
    at::Tensor in_block(const at::Tensor& masked, int64_t i) const;

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
    const DiscreteSampler sampler_;  // (its time grid unused while an authors' sampler runs)
    std::optional<LladaSampler> llada_;
    std::optional<DreamSampler> dream_;
    std::optional<MdlmSampler> mdlm_;
    std::optional<SeddSampler> sedd_;
    std::optional<Bd3lmSampler> bd3lm_;
    std::vector<int64_t> starts_;  // bd3lm: each sequence's starts so far
    at::Tensor block_schedule_;    // llada: the current block's commits per step, int64 [B, steps of the block]
    // llada with Fast-dLLM's key/value cache: the run's cache, the block it was refreshed for (-1: none yet), and
    // whether a window runs to the end of the sequence (prefix) or to the block's end (dual).
    std::unique_ptr<DenoiserCache> kv_;
    const bool kv_prefix_;
    int64_t cached_block_ = -1;
    int64_t step_ = 0;  // the step being taken
    const bool always_fresh_;
    // A denoiser that conditions on the constraints takes them whole: the controllers then see every position.
    const bool every_row_;
    Particles swarm_;
    at::Tensor tokens_;
    at::Tensor logits_, logp_;  // the network's scores for `tokens_` [B * L, V], and their log-softmax once needed
    at::Tensor outside_;        // the network's rows outside the vocabulary [B * L, 1 + R] (DenoiserOutput::outside)
    at::Tensor score_total_;    // sedd: the log of each position's total unmasking score [B * L]
    Combined seen_;             // the constraints the denoiser's last call was given
    bool stale_ = true;
    // Prompt guidance (LLaDA's unsupervised classifier-free guidance): the positions hard constraints have fixed are
    // the prompt; the unconditional pass sees them masked again, without the constraints as evidence.
    at::Tensor prompt_;
    at::Tensor pinned_;  // remasking: the positions a controller fixed
};

void AbsorbingLoop::denoise(double t, const Combined& constraints) {
    Denoiser& denoiser = *run_.model.denoiser;
    call_denoiser(t, constraints);
    ++run_.stats.denoiser_calls;
    run_.stats.denoised_sequences += batch_;
    if (prompt_.defined() && prompt_.any().item<bool>()) {
        DenoiserOutput unconditional = denoiser.denoise(tokens_.masked_fill(prompt_, mask_id_), t, {}, {});
        const auto guided = [&](const at::Tensor& conditional, const at::Tensor& without) {
            return without + (s_.prompt_guidance + 1.0) * (conditional - without);
        };
        logits_ = guided(logits_, unconditional.logits.to(at::kFloat));
        if (outside_.defined()) outside_ = guided(outside_, unconditional.outside.to(at::kFloat));
        ++run_.stats.denoiser_calls;
        run_.stats.denoised_sequences += batch_;
    }
    logits_ = logits_.reshape({batch_ * L_, V_});
    if (outside_.defined()) outside_ = outside_.reshape({batch_ * L_, -1});
    logp_ = at::Tensor();
    stale_ = false;
    seen_ = constraints;
}

// llada: step i's block of `masked` (bool [B, L]).
at::Tensor AbsorbingLoop::in_block(const at::Tensor& masked, int64_t i) const {
    const auto [begin, end] = block_of(i);
    at::Tensor inside = at::zeros_like(masked);
    inside.narrow(1, begin, end - begin).fill_(true);
    return masked.logical_and(inside);
}

at::Tensor AbsorbingLoop::choose(const at::Tensor& masked, int64_t i) {
    // dream: chosen among the positions still masked once the controllers have fixed theirs (draw_as_authors), as
    // Dream draws them around its prompt.
    // llada, dream's blocks: the block is known once the prompt is, which the controllers fix at the first step.
    if (blocked()) {
        if (!blocks_started()) return masked.clone();
        if (dynamic_blocks() && !advance_blocks(masked)) return at::zeros_like(masked);
        return in_block(masked, i);
    }
    if (dream_ || draws_the_grid()) return masked.clone();  // mdlm, sedd: the draw says whether a position unmasks
    if (bd3lm_) return bd3lm_block(masked);
    return sampler_.choose(masked, i, run_.gen);
}

// llada: the prompt is the positions before the first one still masked once the controllers have fixed theirs (a span
// prefix); from it the blocks, and step i's (`unmask` is narrowed to it).
void AbsorbingLoop::start_blocks(at::Tensor& unmask, int64_t i) {
    const at::Tensor masked = tokens_.eq(mask_id_);
    const at::Tensor any = masked.any(1);
    if (!any.any().item<bool>()) return;
    const int64_t prompt = masked.to(at::kByte).argmax(1).masked_select(any).min().item<int64_t>();
    try {
        if (llada_)
            llada_->start(prompt, L_);
        else
            dream_->start(prompt, L_);
    } catch (const std::invalid_argument& e) {
        throw GenerationFault(e.what());
    }
    if (dynamic_blocks()) advance_blocks(masked);
    unmask = in_block(unmask, i);
}

// One network call on the tokens as they stand. With Fast-dLLM's key/value cache (llada, once its blocks are known):
// every position at a block's first call, keeping the keys and values (its block-level refresh); then the block's
// window only (to the sequence's end: prefix; the block's: dual), written into logits_ and outside_ in place: the
// other rows keep the refresh's output, which the step does not read.
void AbsorbingLoop::call_denoiser(double t, const Combined& constraints) {
    Denoiser& denoiser = *run_.model.denoiser;
    const auto set = [&](const DenoiserOutput& out) {
        logits_ = out.logits.to(at::kFloat);
        outside_ = out.outside.defined() ? out.outside.to(at::kFloat) : at::Tensor();
        score_total_ = out.log_score_total.defined() ? out.log_score_total.to(at::kFloat).reshape({-1}) : at::Tensor();
    };
    if (!kv_ || !blocks_started())
        return set(denoiser.denoise(tokens_, t, {}, evidence_of(constraints, batch_, L_, V_, every_row_)));
    const auto [begin, end] = block_of(step_);
    if (begin != cached_block_) {
        cached_block_ = begin;
        set(denoiser.denoise_refresh(tokens_, *kv_));
        // Windows are written into these: tensors of the loop's own, not the denoiser's inference-mode ones.
        logits_ = logits_.clone();
        outside_ = outside_.clone();
        return;
    }
    const int64_t stop = kv_prefix_ ? L_ : end;
    const DenoiserOutput window = denoiser.denoise_window(tokens_, begin, stop, *kv_);
    logits_.view({batch_, L_, V_}).narrow(1, begin, stop - begin).copy_(window.logits);
    outside_.view({batch_, L_, -1}).narrow(1, begin, stop - begin).copy_(window.outside);
}

void AbsorbingLoop::step(int64_t i) {
    step_ = i;
    const double t = this->t(i), t_next = this->t_next(i);
    const at::Tensor masked = tokens_.eq(mask_id_);
    // Which positions unmask is drawn first: a step where none does changes nothing, and costs nothing more.
    at::Tensor unmask = choose(masked, i);
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
        // mdlm, sedd: the authors' loops draw their uniforms at every step, whatever is masked (a later batch
        // reads on); MDLM's noise removal draws none.
        if (draws_the_grid() && !(mdlm_ && removes_noise(i)) && grid_columns() > 0) grid_uniforms(i);
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
    const plugins::StepInputs in = predict_inputs({i, steps(), t, t_next, {}, tokens_, masked.to(at::kByte), rows, {}},
                                                  reads, logits_, row_logits, logp_, run_.recipe.candidates);
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
    if (blocked() && !blocks_started()) start_blocks(unmask, i);
    if (changed || (every_row_ && !same_constraints(combined, seen_))) {
        denoise(t, combined);
        row_logits = every_row_ ? logits_ : logits_.index_select(0, in.rows);
    }
    if (llada_ || dream_)
        draw_as_authors(i, unmask, combined, row_logits);
    else if (draws_the_grid())
        draw_over_the_grid(i, unmask, combined, row_logits);
    else if (bd3lm_)
        draw_bd3lm(i, unmask, combined, row_logits);
    else
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
    const bool greedy = s_.temperature == 0.0;  // the arg-max
    if (!greedy && s_.temperature != 1.0) scores.div_(s_.temperature);
    const bool truncates = s_.top_k > 0 || s_.top_p < 1.0;
    // A row a COMMIT controller refuses is drawn again from its scores before truncation, within what it allows.
    const at::Tensor untruncated = run_.composer.commits() && truncates ? scores.clone() : scores;
    if (truncates) DiscreteSampler::truncate(scores, s_.top_k, s_.top_p);
    const auto draw_rows = [&](const at::Tensor& rows_scores, const at::Tensor& at_positions) {
        return fault_if_empty(i, at_positions, [&] {
            return greedy ? DiscreteSampler::arg_max(rows_scores) : DiscreteSampler::draw(rows_scores, run_.gen);
        });
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
    commit_rows(i, committed, drawn, redraw);
}

// The log-probabilities over every row the network has (full_rows) of the step's `scores` [n, V] at `positions`, rows
// `drawn_at_row` of the combination. A row a hard constraint restricts (tokens forbidden, or one fixed) draws only
// among the tokens it leaves: the network's rows outside the vocabulary (the mask's, the padding's) would leave the
// position masked, outside the constraint. The authors' samplers run unconstrained, where nothing changes.
at::Tensor AbsorbingLoop::every_network_row(const at::Tensor& scores, const at::Tensor& positions,
                                            const at::Tensor& drawn_at_row, const Combined& combined) const {
    if (!outside_.defined()) return at::log_softmax(scores, 1);
    at::Tensor outside = outside_.index_select(0, positions);
    at::Tensor restricted = combined.fixed.defined()
                                ? combined.fixed.view({-1}).index_select(0, positions).ge(0)
                                : at::zeros({positions.size(0)}, positions.options().dtype(at::kBool));
    const at::Tensor forbidden = combined.forbidden_mask(scores.size(1));
    if (forbidden.defined()) restricted = restricted.logical_or(forbidden.index_select(0, drawn_at_row).any(1));
    outside = outside.masked_fill(restricted.unsqueeze(1), -std::numeric_limits<float>::infinity());
    return full_rows(scores, outside, mask_id_);
}

// The authors' samplers (authors_samplers.hpp): draws at every position of the step's rows over every row the
// network has, keeps those the sampler commits this step, and commits them through the COMMIT controllers. A draw of
// the mask token (or of a row past the tokenizer) leaves its position masked, as the authors' code does.
void AbsorbingLoop::draw_as_authors(int64_t i, at::Tensor unmask, const Combined& combined,
                                    const at::Tensor& row_logits) {
    const at::Tensor masked = tokens_.eq(mask_id_);  // with this step's fixed tokens
    if (blocked() && !blocks_started()) return;      // nothing masked
    // How many each sequence commits this step (parallel decoding: once the confidences are known).
    at::Tensor count;
    const bool parallel = llada_ && llada_->dynamic();
    // dream's block decoding: a block's first call commits its first position alone; with a threshold, the count
    // comes from the confidences.
    const bool dream_blocks = dream_ && dream_->blocks_on();
    const bool opening = dream_blocks && dream_->opens_block(i);
    const bool dream_threshold = dream_blocks && dream_->dynamic() && !opening;
    if (opening) {
        at::Tensor first = at::zeros_like(unmask);
        first.select(1, block_of(i).first).fill_(true);
        unmask = unmask.logical_and(first);
    } else if (dream_blocks) {
        if (!dream_->dynamic()) count = dream_->block_commits(in_block(masked, i).sum(1), i);
    } else if (llada_ && !parallel) {
        if (llada_->first_of_block(i) || !block_schedule_.defined())
            block_schedule_ = llada_->schedule(in_block(masked, i).sum(1), i);
        count = block_schedule_.select(1, llada_->step_in_block(i)).contiguous();
    } else if (dream_ && dream_->alg() != DreamSampler::Alg::origin) {
        count = dream_->commits(masked.sum(1), i);
    } else if (dream_) {
        unmask = unmask.logical_and(dream_->choose(masked, i, run_.gen));
    }

    const at::Tensor drawn_at_row = unmask.view({-1}).index_select(0, combined.rows).nonzero().squeeze(1);
    if (drawn_at_row.size(0) == 0) return;
    const at::Tensor positions = combined.rows.index_select(0, drawn_at_row);
    const at::Tensor scores =
        Composer::controlled(row_logits.index_select(0, drawn_at_row), combined, drawn_at_row, mask_id_);
    const at::Tensor full = every_network_row(scores, positions, drawn_at_row, combined);
    const auto guarded = [&](const at::Tensor& at_positions, const auto& pick) {
        return fault_if_empty(i, at_positions, pick);
    };
    at::Tensor tokens, confidence, shaped;
    if (llada_) {
        tokens = guarded(positions, [&] { return llada_->draw(full, run_.gen); });
        confidence = llada_->confidence(full, tokens, positions, batch_, L_, run_.gen);
    } else {
        shaped = dream_->shaped(full);
        tokens = guarded(positions, [&] { return dream_->draw(shaped, run_.gen); });
        confidence = dream_->confidence(shaped, tokens);
    }
    run_.stats.rows_drawn += positions.size(0);

    // Which of the drawn the sampler commits: the most confident `count` (dream's origin: every one drawn).
    const at::Tensor drawn = at::zeros({batch_ * L_}, masked.options()).index_fill_(0, positions, true);
    at::Tensor kept_at = drawn;
    if (count.defined() || parallel || dream_threshold) {
        const at::Tensor scored =
            at::full({batch_ * L_}, -std::numeric_limits<float>::infinity(), confidence.options().dtype(at::kFloat))
                .index_copy_(0, positions, confidence.to(at::kFloat));
        const at::Tensor d = drawn.view({batch_, L_}), c = scored.view({batch_, L_});
        if (parallel) count = llada_->parallel_count(d, c);
        if (dream_threshold) count = dream_->threshold_commits(d, c);
        kept_at = (llada_ ? keep_highest(d, c, count) : dream_->keep(d, c, count, run_.gen)).view({-1});
    }
    // A draw of the mask or of a row past the tokenizer is no token: the position stays masked.
    const at::Tensor kept =
        kept_at.index_select(0, positions).logical_and_(tokens.lt(V_)).logical_and_(tokens.ne(mask_id_));
    const at::Tensor rows = kept.nonzero().squeeze(1);
    if (rows.size(0) == 0) return;
    const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
        const at::Tensor again_rows = rows.index_select(0, which);
        at::Tensor again = scores.index_select(0, again_rows);
        Composer::forbid(again, forbidden_bits);
        const at::Tensor at_positions = positions.index_select(0, again_rows);
        // Within the vocabulary: a refused row is given a token.
        const at::Tensor within = at::log_softmax(again, 1);
        return guarded(at_positions, [&] {
            return llada_ ? llada_->draw(within, run_.gen) : dream_->draw(dream_->shaped(within), run_.gen);
        });
    };
    commit_rows(i, positions.index_select(0, rows), tokens.index_select(0, rows), redraw);
}

// mdlm, sedd (authors_samplers.hpp): the step's uniforms for the whole grid, then at each masked position of the
// step's rows a Gumbel-max draw over every row the network has from the controlled clean-token probabilities (at the
// temperature, truncated), the mask's entry the chance to stay masked (sedd: with the network's total unmasking
// score); mdlm's noise removal takes the arg-max within the vocabulary, sedd's draws over every row but the mask.
// What is drawn is committed through the COMMIT controllers.
void AbsorbingLoop::draw_over_the_grid(int64_t i, const at::Tensor& unmask, const Combined& combined,
                                       const at::Tensor& row_logits) {
    const bool arg_max = mdlm_ && removes_noise(i);
    const at::Tensor u = arg_max ? at::Tensor() : grid_uniforms(i);
    const at::Tensor drawn_at_row = unmask.view({-1}).index_select(0, combined.rows).nonzero().squeeze(1);
    if (drawn_at_row.size(0) == 0) return;
    const at::Tensor positions = combined.rows.index_select(0, drawn_at_row);
    at::Tensor scores =
        Composer::controlled(row_logits.index_select(0, drawn_at_row), combined, drawn_at_row, mask_id_);
    if (s_.temperature != 1.0) scores.div_(s_.temperature);
    const bool truncates = s_.top_k > 0 || s_.top_p < 1.0;
    if (truncates) DiscreteSampler::truncate(scores, s_.top_k, s_.top_p);
    const at::Tensor tokens = [&] {
        if (arg_max) return fault_if_empty(i, positions, [&] { return DiscreteSampler::arg_max(scores); });
        fault_if_any_empty(i, positions, scores);
        const at::Tensor rows_u = u.index_select(0, positions.cpu());
        const at::Tensor full = every_network_row(scores, positions, drawn_at_row, combined);
        if (mdlm_) return mdlm_->draw(full.exp(), rows_u, mask_id_, i);
        return sedd_->draw(full, score_total_.index_select(0, positions), rows_u, mask_id_, i);
    }();
    run_.stats.rows_drawn += positions.size(0);
    commit_draws(i, positions, tokens, scores, arg_max);
}

// bd3lm: the masked positions of each sequence's current block, the one holding its first masked position (every
// block before it is finished). bool [B, L].
at::Tensor AbsorbingLoop::bd3lm_block(const at::Tensor& masked) const {
    const int64_t block = bd3lm_->block();
    const at::Tensor first = masked.to(at::kByte).argmax(1);  // (a sequence with none masked draws nothing)
    const at::Tensor position = at::arange(L_, first.options()).unsqueeze(0);
    const at::Tensor begin = first.div(block, "floor").mul_(block).unsqueeze(1);
    return masked.logical_and(position.ge(begin)).logical_and_(position.lt(begin + block));
}

// bd3lm (authors_samplers.hpp): the step's uniforms for every sequence's block, then for each sequence that has a
// masked position left in its block (`unmask`, after the controllers fixed theirs) the one it commits, picked among
// them, and its token by Gumbel-max over the nucleus of its controlled probabilities (at the temperature), over every
// row the network has. What is drawn is committed through the COMMIT controllers; a sequence whose finished block
// leaves too little entropy starts again.
void AbsorbingLoop::draw_bd3lm(int64_t i, const at::Tensor& unmask, const Combined& combined,
                               const at::Tensor& row_logits) {
    if (!unmask.any().item<bool>()) return;  // the controllers filled the blocks: nothing to draw
    const int64_t block = bd3lm_->block();
    const at::Tensor u = bd3lm_->uniforms(batch_, grid_columns(), run_.gen);
    std::vector<int64_t> chosen, chosen_u;  // flat positions, and their rows of u viewed [B * block, W]
    const at::Tensor where = unmask.cpu();
    for (int64_t b = 0; b < batch_; ++b) {
        const at::Tensor open = where[b].nonzero().squeeze(1);
        if (open.size(0) == 0) continue;
        const int64_t position = open[bd3lm_->pick(open.size(0), run_.gen)].item<int64_t>();
        chosen.push_back(b * L_ + position);
        chosen_u.push_back(b * block + position % block);
    }
    const auto long_cpu = at::TensorOptions().dtype(at::kLong);
    const at::Tensor positions = at::tensor(chosen, long_cpu).to(combined.rows.device());
    // Each chosen position's index among the combination's rows (rows are in position order).
    const at::Tensor drawn_at_row = at::searchsorted(combined.rows, positions);
    at::Tensor scores =
        Composer::controlled(row_logits.index_select(0, drawn_at_row), combined, drawn_at_row, mask_id_);
    if (s_.temperature != 0.0 && s_.temperature != 1.0) scores.div_(s_.temperature);
    if (s_.top_k > 0) DiscreteSampler::truncate(scores, s_.top_k, 1.0);
    fault_if_any_empty(i, positions, scores);
    const at::Tensor full = every_network_row(scores, positions, drawn_at_row, combined);
    const at::Tensor rows_u = u.view({batch_ * block, -1}).index_select(0, at::tensor(chosen_u, long_cpu));
    const at::Tensor tokens = bd3lm_->draw(full, rows_u);
    run_.stats.rows_drawn += positions.size(0);
    commit_draws(i, positions, tokens, scores, s_.temperature == 0.0);
    start_again_where_low_entropy(positions, i);
}

// bd3lm: a sequence whose block (of its position among `drawn`, flat int64 [n]) is now finished, past position 256,
// with less than 4 nats of entropy in its last 256 tokens starts again, all masked (the controllers fix their tokens
// again at the next step); its 10th start fails the run, as BD3-LM's sampler gives up.
void AbsorbingLoop::start_again_where_low_entropy(const at::Tensor& drawn, int64_t i) {
    const int64_t block = bd3lm_->block();
    const at::Tensor tokens = tokens_.cpu(), flat = drawn.cpu();
    for (int64_t k = 0; k < flat.size(0); ++k) {
        const int64_t b = flat[k].item<int64_t>() / L_, begin = flat[k].item<int64_t>() % L_ / block * block;
        const int64_t end = std::min(L_, begin + block);
        const at::Tensor row = tokens[b];
        if (end <= 256 || row.narrow(0, begin, end - begin).eq(mask_id_).any().item<bool>() ||
            !Bd3lmSampler::low_entropy(row.narrow(0, 0, end)))
            continue;
        if (++starts_[static_cast<size_t>(b)] > Bd3lmSampler::kStarts)
            throw GenerationFault("the bd3lm sampler gave up at step " + std::to_string(i + 1) +
                                  ": each of a sample's " + std::to_string(Bd3lmSampler::kStarts) +
                                  " starts ended in a block whose last 256 tokens hold less than 4 nats of entropy "
                                  "(BD3-LM's _check_stop_conds)");
        tokens_.select(0, b).fill_(mask_id_);
        stale_ = true;
    }
}

class AbsorbingProcess final : public DiffusionProcess {
public:
    explicit AbsorbingProcess(AbsorbingSettings settings) : s_(std::move(settings)) {}
    const std::string& sampler() const override { return s_.name; }
    int64_t steps() const override { return s_.steps + (draws_the_grid(s_.name) && s_.noise_removal ? 1 : 0); }
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
    if (!one_position_a_step(s_.name)) out["steps"] = s_.steps;
    if (s_.name == "confidence") out["order"] = s_.order;
    if ((s_.name == "confidence" || s_.name == "first_hitting" || s_.name == "llada") && s_.block_length > 0)
        out["block_length"] = s_.block_length;
    if (s_.name == "llada") {
        out["remasking"] = s_.remasking;
        if (s_.threshold > 0) out["threshold"] = s_.threshold;
        if (s_.factor > 0) out["factor"] = s_.factor;
        out["kv_cache"] = s_.kv_cache;
        out.erase("top_k");
        out.erase("top_p");
    }
    if (s_.name == "dream") {
        out["alg"] = s_.alg;
        out["alg_temp"] = s_.alg_temp;
        out["eps"] = s_.eps;
        if (s_.block_length > 0) out["block_length"] = s_.block_length;
        if (s_.threshold > 0) out["threshold"] = s_.threshold;
        out["kv_cache"] = s_.kv_cache;
    }
    if (draws_the_grid(s_.name)) {
        out["eps"] = s_.eps;
        out["noise_removal"] = s_.noise_removal;
    }
    if (s_.name == "sedd") out["predictor"] = s_.predictor;
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
        "} or BD3-LM's own {\"name\": \"bd3lm\"}";
    const int64_t b = s.block_length;
    if (s.name == "bd3lm") {
        // Its blocks are the model's; its checkpoints are not time-conditioned, and its sampler passes the network a
        // noise level of its own (-log(1 - t) at first-hitting times from NumPy's generator), which Rudder does not.
        if (model.denoiser->reads_time())
            issues.push_back({"/sampler/name",
                              "the bd3lm sampler runs BD3-LM's checkpoints without time conditioning "
                              "(as published); model '" +
                                  model.name + "' is time-conditioned: use first_hitting"});
    } else if (s.name != "first_hitting" && s.name != "confidence")
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
    if (const int64_t block = model.denoiser->decoding_block(); block > 0)
        check_blocks(s, model, block, issues);
    else if (s.name == "bd3lm")
        issues.push_back({"/sampler/name",
                          "the bd3lm sampler decodes a block-diffusion model (a BD3-LM checkpoint) "
                          "block by block; model '" +
                              model.name + "' has no blocks"});
    const int64_t L = recipe.max_length, b = s.block_length;
    if ((s.name == "confidence" || s.name == "first_hitting" || s.name == "llada" || s.name == "dream") && b > L)
        issues.push_back({"/sampler/block_length",
                          "block_length " + std::to_string(b) + " is longer than max_length " + std::to_string(L)});
    if (dream_blocks(s) && s.alg != "entropy")
        issues.push_back({"/sampler/alg",
                          "Fast-dLLM's Dream block decoding (block_length, threshold, kv_cache) "
                          "orders positions by entropy (or, with a threshold, by the drawn token's "
                          "probability) whatever alg says; leave 'alg' out or give 'entropy', "
                          "not '" +
                              s.alg + "'"});
    if (s.name == "confidence") {
        const int64_t blocks = DiscreteSampler::block_count(L, b);
        if (s.steps < blocks)
            issues.push_back({"/sampler/steps", std::to_string(s.steps) + " steps for " + std::to_string(blocks) +
                                                    " blocks of " + std::to_string(b) +
                                                    " positions: the confidence sampler needs a step per block"});
    }
    if (s.kv_cache != "none") {
        if (!model.denoiser->window_cache())
            issues.push_back(
                {"/sampler/kv_cache", "model '" + model.name +
                                          "' keeps no key/value cache of the kind Fast-dLLM's are (LLaDA's "
                                          "and Dream's checkpoints do)"});
        if (s.prompt_guidance > 0)
            issues.push_back({"/sampler/prompt_guidance",
                              "Fast-dLLM's caches take one pass per step; prompt_guidance's "
                              "second pass (the prompt masked) would need a cache of its own"});
    }
    if (draws_the_grid(s.name) && s.temperature == 0.0)
        issues.push_back({"/sampler/temperature",
                          "the " + s.name +
                              " sampler draws whether a position unmasks together with its token (Gumbel-max over "
                              "the tokens and the mask, as the authors' code draws), so temperature 0 has no arg-max "
                              "to take; give a temperature above 0, or the confidence sampler to decode by arg-max"});
    if (s.name == "sedd" && !model.denoiser->gives_score_total())
        issues.push_back({"/sampler/name", "the sedd sampler reads SEDD's score, which model '" + model.name +
                                               "' does not give (a SEDD checkpoint does)"});
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
    room.samplers = {"euler", "analytic", "first_hitting", "confidence", "llada", "dream", "mdlm", "sedd", "bd3lm"};
    const std::vector<std::string> truncating = {"euler", "analytic", "first_hitting", "confidence",
                                                 "dream", "mdlm",     "sedd",          "bd3lm"};
    room.keys = {SamplerKey::except("steps", {"euler", "analytic", "confidence", "llada", "dream", "mdlm", "sedd"},
                                    "'steps' does not apply to the first_hitting and bd3lm samplers: they take one "
                                    "step per position (max_length), each unmasking one position per sample"),
                 SamplerKey::of("temperature", {}, kDiscreteSamplers),
                 SamplerKey::of("cache", {}, kDiscreteSamplers),
                 SamplerKey::except("top_k", truncating,
                                    "'top_k' does not apply to the llada sampler: LLaDA's "
                                    "generate() draws from the whole distribution"),
                 SamplerKey::except("top_p", truncating,
                                    "'top_p' does not apply to the llada sampler: LLaDA's "
                                    "generate() draws from the whole distribution"),
                 SamplerKey::of("prompt_guidance", {}, kDiscreteSamplers),
                 SamplerKey::of("order", {"confidence"}, "the confidence sampler", true),
                 SamplerKey::of("block_length", {"confidence", "first_hitting", "llada", "dream"},
                                "the confidence, first_hitting, llada and dream samplers", true),
                 SamplerKey::of("remask", {"analytic"}, "the analytic sampler", true),
                 SamplerKey::of("remasking", {"llada"}, "the llada sampler", true),
                 SamplerKey::of("threshold", {"llada", "dream"}, "the llada and dream samplers", true),
                 SamplerKey::of("factor", {"llada"}, "the llada sampler", true),
                 SamplerKey::of("kv_cache", {"llada", "dream"}, "the llada and dream samplers", true),
                 SamplerKey::of("alg", {"dream"}, "the dream sampler", true),
                 SamplerKey::of("alg_temp", {"dream"}, "the dream sampler", true),
                 SamplerKey::of("eps", {"dream", "mdlm", "sedd"}, "the dream, mdlm and sedd samplers", true),
                 SamplerKey::of("noise_removal", {"mdlm", "sedd"}, "the mdlm and sedd samplers", true),
                 SamplerKey::of("predictor", {"sedd"}, "the sedd sampler", true)};
    room.runs = [](const Model& model) { return model.family == Family::discrete; };
    room.read = [](SamplerObject& o) { read_absorbing_settings(o); };
    room.make = [](const Model& model, const Recipe& recipe, SamplerObject& sampler,
                   std::vector<RecipeIssue>& issues) -> std::unique_ptr<DiffusionProcess> {
        AbsorbingSettings settings = read_absorbing_settings(sampler);
        if (one_position_a_step(settings.name)) settings.steps = recipe.max_length;
        if (decodes_in_parallel(settings)) settings.steps = recipe.max_length;
        check(settings, model, recipe, issues);
        return std::make_unique<AbsorbingProcess>(std::move(settings));
    };
    return room;
}

}  // namespace rudder
