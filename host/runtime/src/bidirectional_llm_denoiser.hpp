// LLaDA's and Dream's public checkpoints (nn/bidirectional_llm.hpp) as the Denoiser the reverse loop calls, and the
// model loader's seam for them. docs/checkpoints.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rudder/runtime/denoiser.hpp>
#include <rudder/runtime/loaded_model.hpp>

namespace rudder {

namespace nn {
class BidirectionalLlm;
enum class BidirectionalLlmFlavor;
}  // namespace nn

// Discrete family. denoise() gives the clean-token log-probabilities over the tokenizer's `vocab` ids
// (nn::BidirectionalLlm::clean_log_probs); neither network reads the time. Unconditional: a condition is an error.
// Traits: discrete, `vocab` tokens, the network's positions, and windows (Fast-dLLM's caches).
class BidirectionalLlmDenoiser final : public Denoiser {
public:
    BidirectionalLlmDenoiser(std::shared_ptr<nn::BidirectionalLlm> network, int64_t vocab);
    ~BidirectionalLlmDenoiser() override;

    void to(const at::Device& device) override;
    bool quantize_int8() override;
    // Per sample: a layer's activations (residual, q/k/v, attention output, the two MLP projections and their
    // product), the attention scores and their softmax, and the logits with their log-softmax.
    uint64_t working_bytes(int64_t batch, int64_t length) const override;
    DenoiserOutput denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                           const Evidence& evidence = {}) override;
    // Fast-dLLM's key/value caches (nn::BidirectionalLlm::forward_window), over this network.
    std::unique_ptr<WindowDecoder> window_decoder() override;

    const nn::BidirectionalLlm& network() const { return *network_; }

private:
    std::shared_ptr<nn::BidirectionalLlm> network_;
    int64_t vocab_;
};

// A model directory whose config.json is LLaDA's or Dream's (nn::is_bidirectional_llm_config), with the model's
// tokenizer.json beside it: the discrete model of the network, its byte-level BPE with the config's mask and pad
// (the end-of-text token both pad with, so a text ends where the model places it). The config is checked first,
// then the tokenizer, then the weights.
Model load_bidirectional_llm_model(const std::filesystem::path& dir, const nlohmann::json& config,
                                   std::optional<Family> family);
// Its tokenizer alone, checked as the loader checks it (no weights are read).
std::shared_ptr<const Tokenizer> load_bidirectional_llm_tokenizer(const std::filesystem::path& dir,
                                                                  const nlohmann::json& config);

// The authors' samplers, which such a model recommends: LLaDA's generate() (llada), Dream's diffusion_generate()
// with its entropy alg (dream).
nlohmann::json bidirectional_llm_sampler(nn::BidirectionalLlmFlavor flavor);

}  // namespace rudder
