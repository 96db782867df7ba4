#include "absorbing_loop.hpp"

#include <ATen/ATen.h>

#include <limits>

#include "../authors_samplers.hpp"
#include "../step_inputs.hpp"

namespace rudder::absorbing {

at::Tensor Unmasking::remask(const at::Tensor& /*committed*/, int64_t /*i*/, at::Generator& /*gen*/) const {
    return {};
}

AbsorbingLoop::AbsorbingLoop(const AbsorbingSampler& sampler, ReverseRun& run, int64_t samples)
    : s_(sampler.common()), run_(run), particles_(run.recipe.guidance.particles), batch_(samples * particles_),
      L_(run.recipe.max_length), V_(run.model.tokenizer->vocab_size()), mask_id_(run.model.tokenizer->mask_id()),
      tokens_(at::full({batch_, L_}, mask_id_, at::TensorOptions().dtype(at::kLong).device(run.device))),
      unmasking_(sampler.start(*this)),
      kv_(sampler.key_value_cache() != KeyValueCache::none ? run.model.denoiser->window_decoder() : nullptr),
      kv_prefix_(sampler.key_value_cache() == KeyValueCache::prefix),
      always_fresh_(!s_.cache || run.composer.needs_fresh_logits() || run.model.denoiser->traits().reads_time),
      every_row_(run.model.denoiser->traits().uses_evidence),
      swarm_(samples, particles_, run.recipe.guidance.resample_scale) {
    const auto flags = tokens_.options().dtype(at::kBool);
    if (s_.prompt_guidance > 0) prompt_ = at::zeros({batch_, L_}, flags);
    // Remasking never touches a position a controller fixed: a hard constraint stays met.
    if (unmasking_->remasks()) pinned_ = at::zeros({batch_, L_}, flags);
}

at::Tensor AbsorbingLoop::run() {
    int64_t i = 0;
    for (; i < unmasking_->steps(); ++i) {
        // Parallel decoding takes as many steps as the blocks need, bd3lm as its starts do: none once nothing is
        // masked.
        if (unmasking_->ends_when_unmasked() && i > 0 && !tokens_.eq(mask_id_).any().item<bool>()) break;
        step(i);
    }
    run_.stats.steps += i;
    return swarm_.chosen(tokens_);
}

at::Tensor AbsorbingLoop::best_guess() const {
    if (!logits_.defined()) return tokens_;
    at::Tensor scores = logits_.clone();
    scores.select(1, mask_id_).fill_(-std::numeric_limits<float>::infinity());
    return at::where(tokens_.eq(mask_id_), most_likely(scores).view({batch_, L_}), tokens_);
}

GenerationFault AbsorbingLoop::fault_at(int64_t i, const at::Tensor& at_positions, int64_t row) const {
    const int64_t position = at_positions[row].item<int64_t>();
    return run_.fault_at(i, position / L_, position % L_, logits_[position]);
}

void AbsorbingLoop::fault_if_any_empty(int64_t i, const at::Tensor& positions, const at::Tensor& scores) const {
    fault_if_empty(i, positions, [&] {
        const at::Tensor empty = scores.isnan().any(1).logical_or_(at::isfinite(scores).any(1).logical_not_());
        if (empty.any().item<bool>()) throw NothingToSample(empty.nonzero()[0][0].item<int64_t>());
        return at::Tensor();
    });
}

void AbsorbingLoop::commit_rows(int64_t i, const at::Tensor& positions, const at::Tensor& drawn, const Redraw& redraw) {
    const CommitState state = [this](const at::Tensor&) {
        return std::make_pair(tokens_, tokens_.eq(mask_id_).to(at::kByte));
    };
    run_.stats.redrawn += commit_drawn(run_.composer, tokens_, positions, drawn, state, redraw, i, unmasking_->steps(),
                                       unmasking_->t(i), unmasking_->t_next(i))
                              .redrawn;
    stale_ = true;
}

void AbsorbingLoop::commit_draws(int64_t i, const at::Tensor& positions, const at::Tensor& tokens,
                                 const at::Tensor& scores, bool arg_max) {
    const at::Tensor rows = tokens.lt(V_).logical_and_(tokens.ne(mask_id_)).nonzero().squeeze(1);
    if (rows.size(0) == 0) return;
    const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
        const at::Tensor again_rows = rows.index_select(0, which);
        at::Tensor again = scores.index_select(0, again_rows);
        Composer::forbid(again, forbidden_bits);
        return draw_rows(i, again, positions.index_select(0, again_rows), arg_max);
    };
    commit_rows(i, positions.index_select(0, rows), tokens.index_select(0, rows), redraw);
}

