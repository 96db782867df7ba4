// A model's own likelihood bound, its negative ELBO, estimated by Monte Carlo: per batch of texts, `draws` times one
// noise level stratified over the process and one noise draw per text. `rudder likelihood` (docs/cli.md).
//
// Absorbing (masking) noise: MDLM's continuous-time bound (Sahoo et al. 2024, "Simple and effective masked diffusion
// language models", eq. 11)
//   -log p(x) <= E_{t ~ U(0, 1]} E_{z_t ~ q(z_t | x)} [ a'(t) / (1 - a(t)) * sum_{i masked in z_t} log p(x_i | z_t) ]
// with a(t) = 1 - m(t) the share of tokens kept and m(t) = (1 - eps) t Rudder's masking probability, so the weight
// -a'(t) / (1 - a(t)) is 1 / t. For a score-entropy network sampled through the clean-token distribution its score
// implies, this is SEDD's bound for that (normalised) score: see docs/training.md.
//
// Uniform noise: SEDD's bound (Lou et al. 2024: the diffusion-weighted denoising score entropy is a negative ELBO),
// for the score the model's clean-token estimate implies, plus the prior term:
//   -log p(x) <= E_{t ~ U(0, 1]} E_{z_t ~ q(z_t | x)} [ sigma(t) sum_i DSE_i(s(z_t), z_t, x) ]
//                + sum_i KL(q(z_1^i | x_i) || uniform)
// (nn::score_entropy; the score from nn::uniform_score_of_clean). As in SEDD, the noise below sigma_min (1e-4, a
// token changed with probability 1e-4) is left out.
//
// Continuous (Gaussian noise on embeddings, Diffusion-LM and CDCD): the variational bound of the model's T-step
// chain (Ho et al. 2020; Kingma et al. 2021, "Variational diffusion models", eq. 13), x = E[w] the text's embeddings,
// z_k ~ N(sqrt(ab_k) x, (1 - ab_k) I), the reverse step the DDPM posterior q(z_{k-1} | z_k, x0(z_k)) with its
// variance (Rudder's `ddpm` sampler at noise scale 1, on every one of the T steps):
//   -log p(w) <= E[-log p(w | z_1)] + sum_{k=2..T} E[(SNR(k-1) - SNR(k)) / 2 |x - x0(z_k)|^2] + KL(q(z_T | x) || N(0,
//   I))
// with SNR(k) = ab_k / (1 - ab_k), x0 the network's clean estimate (Diffusion-LM's prediction; CDCD's score
// interpolation, without self-conditioning, which would make the chain non-Markov) and p(w | z_1) its clean-token
// distribution one step from the data. The sum is estimated from `draws` steps k, stratified and drawn in
// proportion to their step in log(1 + SNR), each term divided by its probability.
//
// Each bound is tight when the denoiser is the true posterior (the exact corpus denoiser's): the discrete ones
// exactly, the continuous one as T grows. They are how MDLM, SEDD and Diffusion-LM's successors compare models.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rudder/runtime/model.hpp>

namespace rudder {

struct LikelihoodOptions {
    int64_t draws = 16;  // Monte Carlo draws (a noise level and a noised text) per text
    uint64_t seed = 0;
    int64_t batch_size = 64;  // texts per network call
    int64_t length = 0;  // positions per sequence (texts are padded to it); 0: the network's, else the longest text
};

struct LikelihoodReport {
    int64_t texts = 0;             // texts scored
    int64_t tokens = 0;            // their tokens, with one end token per text (as the teacher counts them)
    int64_t length = 0;            // positions per padded sequence
    int64_t unknown_tokens = 0;    // words the tokenizer did not know, scored as its unknown token
    int64_t skipped_too_long = 0;  // texts with more tokens than `length`
    int64_t draws = 0;
    double nelbo_sum = 0.0;     // nats, over all texts: a bound on -log p of the whole file
    double nelbo_sq_sum = 0.0;  // sum of each text's squared estimate (for the standard error)
    double nats_per_token() const { return tokens ? nelbo_sum / static_cast<double>(tokens) : 0.0; }
    double perplexity_bound() const;  // exp(nats_per_token): the model's perplexity is at most this
    double nats_per_text() const { return texts ? nelbo_sum / static_cast<double>(texts) : 0.0; }
    // Standard error of nats_per_token from the spread of the per-text estimates.
    double standard_error_per_token() const;
};

// Which bound the model takes: "mdlm_absorbing", "sedd_uniform" or "ddpm_vlb" (continuous).
std::string nelbo_kind(const Model& model);

// The bound nelbo_kind(model) names. Throws std::invalid_argument for bad options, a model without a padding token
// or texts longer than the network. `progress(texts done, texts)` is called after every batch.
LikelihoodReport nelbo(const Model& model, const std::vector<std::string>& texts, const LikelihoodOptions& options,
                       const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace rudder
