// SEDD's discrete diffusion (Lou et al. 2024, "Discrete Diffusion Modeling by Estimating the Ratios of the Data
// Distribution"): the forward processes of its two transition matrices, and the denoising score entropy loss that
// trains a network to estimate the concrete score s(x_t)_y = p_t(y) / p_t(x_t) between x_t and its one-token
// neighbours y. Tokens diffuse independently per position, so everything here works on one position per row.
//
// Rates (column convention, dp/dt = sigma(t) Q p; Q[y, x] is the rate from x to y):
//   absorb   Q[mask, x] = 1 for x != mask: a token turns into the mask token, which never changes.
//            exp(sigma_bar Q): a token stays with alpha = exp(-sigma_bar), else it is the mask.
//   uniform  Q = 1 1^T / V - I: a token turns into any token (itself included) at total rate 1, uniformly.
//            exp(sigma_bar Q) = alpha I + (1 - alpha) 1 1^T / V: kept with alpha, else a uniform draw.
// The uniform matrix is normalised so that sigma_bar means the same amount of noise whatever V is.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace rudder::nn {

enum class Graph { absorb, uniform };
const char* graph_name(Graph g);
// "absorb" or "uniform"; std::invalid_argument naming both otherwise.
Graph parse_graph(const std::string& name);

// p_t(y | x0) for every y: float64 [N, V] for clean tokens `x0` (int64 [N]) at total noise `sigma_bar` (float64
// [N]). `mask_id` is the absorbing state (ignored by the uniform graph).
at::Tensor transition_probs(Graph graph, const at::Tensor& x0, const at::Tensor& sigma_bar, int64_t vocab_size,
                            int64_t mask_id);

// One draw of x_t ~ p_t(. | x0) per entry of `x0` (int64 [B, L]) with the row's total noise `sigma_bar` (float64 [B]).
at::Tensor sample_transition(Graph graph, const at::Tensor& x0, const at::Tensor& sigma_bar, int64_t vocab_size,
                             int64_t mask_id, at::Generator& gen);

// The denoising score entropy of one position per row (SEDD, eq. 9 with the rates above):
//   sum over y != x_t of Q[x_t, y] * ( s_y - r_y log s_y + K(r_y) ),  r_y = p_t(y | x0) / p_t(x_t | x0),
//   K(a) = a (log a - 1),
// where s_y = exp(log_score[., y]) is the network's concrete score. It is >= 0, and 0 exactly when s_y = r_y (the
// true ratio for that clean token). The entry at y = x_t is never read. Absorbing rows whose x_t is not the mask
// score 0 (nothing flows into an unmasked token). Inputs: log_score float [N, V], x_t and x0 int64 [N], sigma_bar
// float64 [N] (> 0). Returns [N] in log_score's dtype, differentiable in log_score. Not yet weighted by sigma(t):
// the diffusion-weighted loss (DWDSE) multiplies by the noise rate at t.
at::Tensor score_entropy(Graph graph, const at::Tensor& log_score, const at::Tensor& x_t, const at::Tensor& x0,
                         const at::Tensor& sigma_bar, int64_t mask_id);

// Under the uniform graph a position's own noisy token is evidence about its clean token. The clean-token
// distribution given all of x_t (the posterior, what the runtime's denoisers return) and the one given the other
// positions only (p0, what the score and the reverse steps below are written with) differ by that evidence:
//   post(y) ∝ p0(y) (alpha [y = x_t] + (1 - alpha) / V),   alpha = exp(-sigma_bar).
// Both map log-probabilities [N, V] at tokens x_t (int64 [N]) and total noise sigma_bar (float64 [N], > 0) to
// log-probabilities [N, V] in the input's dtype (-inf stays -inf).
// What a position's own token adds to the log-weight of a clean token equal to it:
//   log(alpha + (1 - alpha) / V) - log((1 - alpha) / V) = log1p(V / expm1(sigma_bar)), float64 per entry of sigma_bar.
at::Tensor uniform_own_token_gain(const at::Tensor& sigma_bar, int64_t vocab_size);
at::Tensor uniform_posterior_from_rest(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar);
at::Tensor uniform_rest_from_posterior(const at::Tensor& log_post, const at::Tensor& x_t, const at::Tensor& sigma_bar);

// The concrete score a clean-token distribution implies under the uniform graph. At total noise sigma_bar (alpha =
// exp(-sigma_bar)), p_t(y) = alpha p0(y) + (1 - alpha) / V given the rest of the sequence, so
//   log s_y = log p_t(y) - log p_t(x_t) = log1p(a p0(y)) - log1p(a p0(x_t)),   a = alpha V / (1 - alpha),
// which stays exact where alpha is tiny (s_y - 1 is then of order alpha). A uniform-noise network is parameterised
// this way (its head gives p0, the distribution given the other positions), so its score is always a valid one and
// p0 needs no inversion of the score, which divides by alpha: 2e-9 at sigma_bar 20. Inputs: log_p0 float [N, V]
// (log-probabilities), x_t int64 [N], sigma_bar float64 [N] (> 0). Returns [N, V] in log_p0's dtype, differentiable in
// log_p0.
at::Tensor uniform_score_of_clean(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar);

// The reverse steps over the uniform graph for one position per row, from the clean-token distribution p0 given the
// other positions (log_p0 float [N, V]) at x_t (int64 [N]), from total noise sigma_bar_t back to sigma_bar_s (float64
// [N], sigma_bar_t >= sigma_bar_s >= 0; 0 is the clean data). Both return probabilities of x_s, float64 [N, V] (rows
// sum to 1).
// Tweedie tau-leaping (SEDD, section 4.2): p(x_s = y) ∝ [exp(-d Q) s]_y exp(d Q)[y, x_t], d = sigma_bar_t -
// sigma_bar_s, for the score s that p0 implies. Written out, this is Bayes over the forward kernels:
//   p(x_s = y | x_t) ∝ (beta [y = x_t] + (1 - beta) / V) (alpha_s p0(y) + (1 - alpha_s) / V),  beta = e^-d,
// exact for one position when p0 is the true clean distribution. At sigma_bar_s = 0 it draws the clean token.
at::Tensor uniform_tweedie_probs(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar_t,
                                 const at::Tensor& sigma_bar_s);
// Euler (SEDD, section 4.1): leaving x_t for y != x_t with probability d Q[x_t, y] s_y = (d / V) s_y, the reverse
// rate over the step (Q is symmetric here) with s the score at sigma_bar_t (> 0); staying with the rest (clipped at
// 0).
at::Tensor uniform_euler_probs(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar_t,
                               const at::Tensor& sigma_bar_s);

}  // namespace rudder::nn
