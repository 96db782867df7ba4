#include "step_inputs.hpp"

#include <ATen/ATen.h>

namespace rudder {
namespace {

bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
    if (a.defined() != b.defined()) return false;
    return !a.defined() || (a.sizes() == b.sizes() && a.equal(b));
}

}  // namespace

plugins::StepInputs predict_inputs(const PredictState& state, const Composer::Reads& reads, const at::Tensor& logits,
                                   const at::Tensor& row_logits, at::Tensor& logp, int64_t candidates) {
    plugins::StepInputs in;
    in.phase = RUDDER_PHASE_PREDICT;
    in.step = static_cast<int32_t>(state.step);
    in.total_steps = static_cast<int32_t>(state.steps);
    in.t = state.t;
    in.t_next = state.t_next;
    in.latent = state.latent;
    in.tokens = state.tokens;
    in.masked = state.masked;
    in.rows = state.rows;
    in.self_condition = state.self_condition;
    const int64_t batch = state.tokens.size(0), L = state.tokens.size(1), V = logits.size(1);
    if (reads.whole_x0) {
        if (!logp.defined()) logp = at::log_softmax(logits, -1);
        in.x0_logits = logp.view({batch, L, V});
    }
    const bool every_row = in.rows.size(0) == batch * L;
    if (reads.x0_rows)
        in.x0_rows =
            logp.defined() ? (every_row ? logp : logp.index_select(0, in.rows)) : at::log_softmax(row_logits, -1);
    if (reads.candidates) {
        // Read by no controller, x0 is not normalised for them: the denoiser's output already is (DenoiserOutput).
        auto [top, ids] = plugins::top_candidates(in.x0_rows.defined() ? in.x0_rows : row_logits, candidates);
        in.candidate_ids = ids;
        in.candidate_logp = top;
    }
    return in;
}

plugins::StepInputs commit_inputs(const PredictState& state, const at::Tensor& proposed, int64_t round) {
    plugins::StepInputs in;
    in.phase = RUDDER_PHASE_COMMIT;
    in.step = static_cast<int32_t>(state.step);
    in.total_steps = static_cast<int32_t>(state.steps);
    in.guide_iter = static_cast<int32_t>(round);
    in.t = state.t;
    in.t_next = state.t_next;
    in.tokens = state.tokens;
    in.masked = state.masked;
    in.rows = state.rows;
    in.proposed = proposed;
    return in;
}

plugins::StepInputs guide_inputs(const plugins::StepInputs& predict, const at::Tensor& latent, int64_t iteration) {
    plugins::StepInputs g = predict;
    g.phase = RUDDER_PHASE_GUIDE;
    g.guide_iter = static_cast<int32_t>(iteration);
    g.t = predict.t_next;
    g.latent = latent;
    g.x0_logits = at::Tensor();
    return g;
}

Evidence evidence_of(const Combined& c, int64_t batch, int64_t len, int64_t vocab_size, bool uses_evidence) {
    const at::Tensor forbidden = uses_evidence ? c.forbidden_mask(vocab_size) : at::Tensor();
    const bool whole = forbidden.defined() && forbidden.size(0) == batch * len;
    return Evidence{c.fixed, whole ? forbidden.view({batch, len, -1}) : at::Tensor(), at::Tensor()};
}

Combined rows_only(const at::Tensor& rows) {
    Combined c;
    c.rows = rows;
    return c;
}

bool same_constraints(const Combined& a, const Combined& b) {
    return same_tensor(a.fixed, b.fixed) && same_tensor(a.forbidden, b.forbidden) &&
           same_tensor(a.forbidden_bits, b.forbidden_bits) && same_tensor(a.rows, b.rows);
}

at::Tensor most_likely(const at::Tensor& scores) { return std::get<1>(scores.max(-1)); }

}  // namespace rudder
