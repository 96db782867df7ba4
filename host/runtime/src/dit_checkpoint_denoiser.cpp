#include "dit_checkpoint_denoiser.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/score_entropy.hpp>
#include <rudder/text/bpe_tokenizer.hpp>

namespace rudder {
namespace fs = std::filesystem;

DitCheckpointDenoiser::DitCheckpointDenoiser(std::shared_ptr<nn::DitNetwork> network) : network_(std::move(network)) {
    if (!network_) throw std::invalid_argument("DitCheckpointDenoiser: a network is required");
    if (network_->config().uniform()) uniform_ = UniformNoiseSchedule::log_linear(network_->config().schedule_eps);
}

DitCheckpointDenoiser::~DitCheckpointDenoiser() = default;

int64_t DitCheckpointDenoiser::vocab_size() const { return network_->config().vocab_size; }

int64_t DitCheckpointDenoiser::max_length() const { return network_->config().max_length; }

int64_t DitCheckpointDenoiser::decoding_block() const { return network_->config().block_size; }

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
            throw std::invalid_argument("denoise: a condition was given, but these checkpoints are unconditional");
    c10::InferenceMode inference;
    const at::Tensor sigma = at::full({x.size(0)}, network_->sigma_at(t), at::TensorOptions().dtype(at::kFloat));
    at::Tensor log_probs = network_->clean_log_probs(x, sigma);
    if (!uniform_) return DenoiserOutput{log_probs, {}};
    // UDLM and DUO: x_theta is the clean token given the other positions (it enters their posterior as that); the
    // loop's clean estimate is the posterior given all of x_t, the position's own noisy token included.
    const int64_t N = x.numel(), V = log_probs.size(-1);
    const at::Tensor sigma_bar = at::full({N}, uniform_->sigma_bar(std::max(t, 1e-6)), at::TensorOptions().dtype(at::kDouble));
    log_probs = nn::uniform_posterior_from_rest(log_probs.reshape({N, V}), x.reshape({N}).to(log_probs.device()),
                                                sigma_bar.to(log_probs.device()))
                    .clamp_min(nn::kImpossibleLogProb)
                    .view({x.size(0), x.size(1), V});
    return DenoiserOutput{log_probs, {}};
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
    const std::string name = nn::dit_flavor_name(parsed.flavor);
    const std::string what = (parsed.flavor == nn::DitFlavor::mdlm ? "an " : "a ") + name;
    if (family && *family != Family::discrete)
        throw ModelError("'" + dir.string() + "' is " + what + " checkpoint: a discrete diffusion model, not a " +
                         family_name(*family) + " one");
    if (parsed.flavor == nn::DitFlavor::udlm)
        throw ModelError("'" + dir.string() + "' is a UDLM checkpoint: its network loads (nn::DitNetwork), but its "
                         "tokenizers (bert-base-uncased's WordPiece for udlm-lm1b, a character one for udlm-qm9) are not "
                         "among Rudder's (byte-level BPE and words), so it cannot be sampled as a model yet");
    // The tokenizer first: it is small, and a folder without one is refused before gigabytes of weights are read.
    // The network's last id is one token more than GPT-2's: the mask (MDLM, SEDD), or DUO's "[PAD]", which its
    // data never holds; the loop treats it as the mask, a token never drawn.
    auto tokenizer = std::make_shared<WithMaskToken>(checkpoint_tokenizer(dir, what), parsed.uniform() ? "[PAD]" : "<mask>");
    if (tokenizer->vocab_size() != parsed.vocab_size)
        throw ModelError("'" + dir.string() + "': the tokenizer has " + std::to_string(tokenizer->vocab_size() - 1) +
                         " tokens, and with " + (parsed.uniform() ? "\"[PAD]\" " : "the mask ") +
                         std::to_string(tokenizer->vocab_size()) + "; the network has " + std::to_string(parsed.vocab_size) +
                         " (that token is its last id): another tokenizer than the one it was trained with");
    Model model;
    model.name = dir.filename().string();
    model.dir = dir;
    model.family = Family::discrete;
    model.tokenizer = tokenizer;
    model.denoiser = std::make_shared<DitCheckpointDenoiser>(std::make_shared<nn::DitNetwork>(nn::DitNetwork::load(dir)));
    model.mask_schedule = MaskSchedule(parsed.schedule_eps);
    if (const nlohmann::json sampler = dit_checkpoint_sampler(parsed); !sampler.is_null()) model.recommended_sampler = sampler;
    return model;
}

nlohmann::json dit_checkpoint_sampler(const nn::DitConfig& config) {
    // BD3-LM's sampler (bd3lms diffusion.py: _semi_ar_sampler with first_hitting, nucleus p 0.9 in its scripts).
    if (config.block_size > 0) return {{"name", "first_hitting"}, {"block_length", config.block_size}, {"top_p", 0.9}};
    return nullptr;
}

}  // namespace rudder
