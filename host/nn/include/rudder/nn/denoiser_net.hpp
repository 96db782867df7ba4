// Transformer denoisers of the two diffusion families, trained by `rudder train` and wrapped for sampling by the
// runtime's TransformerDenoiser.
//
// Both share one trunk: a bidirectional pre-LayerNorm transformer encoder over
//     [ condition positions (optional) ; text positions ]
// Text positions carry the family's input (continuous: x_t projected up to the model width plus a time embedding;
// discrete: the embedding of the partly masked tokens) plus a learned position embedding. Condition positions
// carry the E2E meaning representation's tokens through their own token table plus their own learned position
// table. The separate tables are the segment embedding: a condition token can never be mistaken for a text token,
// with no third table to learn. Pad condition tokens are masked out as attention keys, so an all-pad condition is
// exactly the unconditional model that condition dropout trains.
//
// Config ("network" in a model's config.json): the trunk's (nn/transformer_trunk.hpp, DenoiserConfig). All
// training noise, dropout included, is drawn from the generator given to loss().
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/schedule.hpp>
#include <rudder/nn/trainable.hpp>
#include <rudder/nn/transformer_trunk.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {

// Log-probability given to impossible entries (the mask token, the other tokens at a committed position) in the
// outputs the sampling loop sees. exp() of it is exactly 0 in float32, yet it stays finite, so a plugin that
// computes p * log p over the distribution never meets 0 * inf.
constexpr float kImpossibleLogProb = -1e4f;

// MDLM's SUBS parameterisation over a network's raw output `logits` [B, L, V] for `tokens` int64 [B, L]: at a
// masked position the log-softmax over every token but `mask_id`; at an unmasked position 0 at its own token.
// Impossible entries (the mask, a committed position's other tokens) are kImpossibleLogProb. Writes into `logits`.
at::Tensor subs_log_probs(at::Tensor logits, const at::Tensor& tokens, int64_t mask_id);

// MDLM's training noise for SUBS on clean `tokens` [B, L]: each row's time t by MDLM's low-discrepancy draw in
// [1e-3, 1] (float64 [B], CPU), each position masked with probability (1 - eps) t (the log-linear schedule), all from
// `gen`; positions where `clean` (bool [B, L], when defined) is true are never masked (a prompt).
struct SubsNoise {
    at::Tensor t;       // double [B]
    at::Tensor masked;  // bool [B, L], on the tokens' device
    at::Tensor x_t;     // int64 [B, L]: tokens with mask_id where masked
};
SubsNoise draw_subs_noise(const at::Tensor& tokens, int64_t mask_id, double eps, at::Generator& gen,
                          const at::Tensor& clean = {});

// MDLM's continuous-time negative ELBO under SUBS (the derivation is in the .cpp) from a network's final states
// [B, L, H] on noise.x_t and its output head (weight [V, H]; `bias` [V] with -inf at the mask, which SUBS never
// predicts): the head runs on the masked positions only. Divided by all B * L positions.
at::Tensor subs_nelbo(const at::Tensor& states, const SubsNoise& noise, const at::Tensor& tokens,
                      const at::Tensor& head_weight, const at::Tensor& bias);

// CDCD's embedding table from the learned one `table` [V, D]: each row scaled to length sqrt(D), in float32
// whatever `table` holds (a float16 file's table gives the table its float32 parameter gives).
at::Tensor cdcd_embedding(const at::Tensor& table);

// What both families have in common: config, trunk, input checks, condition dropout.
class DenoiserNet : public TrainableNetwork {
public:
    const DenoiserConfig& denoiser_config() const { return config_; }
    Family family() const { return config_.family; }
    // Whether the network has condition inputs (max_condition_length > 0).
    bool conditional() const { return config_.max_condition_length > 0; }
    nlohmann::json config() const override { return config_.to_json(); }
    // The weights of a trained network of this family with `held_layers` (fewer) trunk blocks (`tensors`, as
    // `file` stores them): its blocks are the first ones, the later blocks start as the identity
    // (TransformerTrunk::start_blocks_as_identity), so the grown network computes what the trained one did.
    // Returns the names of the tensors the file did not have. Throws SafeTensorsError for tensors that do not fit.
    std::vector<std::string> grow_from(const SafeTensors& tensors, const std::filesystem::path& file,
                                       int64_t held_layers);

protected:
    explicit DenoiserNet(DenoiserConfig config);
    // Checks tokens [B, L] (1 <= L <= max_length, ids in the vocabulary) and returns them.
    at::Tensor check_tokens(const at::Tensor& tokens) const;
    // Checks a condition [B, C] against the batch and the config; undefined stays undefined.
    at::Tensor check_condition(const at::Tensor& condition, int64_t batch) const;
    // Condition dropout: each row becomes all-pad with probability condition_dropout.
    at::Tensor drop_condition(const at::Tensor& condition, at::Generator& gen) const;
    // The generator for dropout masks: `gen` while training with dropout, nullptr otherwise.
    at::Generator* dropout_generator(at::Generator& gen) const;

