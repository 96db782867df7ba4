#include "bidirectional_llm_denoiser.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <stdexcept>

#include <rudder/nn/model_files.hpp>
#include <rudder/nn/bidirectional_llm.hpp>
#include <rudder/text/bpe_tokenizer.hpp>

namespace rudder {
namespace fs = std::filesystem;

namespace {

DenoiserTraits llm_traits(const nn::BidirectionalLlm* network, int64_t vocab) {
    if (!network) throw std::invalid_argument("BidirectionalLlmDenoiser: a network is required");
    DenoiserTraits traits;
    traits.family = Family::discrete;
    traits.vocab_size = vocab;
    traits.max_length = network->config().max_length;
    traits.windows = true;
    return traits;
}

}  // namespace

BidirectionalLlmDenoiser::BidirectionalLlmDenoiser(std::shared_ptr<nn::BidirectionalLlm> network, int64_t vocab)
    : Denoiser(llm_traits(network.get(), vocab)), network_(std::move(network)), vocab_(vocab) {}

BidirectionalLlmDenoiser::~BidirectionalLlmDenoiser() = default;

void BidirectionalLlmDenoiser::to(const at::Device& device) { network_->to(device); }

bool BidirectionalLlmDenoiser::quantize_int8() {
    c10::InferenceMode inference;
    network_->quantize_int8();
    return true;
}

uint64_t BidirectionalLlmDenoiser::working_bytes(int64_t batch, int64_t length) const {
    const auto& c = network_->config();
    const double L = static_cast<double>(length), H = static_cast<double>(c.hidden_size);
    const double floats = L * (6 * H + 3 * static_cast<double>(c.intermediate_size)) +
                          2.0 * static_cast<double>(c.n_heads) * L * L + 2.0 * L * static_cast<double>(c.vocab_size);
    return static_cast<uint64_t>(static_cast<double>(batch) * floats * 4);
}

DenoiserOutput BidirectionalLlmDenoiser::denoise(const at::Tensor& x, double t,
                                                 const std::vector<std::string>& conditions, const Evidence&) {
    if (!(t >= 0.0 && t <= 1.0)) throw std::invalid_argument("denoise: t must be in [0, 1], got " + std::to_string(t));
    for (const auto& condition : conditions)
        if (!condition.empty())
            throw std::invalid_argument("denoise: a condition was given, but " + network_->config().name() +
                                        " checkpoints are unconditional here (a prompt is a prefix: the span control)");
    c10::InferenceMode inference;
    DenoiserOutput out;
    out.logits = network_->clean_log_probs(x, vocab_, &out.outside);
    return out;
}

namespace {

// One run's caches: every layer's keys and values at the last refresh.
class LlmWindowDecoder final : public WindowDecoder {
public:
    LlmWindowDecoder(std::shared_ptr<const nn::BidirectionalLlm> network, int64_t vocab)
        : network_(std::move(network)), vocab_(vocab) {}

    DenoiserOutput refresh(const at::Tensor& x) override {
        c10::InferenceMode inference;
        DenoiserOutput out;
        out.logits = network_->clean_log_probs(x, vocab_, &out.outside, &kv_);
        return out;
    }

    DenoiserOutput window(const at::Tensor& x, int64_t begin, int64_t end) override {
        c10::InferenceMode inference;
        DenoiserOutput out;
        out.logits =
            network_->clean_log_probs_window(x.narrow(1, begin, end - begin), begin, kv_, vocab_, &out.outside);
        return out;
    }

private:
    std::shared_ptr<const nn::BidirectionalLlm> network_;
    int64_t vocab_;
    nn::KeyValueCache kv_;
};

}  // namespace

std::unique_ptr<WindowDecoder> BidirectionalLlmDenoiser::window_decoder() {
    return std::make_unique<LlmWindowDecoder>(network_, vocab_);
}

namespace {

std::shared_ptr<const Tokenizer> llm_tokenizer_of(const fs::path& dir, const nn::BidirectionalLlmConfig& parsed) {
    const fs::path file = dir / "config.json";
    const std::string what = parsed.name();
    const fs::path tokenizer_file = dir / "tokenizer.json";
    if (!fs::exists(tokenizer_file))
        throw ModelError("'" + dir.string() + "' is a " + what +
                         " checkpoint without its tokenizer.json (the file from the "
                         "model's Hugging Face repository; docs/checkpoints.md)");
    std::shared_ptr<BpeTokenizer> tokenizer;
    try {
        // The config gives the special tokens by id, the tokenizer takes them by name: read once to name them.
        const BpeTokenizer plain = BpeTokenizer::load_json(tokenizer_file.string());
        auto name_of = [&](int64_t id, const char* field) {
            if (id < 0) return std::string();
            if (id >= plain.vocab_size())
                throw ModelError("'" + file.string() + "': field '" + field + "': " + std::to_string(id) +
                                 " is not a token of " + tokenizer_file.string() + " (" +
                                 std::to_string(plain.vocab_size()) + " tokens): another tokenizer than the model's");
            return plain.token(id);
        };
        BpeSpecialNames names;
        names.mask = name_of(parsed.mask_id, "mask_token_id");
        names.pad = name_of(parsed.pad_id >= 0 ? parsed.pad_id : parsed.eos_id,
                            parsed.pad_id >= 0 ? "pad_token_id" : "eos_token_id");
        tokenizer = std::make_shared<BpeTokenizer>(BpeTokenizer::load_json(tokenizer_file.string(), names));
    } catch (const ModelError&) {
        throw;
    } catch (const std::exception& e) {
        throw ModelError("the tokenizer of a " + what + " checkpoint: " + e.what());
    }
    if (tokenizer->vocab_size() > parsed.vocab_size)
        throw ModelError("'" + dir.string() + "': the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                         " tokens, more than the network's " + std::to_string(parsed.vocab_size) +
                         ": another tokenizer than the one it was trained with");
    return tokenizer;
}

}  // namespace

std::shared_ptr<const Tokenizer> load_bidirectional_llm_tokenizer(const fs::path& dir, const nlohmann::json& config) {
    return llm_tokenizer_of(dir, nn::parse_bidirectional_llm_config(config, dir / "config.json"));
}

Model load_bidirectional_llm_model(const fs::path& dir, const nlohmann::json& config, std::optional<Family> family) {
    const nn::BidirectionalLlmConfig parsed = nn::parse_bidirectional_llm_config(config, dir / "config.json");
    if (family && *family != Family::discrete)
        throw ModelError("'" + dir.string() + "' is a " + parsed.name() +
                         " checkpoint: a discrete (masked) diffusion model, not a " + family_name(*family) + " one");
    // The tokenizer first: it is small, and a folder without one is refused before gigabytes of weights are read.
    const std::shared_ptr<const Tokenizer> tokenizer = llm_tokenizer_of(dir, parsed);
    Model model;
    model.name = dir.filename().string();
    model.dir = dir;
    model.family = Family::discrete;
    model.tokenizer = tokenizer;
    model.denoiser = std::make_shared<BidirectionalLlmDenoiser>(
        std::make_shared<nn::BidirectionalLlm>(nn::BidirectionalLlm::load(dir)), tokenizer->vocab_size());
    model.mask_schedule = MaskSchedule(1e-3);
    model.recommended_sampler = bidirectional_llm_sampler(parsed.flavor);
    return model;
}

nlohmann::json bidirectional_llm_sampler(nn::BidirectionalLlmFlavor flavor) {
    if (flavor == nn::BidirectionalLlmFlavor::llada) return {{"name", "llada"}};
    return {{"name", "dream"}, {"alg", "entropy"}};
}

}  // namespace rudder