std::optional<AbsorbingLoop::DrawRows> AbsorbingLoop::rows_to_draw(const at::Tensor& unmask, const Combined& combined,
                                                                   const at::Tensor& row_logits) const {
    const at::Tensor drawn_at_row = unmask.view({-1}).index_select(0, combined.rows).nonzero().squeeze(1);
    if (drawn_at_row.size(0) == 0) return std::nullopt;
    const at::Tensor positions = combined.rows.index_select(0, drawn_at_row);
    // Every row drawn (none fixed this step): the combination's rows as they are, no copy of them.
    const bool every_row_drawn = drawn_at_row.size(0) == combined.rows.size(0);
    const at::Tensor pick = every_row_drawn ? at::Tensor() : drawn_at_row;
    at::Tensor scores =
        Composer::controlled(pick.defined() ? row_logits.index_select(0, pick) : row_logits, combined, pick, mask_id_);
    return DrawRows{drawn_at_row, positions, std::move(scores)};
}

void AbsorbingLoop::temper(at::Tensor& scores) const {
    if (s_.temperature != 0.0 && s_.temperature != 1.0) scores.div_(s_.temperature);
}

void AbsorbingLoop::truncate(at::Tensor& scores) const {
    if (s_.truncates()) DiscreteSampler::truncate(scores, s_.top_k, s_.top_p);
}

at::Tensor AbsorbingLoop::draw_rows(int64_t i, const at::Tensor& scores, const at::Tensor& positions,
                                    bool arg_max) const {
    return fault_if_empty(i, positions, [&] {
        return arg_max ? DiscreteSampler::arg_max(scores) : DiscreteSampler::draw(scores, run_.gen);
    });
}

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

// One network call on the tokens as they stand. With Fast-dLLM's key/value cache (once the sampler's blocks are
// known): every position at a block's first call, keeping the keys and values (its block-level refresh); then the
// block's window only (to the sequence's end: prefix; the block's: dual), written into logits_ and outside_ in place:
// the other rows keep the refresh's output, which the step does not read.
void AbsorbingLoop::call_denoiser(double t, const Combined& constraints) {
    Denoiser& denoiser = *run_.model.denoiser;
    const auto set = [&](const DenoiserOutput& out) {
        logits_ = out.logits.to(at::kFloat);
        outside_ = out.outside.defined() ? out.outside.to(at::kFloat) : at::Tensor();
        score_total_ = out.log_score_total.defined() ? out.log_score_total.to(at::kFloat).reshape({-1}) : at::Tensor();
    };
    const auto block = kv_ ? unmasking_->cache_block(step_) : std::nullopt;
    if (!block) return set(denoiser.denoise(tokens_, t, {}, evidence_of(constraints, batch_, L_, V_, every_row_)));
    const auto [begin, end] = *block;
    if (begin != cached_block_) {
        cached_block_ = begin;
        set(kv_->refresh(tokens_));
        // Windows are written into these: tensors of the loop's own, not the denoiser's inference-mode ones.
        logits_ = logits_.clone();
        outside_ = outside_.clone();
        return;
    }
    const int64_t stop = kv_prefix_ ? L_ : end;
    const DenoiserOutput window = kv_->window(tokens_, begin, stop);
    logits_.view({batch_, L_, V_}).narrow(1, begin, stop - begin).copy_(window.logits);
    outside_.view({batch_, L_, -1}).narrow(1, begin, stop - begin).copy_(window.outside);
}

void AbsorbingLoop::step(int64_t i) {
    step_ = i;
    const double t = unmasking_->t(i), t_next = unmasking_->t_next(i);
    const at::Tensor masked = tokens_.eq(mask_id_);
    // Which positions unmask is drawn first: a step where none does changes nothing, and costs nothing more.
    at::Tensor unmask = unmasking_->choose(masked, i, *this);
    // Which committed tokens are masked again (remasking): chosen from the step's state, as unmasking is, and
    // applied after the draw, so this step's draws still see them.
    at::Tensor remask = unmasking_->remasks()
                            ? unmasking_->remask(masked.logical_not().logical_and_(pinned_.logical_not()), i, run_.gen)
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
        unmasking_->idle(i, *this);
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
        predict_inputs({i, unmasking_->steps(), t, t_next, {}, tokens_, masked.to(at::kByte), rows, {}}, reads, logits_,
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
    unmasking_->after_fixed(unmask, i, *this);
    if (changed || (every_row_ && !same_constraints(combined, seen_))) {
        denoise(t, combined);
        row_logits = every_row_ ? logits_ : logits_.index_select(0, in.rows);
    }
    unmasking_->draw(i, unmask, combined, row_logits, *this);
    apply_remask();
    tick();
}

}  // namespace rudder::absorbing