    DenoiserConfig config_;
    std::shared_ptr<TransformerTrunk> trunk_;
};

// Embedding diffusion, trained one of two ways (network config "objective"):
// - "diffusion_lm" (Diffusion-LM, x0-parameterisation): the network predicts x0 [B, L, D]; decoded by the rounding
//   head tied to E. Parameters: embedding [V, embed_dim] (the learned token embeddings E), input_proj.*,
//   time_mlp1.*, time_mlp2.*, trunk.*, output_proj.*.
// - "cdcd" (Dieleman et al. 2022): the network predicts the clean token's distribution, x0 is its mean embedding
//   (score interpolation), and one cross-entropy loss trains network and embeddings together. E's rows are used
//   normalised to length sqrt(embed_dim) (unit scale per dimension), so the embeddings cannot outgrow the noise.
//   Noise levels follow the learned time warp (nn/schedule.hpp), kept in the buffers warp_loss and warp_seen.
//   Parameters: embedding, input_proj.*, time_mlp1.*, time_mlp2.*, trunk.*, head.* [V, dim], and with
//   self_conditioning self_condition_proj.* (the previous clean estimate as a further input, Chen et al.'s
//   self-conditioning as CDCD uses it).
class ContinuousDenoiserNet final : public DenoiserNet {
public:
    ContinuousDenoiserNet(const nlohmann::json& network_config, const Tokenizer& tokenizer);

    int64_t embed_dim() const { return config_.embed_dim; }
    bool cdcd() const { return config_.objective == "cdcd"; }
    bool self_conditioned() const { return config_.self_conditioning; }
    // The noise schedule; for "cdcd" the one of the current time warp.
    const GaussianSchedule& schedule() const { return schedule_; }
    // The token embedding table E [V, embed_dim] (the parameter itself).
    const at::Tensor& embedding() const { return embedding_; }
    // The table the diffusion runs on: E itself, or for "cdcd" its rows normalised to length sqrt(embed_dim).
    at::Tensor diffused_embedding() const;
    // "cdcd": the time warp's CDF now ("warp" in the schedule config).
    std::vector<double> warp_cdf() const;

    // x0 estimate [B, L, D] from x_t [B, L, D] at diffusion times t (float [B] in [0, 1], on x_t's device).
    // `gen`: dropout masks while training; nullptr for none. "cdcd": the mean embedding under clean_logits.
    at::Tensor predict_x0(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition,
                          at::Generator* gen = nullptr);
    // "cdcd" only: the clean token's logits [B, L, V] from x_t at times t. `self_condition` [B, L, D]: the
    // previous clean estimate, for a self-conditioned network (undefined: none, i.e. zeros).
    at::Tensor clean_logits(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition,
                            const at::Tensor& self_condition = {}, at::Generator* gen = nullptr);
    // The rounding head: unnormalised logits x0 · E^T [B, L, V]. Tied to E as in Diffusion-LM: the table that is
    // diffused is the one decoded, with no extra parameters, and the rounding loss that trains it is what keeps E
    // from collapsing under the MSE term.
    at::Tensor rounding_logits(const at::Tensor& x0) const;

    // "cdcd" only: the weights of a trained "diffusion_lm" network of the same sizes (`tensors`, as `file` stores
    // them). The table, input and time layers and trunk are taken as they are; the head starts as that network's
    // rounding of its x0 estimate (head = E · output_proj, so the logits are x̂0 · Eᵀ), the self-conditioning
    // projection at zero (no effect until trained), the warp's running means empty. Throws SafeTensorsError for
    // tensors that do not fit.
    void start_from_diffusion_lm(const SafeTensors& tensors, const std::filesystem::path& file);

    // The objective's loss (see the .cpp for the terms). "cdcd" in training mode also updates the time warp.
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;
    nlohmann::json config() const override;
    // "cdcd": {"warp": the CDF, "warp_loss": the running mean loss per bin}.
    nlohmann::json training_log() const override;

private:
    // Checks x_t and t against the config; returns the condition checked.
    at::Tensor check_inputs(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition) const;
    // The trunk's text states from x_t, noise features `level` [B] (t itself, or for "cdcd" the normalised log
    // noise level) and the self-conditioning input (undefined: none).
    at::Tensor hidden(const at::Tensor& x_t, const at::Tensor& level, const at::Tensor& condition,
                      const at::Tensor& self_condition, at::Generator* gen);
    at::Tensor diffusion_lm_loss(const TrainingBatch& batch, at::Generator& gen);
    at::Tensor cdcd_loss(const TrainingBatch& batch, at::Generator& gen);
    // Adds per-example losses at their levels to the warp's running means and refits the warp and schedule.
    void update_warp(const at::Tensor& levels, const at::Tensor& losses);
    TimeWarp warp() const;

