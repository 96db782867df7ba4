// The transformer trunk shared by the denoisers of both families (nn/denoiser_net.hpp) and the controllers' noisy
// classifiers (nn/text_classifier.hpp): its config, its building blocks and the time features. The trunk and its
// parameter names are the weights files' format.
//
// Config ("network" in a model's config.json); every key is optional, defaults shown:
//   family "continuous" | "discrete"   must match the class when present
//   vocab_size                          must equal the tokenizer's when present (catches a swapped vocab.txt)
//   dim 128, layers 4, heads 4 (must divide dim), ff_dim 512,
//   max_length 64                       longest text (learned positions)
//   max_condition_length 64             longest meaning representation; 0 = no condition inputs at all. E2E's
//                                       MRs are 30 word tokens on average, 49 at most; a batch only pays for
//                                       the columns its longest MR uses, so a generous limit costs nothing
//   dropout 0                           on the residual branches, training only. Off by default: a CPU budget
//                                       of an hour is one or two passes over E2E, far from overfitting
//   condition_dropout 0.1               share of training rows whose condition is replaced by all-pad
//   continuous only: embed_dim 16, schedule {"name": "sqrt", "T": 2000},
//                    objective "diffusion_lm" (x0-MSE with a rounding term) | "cdcd" (cross-entropy, score
//                    interpolation, normalised embeddings; needs the "cdcd" schedule and only it:
//                    {"name": "cdcd", "T": 2000, "sigma_min": 1, "sigma_max": 300, "warp_bins": 100,
//                    "warp_uniform": 0.5, "warp": [...]},
//                    "warp" being the learned time warp's CDF, written by the trainer), self_conditioning false
//   discrete only:   mask_schedule {"eps": 0.001}, objective "subs" (MDLM) | "score_entropy" (SEDD), graph "absorb" |
//                    "uniform" (score_entropy only), uniform_schedule {"sigma_min": 1e-4, "sigma_max": 20} (geometric
//                    total noise sigma_min^(1-t) sigma_max^t; "uniform" only)
// A bad config throws ConfigError listing every problem with its JSON pointer (/dim, /schedule/T, ...), an
// unknown key with a "did you mean". Initial parameters are drawn from LibTorch's default CPU generator
// (at::manual_seed fixes them).
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rudder/nn/schedule.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {

constexpr double kInitStd = 0.02;  // GPT-2's initialisation of weights and embeddings

// Normal values from LibTorch's default CPU generator (at::manual_seed fixes them).
inline at::Tensor init_normal(at::IntArrayRef sizes, double std) { return at::randn(sizes, at::kFloat) * std; }

// A denoiser's validated config (see the top of this file).
struct DenoiserConfig {
    Family family = Family::continuous;
    int64_t vocab_size = 0;  // from the tokenizer
    int64_t pad_id = 0;
    int64_t mask_id = 2;
    int64_t dim = 128;
    int64_t layers = 4;
    int64_t heads = 4;
    int64_t ff_dim = 512;
    int64_t max_length = 64;
    int64_t max_condition_length = 64;
    double dropout = 0.0;
    double condition_dropout = 0.1;
    // continuous
    int64_t embed_dim = 16;
    std::string schedule = "sqrt";
    int64_t schedule_steps = 2000;
    std::string
        objective;  // continuous: "diffusion_lm" (default) | "cdcd"; discrete: "subs" (default) | "score_entropy"
    bool self_conditioning = false;
    double sigma_min = 1.0, sigma_max = 300.0;  // "cdcd" schedule
    int64_t warp_bins = 100;
    double warp_uniform = 0.5;  // share of the levels drawn uniformly whatever the fit (fit_time_warp's floor)
    std::vector<double> warp;   // the time warp's CDF (warp_bins + 1 values); empty = uniform
    // discrete
    double mask_eps = 1e-3;
    std::string graph = "absorb";                               // score_entropy: "absorb" | "uniform"
    double uniform_sigma_min = 1e-4, uniform_sigma_max = 20.0;  // "uniform": geometric total noise

    // Reads `config` for `family`; throws ConfigError with every problem.
    static DenoiserConfig parse(const nlohmann::json& config, const Tokenizer& tokenizer, Family family);
    // The full config, defaults filled in; parse(to_json()) gives this config back.
    nlohmann::json to_json() const;
    // Continuous: the Gaussian schedule the config names ("cdcd": over the config's warp, uniform when it has none).
    GaussianSchedule gaussian_schedule() const;
    // A lower bound on the parameters of a network of this config: its blocks' four matrices (4 dim^2 + 2 dim ff_dim
    // each) and its positions. A loader compares it with the weights file before building the network, which
    // allocates and draws every parameter (up to 344 GB at the largest sizes a config may give).
    int64_t parameters_at_least() const;
};

// Building blocks. Plain parameters and ATen calls rather than torch::nn modules: the maths is on the page, the
// parameter names are ours (they are the weights file's format), and the headers stay light.
// Under the trainer's bfloat16 autocast (training.precision) linear layers and matrix products return bfloat16:
// softmaxes and log-softmaxes name float32 as their dtype, and losses widen logits before a logsumexp, so
// normalisations and losses are computed in float32 either way.
class Affine : public torch::nn::Module {
public:
    Affine(int64_t in, int64_t out, double std) {
        weight_ = register_parameter("weight", init_normal({out, in}, std));
        bias_ = register_parameter("bias", at::zeros({out}));
    }
    at::Tensor forward(const at::Tensor& x) const { return at::linear(x, weight_, bias_); }
    const at::Tensor& weight() const { return weight_; }
    const at::Tensor& bias() const { return bias_; }

private:
    at::Tensor weight_, bias_;
};

class LayerNorm : public torch::nn::Module {
public:
    explicit LayerNorm(int64_t dim) : dim_(dim) {
        weight_ = register_parameter("weight", at::ones({dim}));
        bias_ = register_parameter("bias", at::zeros({dim}));
    }
    at::Tensor forward(const at::Tensor& x) const { return at::layer_norm(x, {dim_}, weight_, bias_, 1e-5); }

private:
    int64_t dim_;
    at::Tensor weight_, bias_;
};

class Block;

// The sinusoidal features of diffusion times t (float [B] in [0, 1]) that time embeddings start from: [B, dim]
// (dim even), half cosines and half sines of t * 1000 (improved-diffusion's rescaled timesteps).
at::Tensor time_sinusoid(const at::Tensor& t, int64_t dim);

// The shared encoder. Parameters: position [max_length, dim]; condition_token [V, dim] and condition_position
// [max_condition_length, dim] when max_condition_length > 0; blocks.<i>.{norm1,qkv,proj,norm2,ff1,ff2}.*;
// final_norm.*.
class TransformerTrunk : public torch::nn::Module {
public:
    explicit TransformerTrunk(const DenoiserConfig& config);
    // h: [B, L, dim] text inputs without positions; condition: int64 [B, C] (C <= max_condition_length) or
    // undefined for none; gen: dropout masks (nullptr: no dropout). Returns the text positions' final
    // (normalised) states [B, L, dim].
    at::Tensor forward(const at::Tensor& h, const at::Tensor& condition, at::Generator* gen);
    // Zeroes the residual outputs (attention and MLP output projections) of blocks `first` and later: a
    // pre-LayerNorm block whose residual branches add nothing is the identity, so a trunk grown deeper than a
    // trained one computes what the trained one did.
    void start_blocks_as_identity(int64_t first);

private:
    DenoiserConfig config_;
    at::Tensor position_;
    at::Tensor condition_token_;
    at::Tensor condition_position_;
    std::vector<std::shared_ptr<Block>> blocks_;
    std::shared_ptr<LayerNorm> final_norm_;
};

}  // namespace rudder::nn
