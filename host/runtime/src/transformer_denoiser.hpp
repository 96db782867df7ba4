// A trained transformer network (nn/denoiser_net.hpp) as the Denoiser the reverse loop calls, and the loader of
// model directories of type "transformer". Light on purpose: it does not include LibTorch's nn headers, so the
// sampling side (model.cpp) can include it.
//
// A model directory's config.json for a trained network:
//   { "format_version": 1, "type": "transformer", "families": ["continuous"],
//     "tokenizer": {"type": "word", "vocab": "vocab.txt"},
//     "network": { ...the network's config() ... }, "weights": "weights.safetensors",
//     "schedule": {"name": "sqrt", "T": 2000} }          (continuous; discrete: "mask_schedule": {"eps": 0.001})
// The weights file holds exactly the network's parameters under their names (embedding, trunk.blocks.0.qkv.weight,
// ...; see nn/denoiser_net.hpp), float32.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <rudder/runtime/denoiser.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder {

namespace nn {
class DenoiserNet;
class ContinuousDenoiserNet;
class DiscreteDenoiserNet;
}  // namespace nn

class TransformerDenoiser final : public Denoiser {
public:
    // Takes the network for sampling, its weights loaded: switches it to eval mode (no dropout) and freezes its
    // parameters (requires_grad = false), so gradient guidance differentiates only with respect to the input.
    TransformerDenoiser(std::shared_ptr<nn::DenoiserNet> network, std::shared_ptr<const Tokenizer> tokenizer);
    ~TransformerDenoiser() override;

    // Traits: the network's family, vocabulary, embedding width (continuous), learned positions and condition, and
    // the uniform graph's schedule for a score-entropy network on it.
    //
    // Continuous: the embedding table the diffusion runs on [V, D] (detached; a CDCD network's normalised rows).
    // Discrete: undefined.
    at::Tensor embedding() const override;
    void to(const at::Device& device) override;
    // One trunk layer's live activations (the condition tokens attend with the text's) and the output logits.
    uint64_t working_bytes(int64_t batch, int64_t length) const override;

    // logits: float32 log-probabilities [B, L, V] (discrete: SUBS, so the mask token and, at unmasked positions,
    // every other token have kImpossibleLogProb = -1e4; uniform noise: the clean-token estimate at every position,
    // the mask token impossible); continuous: x0 [B, L, D] too. `conditions`: empty (no
    // condition), or one meaning representation per row, "" for none. Of `evidence` only self_condition is read
    // (by a self-conditioned CDCD network): the network cannot condition on hard constraints (the composer applies
    // them to its output). Runs without autograd.
    DenoiserOutput denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                           const Evidence& evidence = {}) override;

    // Continuous family: the same as denoise() but with autograd on, so a guidance term built from the output can
    // be differentiated with respect to x (give x requires_grad). Only x gets gradients: the parameters are frozen.
    // Throws std::logic_error for the discrete family.
    DenoiserOutput denoise_with_grad(const at::Tensor& x, double t, const std::vector<std::string>& conditions);
    at::Tensor logits_with_grad(const at::Tensor& x, double t, const std::vector<std::string>& conditions) {
        return denoise_with_grad(x, t, conditions).logits;
    }

    const nn::DenoiserNet& network() const { return *network_; }

private:
    DenoiserOutput run(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                       const Evidence& evidence);
    at::Tensor condition_tensor(const std::vector<std::string>& conditions, int64_t batch) const;

    std::shared_ptr<nn::DenoiserNet> network_;
    std::shared_ptr<const Tokenizer> tokenizer_;
    nn::ContinuousDenoiserNet* continuous_ = nullptr;  // the family's view of network_
    nn::DiscreteDenoiserNet* discrete_ = nullptr;
    at::Device device_;
    at::Tensor diffused_embedding_;  // continuous: the table embedding() returns, taken from the frozen weights
};

// Builds the network `config["network"]` describes for `family` (its "family", if present, must agree), loads
// its parameters from the safetensors file `config["weights"]` names (relative to `dir`) and wraps it. The file
// must hold exactly the network's parameters: a missing, extra, mis-shaped or other-dtype tensor is an error
// naming it. Checks that config.json's "schedule" (continuous) or "mask_schedule" (discrete), when present, is
// the one the network was trained with. Throws ModelError (SafeTensorsError for the weights file) naming
// dir/config.json or the weights file and the problem.
std::shared_ptr<Denoiser> load_transformer_denoiser(const nlohmann::json& config, const std::filesystem::path& dir,
                                                    std::shared_ptr<const Tokenizer> tokenizer, Family family);

}  // namespace rudder