    GaussianSchedule schedule_;
    at::Tensor
        alpha_bar_;  // "diffusion_lm": [T + 1] float64 on the CPU, the schedule as a table for per-example lookup
    at::Tensor embedding_;
    at::Tensor warp_loss_, warp_seen_;  // "cdcd": [warp_bins] float64
    std::shared_ptr<Affine> input_proj_, time_mlp1_, time_mlp2_, output_proj_, head_, self_condition_proj_;
};

// Discrete diffusion, trained one of two ways (network config "objective"):
// - "subs" (MDLM): absorbing (masking) noise, the network's output the clean token's logits under MDLM's SUBS
//   parameterisation. No time input: for absorbing diffusion the clean-token posterior given x_t does not depend on
//   t (the number of masks already tells the noise level; MDLM finds time conditioning unnecessary), and without it
//   the loop's cache (skip the network while no token changed) is exact.
// - "score_entropy" (SEDD): trained with the diffusion-weighted denoising score entropy (nn/score_entropy.hpp) over
//   the "absorb" graph (log-linear noise, no time input; the output is the log concrete score at masked positions
//   plus log(e^sigma_bar - 1), SEDD's scaling) or the "uniform" one (geometric noise, where any token may change at
//   any time; the network reads t through a time embedding, and its head gives the clean token's distribution p0,
//   whose implied score, nn::uniform_score_of_clean, is what the loss scores).
// Parameters: token_embedding [V, dim], trunk.*, head.*, and for "uniform" time_mlp1.*, time_mlp2.*.
class DiscreteDenoiserNet final : public DenoiserNet {
public:
    DiscreteDenoiserNet(const nlohmann::json& network_config, const Tokenizer& tokenizer);

    const MaskSchedule& mask_schedule() const { return mask_schedule_; }
    bool score_entropy() const { return config_.objective == "score_entropy"; }
    bool uniform() const { return config_.graph == "uniform"; }
    // "uniform": the geometric noise schedule (config "uniform_schedule").
    const UniformNoiseSchedule& uniform_schedule() const { return uniform_schedule_; }

    // Log-probabilities [B, L, V] of the clean token given tokens x_t [B, L] at time t (read only by "uniform"
    // networks; absorbing ones need no time). Absorbing: x_t has mask_id at masked positions; the mask token is
    // impossible, and an unmasked position is certain of its own token (SUBS); for a score-entropy network, the
    // softmax of its score over y != mask, the clean-token distribution the score implies (the scaling is the same
    // for every y). Uniform: at every position the clean token's posterior given all of x_t (the head gives it
    // given the other positions, nn::uniform_posterior_from_rest adds the position's own token); the mask token is
    // impossible. Impossible entries are kImpossibleLogProb.
    at::Tensor log_probs(const at::Tensor& tokens, const at::Tensor& condition, double t = 1.0);

    // "subs": MDLM's continuous-time ELBO for the log-linear schedule; "score_entropy": SEDD's DWDSE (see the .cpp).
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;

private:
    // The head's bias with -inf at the mask token.
    at::Tensor head_bias() const;
    // The trunk's states [B, L, dim] for x_t; a "uniform" network adds the embedding of t (float [B]) first.
    at::Tensor hidden(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition, at::Generator* gen);
    at::Tensor subs_loss(const TrainingBatch& batch, at::Generator& gen);
    at::Tensor score_entropy_loss(const TrainingBatch& batch, at::Generator& gen);

    MaskSchedule mask_schedule_;
    UniformNoiseSchedule uniform_schedule_;
    at::Tensor token_embedding_;
    std::shared_ptr<Affine> head_, time_mlp1_, time_mlp2_;
};

// The network of the family `network_config["family"]` names (required here). Throws ConfigError.
std::shared_ptr<DenoiserNet> make_denoiser_net(const nlohmann::json& network_config, const Tokenizer& tokenizer);

// Meaning-representation texts as a network's condition input: int64 [N, condition_length], each text's ids then
// pad. "" is all pad, i.e. unconditional (what condition dropout trains). Throws std::invalid_argument naming the
// text when it has more than condition_length tokens. Training and sampling both build conditions with it, so
// they tokenize meaning representations alike.
at::Tensor encode_conditions(const Tokenizer& tokenizer, const std::vector<std::string>& conditions,
                             int64_t condition_length);

}  // namespace rudder::nn
