#include "dit_checkpoint_denoiser.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <stdexcept>

#include <rudder/nn/dit_checkpoint.hpp>

namespace rudder {
namespace fs = std::filesystem;

DitCheckpointDenoiser::DitCheckpointDenoiser(std::shared_ptr<nn::DitNetwork> network) : network_(std::move(network)) {
    if (!network_) throw std::invalid_argument("DitCheckpointDenoiser: a network is required");
}

DitCheckpointDenoiser::~DitCheckpointDenoiser() = default;

int64_t DitCheckpointDenoiser::vocab_size() const { return network_->config().vocab_size; }

int64_t DitCheckpointDenoiser::max_length() const { return network_->config().max_length; }

void DitCheckpointDenoiser::to(const at::Device& device) { network_->to(device); }

uint64_t DitCheckpointDenoiser::working_bytes(int64_t batch, int64_t length) const {
    const auto& c = network_->config();
    const double L = static_cast<double>(length), H = static_cast<double>(c.hidden_size);
    const double floats = L * (6 * H + 8 * H) + 2.0 * static_cast<double>(c.n_heads) * L * L +
                          2.0 * L * static_cast<double>(c.vocab_size);
    return static_cast<uint64_t>(static_cast<double>(batch) * floats * 4);
}

DenoiserOutput DitCheckpointDenoiser::denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                                              const Evidence&) {
    if (!(t >= 0.0 && t <= 1.0)) throw std::invalid_argument("denoise: t must be in [0, 1], got " + std::to_string(t));
    for (const auto& condition : conditions)
        if (!condition.empty())
            throw std::invalid_argument("denoise: a condition was given, but MDLM and SEDD checkpoints are unconditional");
    c10::InferenceMode inference;
    const at::Tensor sigma = at::full({x.size(0)}, network_->sigma_at(t), at::TensorOptions().dtype(at::kFloat));
    return DenoiserOutput{network_->clean_log_probs(x, sigma), {}};
}

Model load_dit_checkpoint_model(const fs::path& dir, const nlohmann::json& config, std::optional<Family> family) {
    const fs::path file = dir / "config.json";
    const nn::DitConfig parsed = nn::parse_dit_config(config, file);
    const std::string what = parsed.flavor == nn::DitFlavor::mdlm ? "an MDLM" : "a SEDD";
    if (family && *family != Family::discrete)
        throw ModelError("'" + dir.string() + "' is " + what + " checkpoint: a discrete (masked) diffusion model, not a " +
                         family_name(*family) + " one");
    throw ModelError("'" + dir.string() + "' is " + what + " checkpoint in Hugging Face layout; its network loads " +
                     "(rudder::nn::DitNetwork), but sampling it is not supported yet: GPT-2's byte-level BPE " +
                     "tokenizer (rudder::BpeTokenizer) and the checkpoint's mask token are not yet joined to the " +
                     "network as a model");
}

}  // namespace rudder
