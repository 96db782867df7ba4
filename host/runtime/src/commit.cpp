#include "commit.hpp"

#include <ATen/ATen.h>

#include "step_inputs.hpp"

#include <tuple>

namespace rudder {

CommitOutcome commit_drawn(Composer& composer, at::Tensor& tokens, const at::Tensor& positions, at::Tensor drawn,
                           const CommitState& state, const Redraw& redraw, int64_t step, int64_t steps, double t,
                           double t_next) {
    CommitOutcome outcome;
    tokens = tokens.clone();
    if (!composer.commits()) {
        tokens.view({-1}).index_copy_(0, positions, drawn);
        return outcome;
    }
    at::Tensor rows = positions, which = at::arange(positions.size(0), positions.options());
    while (rows.size(0) > 0) {
        PredictState round;
        round.step = step;
        round.steps = steps;
        round.t = t;
        round.t_next = t_next;
        std::tie(round.tokens, round.masked) = state(rows);
        round.rows = rows;
        const Commit verdict = composer.commit(commit_inputs(round, drawn, outcome.rounds));
        ++outcome.rounds;
        const at::Tensor accepted = verdict.committed();
        const at::Tensor keep = accepted.nonzero().squeeze(1), again = accepted.logical_not().nonzero().squeeze(1);
        tokens.view({-1}).index_copy_(0, rows.index_select(0, keep), drawn.index_select(0, keep));
        if (again.size(0) == 0) break;
        rows = rows.index_select(0, again);
        which = which.index_select(0, again);
        const at::Tensor bits =
            verdict.forbidden_bits.defined() ? verdict.forbidden_bits.index_select(0, again) : at::Tensor();
        drawn = redraw(which, bits);
        outcome.redrawn += rows.size(0);
    }
    return outcome;
}

}  // namespace rudder
