// Committing a step's draws through the controllers that hold a language exactly (ABI 1.3, RUDDER_PHASE_COMMIT):
// every process commits its drawn tokens here, so that no sampler commits a set of tokens that cannot end well
// together, however many positions it draws in one step.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

#include "composer.hpp"

namespace rudder {

// Draws the tokens of some of the proposed rows again: `which` (int64 [n], indices into the first proposal's rows),
// within what the controllers now forbid there (`forbidden_bits` int32 [n, W], undefined when none wrote any).
// Returns int64 [n].
using Redraw = std::function<at::Tensor(const at::Tensor& which, const at::Tensor& forbidden_bits)>;

// What the COMMIT controllers see of the sequences: the tokens as they stand and which positions are still masked
// (uint8 [B, L]), given the rows not committed yet (`pending`: flat positions, int64 [n]; a process whose state has
// no masks, the continuous one, marks them).
using CommitState = std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor& pending)>;

struct CommitOutcome {
    int64_t rounds = 0;   // COMMIT calls (0 without a COMMIT controller)
    int64_t redrawn = 0;  // rows drawn again
};

// Writes `drawn` (int64 [n]) at `positions` (flat b * L + i, ascending; int64 [n]) into `tokens` ([B, L], replaced by
// a new tensor). Without a controller that declares RUDDER_CAP_COMMIT, one copy. With them: the rows none rejects
// are committed (the first row if all are: a single draw is always consistent with the masks it was drawn within),
// the others are drawn again by `redraw` and proposed again, until every row is committed; at most n rounds.
// `state` gives the COMMIT controllers the sequences as they stand (tokens, masked) before each round; `step`, `t`
// and `t_next` are the step's.
CommitOutcome commit_drawn(Composer& composer, at::Tensor& tokens, const at::Tensor& positions, at::Tensor drawn,
                           const CommitState& state, const Redraw& redraw, int64_t step, int64_t steps, double t,
                           double t_next);

}  // namespace rudder
