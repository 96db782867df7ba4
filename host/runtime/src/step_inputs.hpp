// What every reverse loop builds the same way: the controllers' view of a step (plugins::StepInputs, built here
// only), the constraints as a denoiser takes them, and the small tensor helpers the loops share.
#pragma once

#include <rudder/plugins/plugins.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "composer.hpp"

namespace rudder {

// One PREDICT step's state: `latent` (continuous) or `masked` (discrete) is undefined for the other family.
struct PredictState {
    int64_t step = 0, steps = 0;
    double t = 1.0, t_next = 0.0;
    at::Tensor latent;          // continuous: float32 [B, L, D]
    at::Tensor tokens;          // int64 [B, L]
    at::Tensor masked;          // discrete: uint8 [B, L]
    at::Tensor rows;            // int64 [N]: the positions the step samples, flat b * L + i, ascending
    at::Tensor self_condition;  // a self-conditioned network's previous clean estimate (continuous), or undefined
};

// What the controllers see at a PREDICT step: `state`, and what the controllers active at t read (`reads`) taken
// from the network's scores: x0 whole (log-probabilities [B, L, V]) or at the rows, and the candidates (k =
// `candidates`). `logits` [B * L, V] are the network's output, `row_logits` [N, V] the same at the rows; `logp`
// caches their log-softmax between steps (controllers that read x0 get it normalised again, as they always have).
plugins::StepInputs predict_inputs(const PredictState& state, const Composer::Reads& reads, const at::Tensor& logits,
                                   const at::Tensor& row_logits, at::Tensor& logp, int64_t candidates);

// COMMIT (plugin ABI 1.3): one round of a step's commits, for Composer::commit. `state` as the round stands: `tokens`
// the state before these commits (positions not committed yet hold the mask token: the run's mask_id, -1 in the
// continuous family), `masked` (discrete; all zero under uniform noise), `rows` the rows still to commit, ascending;
// its latent and self_condition are not read. `proposed` int64 [N]: the token drawn for each row. `round`: 0 at the
// step's first proposal, then 1, 2, ... (the plugins see it as guide_iter).
plugins::StepInputs commit_inputs(const PredictState& state, const at::Tensor& proposed, int64_t round);

// GUIDE (continuous): the step's PREDICT inputs, at the next noise level, on the guided iterate.
plugins::StepInputs guide_inputs(const plugins::StepInputs& predict, const at::Tensor& latent, int64_t iteration);

// The constraints as the denoiser takes them: whole [B, L, V] masks, which the combination has when its rows are every
// position (a loop asks for that from denoisers that use evidence; others get no mask, which costs nothing).
Evidence evidence_of(const Combined& c, int64_t batch, int64_t len, int64_t vocab_size, bool uses_evidence);

// A combination with nothing in it over these rows.
Combined rows_only(const at::Tensor& rows);

// Whether two steps' hard constraints are the same (they usually are: most controllers constrain every step alike).
bool same_constraints(const Combined& a, const Combined& b);

// The most likely token of each row: max(-1)'s index, which ATen 1.13 computes ~4x faster than argmax(-1).
at::Tensor most_likely(const at::Tensor& scores);

}  // namespace rudder
