#include "dit_checkpoint_denoiser.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <stdexcept>

#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/text/bpe_tokenizer.hpp>

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

namespace {

// GPT-2's byte-level BPE from the checkpoint's folder: tokenizer.json (Hugging Face's), else vocab.json and
// merges.txt (GPT-2's own pair). Neither checkpoint ships one (both use Hugging Face's "gpt2" tokenizer).
std::shared_ptr<const Tokenizer> checkpoint_tokenizer(const fs::path& dir, const std::string& what) {
    try {
        if (fs::exists(dir / "tokenizer.json"))
            return std::make_shared<BpeTokenizer>(BpeTokenizer::load_json((dir / "tokenizer.json").string()));
        if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"))
            return std::make_shared<BpeTokenizer>(
                BpeTokenizer::load_vocab_merges((dir / "vocab.json").string(), (dir / "merges.txt").string()));
    } catch (const std::runtime_error& e) {
        throw ModelError(std::string("the tokenizer of ") + what + " checkpoint: " + e.what());
    }
    throw ModelError("'" + dir.string() + "' is " + what + " checkpoint without its tokenizer: put GPT-2's " +
                     "tokenizer.json (or vocab.json and merges.txt) from Hugging Face's gpt2 repository beside " +
                     "config.json (docs/checkpoints.md)");
}

}  // namespace

Model load_dit_checkpoint_model(const fs::path& dir, const nlohmann::json& config, std::optional<Family> family) {
    const fs::path file = dir / "config.json";
    const nn::DitConfig parsed = nn::parse_dit_config(config, file);
    const std::string what = parsed.flavor == nn::DitFlavor::mdlm ? "an MDLM" : "a SEDD";
    if (family && *family != Family::discrete)
        throw ModelError("'" + dir.string() + "' is " + what + " checkpoint: a discrete (masked) diffusion model, not a " +
                         family_name(*family) + " one");
    // The tokenizer first: it is small, and a folder without one is refused before gigabytes of weights are read.
    auto tokenizer = std::make_shared<WithMaskToken>(checkpoint_tokenizer(dir, what));
    if (tokenizer->vocab_size() != parsed.vocab_size)
        throw ModelError("'" + dir.string() + "': the tokenizer has " + std::to_string(tokenizer->vocab_size() - 1) +
                         " tokens, and with the mask " + std::to_string(tokenizer->vocab_size()) + "; the network has " +
                         std::to_string(parsed.vocab_size) + " (the mask is its last id): another tokenizer than the one "
                         "it was trained with");
    Model model;
    model.name = dir.filename().string();
    model.dir = dir;
    model.family = Family::discrete;
    model.tokenizer = tokenizer;
    model.denoiser = std::make_shared<DitCheckpointDenoiser>(std::make_shared<nn::DitNetwork>(nn::DitNetwork::load(dir)));
    model.mask_schedule = MaskSchedule(parsed.schedule_eps);
    return model;
}

}  // namespace rudder
