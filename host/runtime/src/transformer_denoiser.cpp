#include "transformer_denoiser.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <rudder/nn/config_error.hpp>
#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/weights.hpp>
#include <rudder/text/text_files.hpp>

namespace rudder {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string shape_string(at::IntArrayRef sizes) {
    std::ostringstream out;
    out << sizes;
    return out.str();
}

DenoiserTraits transformer_traits(const nn::DenoiserNet* network, const Tokenizer* tokenizer) {
    if (!network || !tokenizer) throw std::invalid_argument("TransformerDenoiser: network and tokenizer are required");
    const auto* continuous = dynamic_cast<const nn::ContinuousDenoiserNet*>(network);
    const auto* discrete = dynamic_cast<const nn::DiscreteDenoiserNet*>(network);
    DenoiserTraits traits;
    traits.family = network->family();
    traits.vocab_size = network->denoiser_config().vocab_size;
    traits.embed_dim = continuous ? continuous->embed_dim() : 0;
    traits.max_length = network->denoiser_config().max_length;
    traits.conditional = network->conditional();
    if (discrete && discrete->uniform()) traits.uniform_noise = discrete->uniform_schedule();
    return traits;
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------

TransformerDenoiser::TransformerDenoiser(std::shared_ptr<nn::DenoiserNet> network,
                                         std::shared_ptr<const Tokenizer> tokenizer)
    : Denoiser(transformer_traits(network.get(), tokenizer.get())), network_(std::move(network)),
      tokenizer_(std::move(tokenizer)), device_(at::kCPU) {
    if (tokenizer_->vocab_size() != network_->denoiser_config().vocab_size) {
        throw std::invalid_argument("TransformerDenoiser: the tokenizer has " +
                                    std::to_string(tokenizer_->vocab_size()) + " tokens, the network " +
                                    std::to_string(network_->denoiser_config().vocab_size));
    }
    continuous_ = dynamic_cast<nn::ContinuousDenoiserNet*>(network_.get());
    discrete_ = dynamic_cast<nn::DiscreteDenoiserNet*>(network_.get());
    network_->eval();
    for (auto& p : network_->parameters()) p.requires_grad_(false);
    const auto params = network_->parameters();
    if (!params.empty()) device_ = params.front().device();
    // CDCD's normalised rows are a function of the frozen weights: computed once, not at every step.
    if (continuous_) diffused_embedding_ = continuous_->diffused_embedding().detach();
}

TransformerDenoiser::~TransformerDenoiser() = default;

at::Tensor TransformerDenoiser::embedding() const { return diffused_embedding_; }

void TransformerDenoiser::to(const at::Device& device) {
    network_->to(device);
    device_ = device;
    if (continuous_) diffused_embedding_ = continuous_->diffused_embedding().detach();
}

uint64_t TransformerDenoiser::working_bytes(int64_t batch, int64_t length) const {
    const nn::DenoiserConfig& c = network_->denoiser_config();
    const double T = static_cast<double>(length + (traits().conditional ? c.max_condition_length : 0));
    const auto dim = static_cast<double>(c.dim), ff = static_cast<double>(c.ff_dim),
               heads = static_cast<double>(c.heads);
    // Per sample, in floats: a layer's inputs, q/k/v, attention output and residuals (6 dim), the feed-forward's
    // hidden layer and its activation (2 ff), attention scores and their softmax (2 heads T^2); then the logits
    // and their log-softmax over the text's positions.
    const double floats = T * (6 * dim + 2 * ff) + 2 * heads * T * T +
                          2.0 * static_cast<double>(length) * static_cast<double>(vocab_size());
    return static_cast<uint64_t>(static_cast<double>(batch) * floats * 4);
}

at::Tensor TransformerDenoiser::condition_tensor(const std::vector<std::string>& conditions, int64_t batch) const {
    if (conditions.empty()) return {};
    if (static_cast<int64_t>(conditions.size()) != batch) {
        throw std::invalid_argument("denoise: " + std::to_string(conditions.size()) + " conditions for a batch of " +
                                    std::to_string(batch) + " (give one per row, or none)");
    }
    const bool any = std::any_of(conditions.begin(), conditions.end(), [](const std::string& c) { return !c.empty(); });
    if (!any) return {};  // all unconditional: the same as no condition
    if (!network_->conditional()) {
        throw std::invalid_argument("denoise: a condition was given, but this model was trained without one");
    }
    return nn::encode_conditions(*tokenizer_, conditions, network_->denoiser_config().max_condition_length).to(device_);
}

DenoiserOutput TransformerDenoiser::run(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                                        const Evidence& evidence) {
    if (!(t >= 0.0 && t <= 1.0)) throw std::invalid_argument("denoise: t must be in [0, 1], got " + std::to_string(t));
    if (!x.defined() || x.dim() < 2) throw std::invalid_argument("denoise: x must be [B, L] or [B, L, D]");
    const int64_t B = x.size(0);
    const at::Tensor condition = condition_tensor(conditions, B);
    DenoiserOutput out;
    if (continuous_) {
        if (x.dim() != 3 || !x.is_floating_point()) {
            throw std::invalid_argument("denoise: the continuous family takes x_t as floating-point [B, L, " +
                                        std::to_string(continuous_->embed_dim()) + "], got " + shape_string(x.sizes()));
        }
        const at::Tensor times = at::full({B}, t, x.options().dtype(at::kFloat));
        if (continuous_->cdcd()) {
            const at::Tensor self_condition = continuous_->self_conditioned() ? evidence.self_condition : at::Tensor();
            out.logits = at::log_softmax(continuous_->clean_logits(x, times, condition, self_condition), -1);
            out.x0 = at::matmul(out.logits.exp(), embedding());  // score interpolation
        } else {
            out.x0 = continuous_->predict_x0(x, times, condition);
            out.logits = at::log_softmax(continuous_->rounding_logits(out.x0), -1);
        }
    } else {
        if (x.dim() != 2 || x.scalar_type() != at::kLong) {
            throw std::invalid_argument("denoise: the discrete family takes tokens as int64 [B, L], got " +
                                        shape_string(x.sizes()));
        }
        out.logits = discrete_->log_probs(x, condition, t);
    }
    return out;
}

DenoiserOutput TransformerDenoiser::denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                                            const Evidence& evidence) {
    c10::InferenceMode inference;
    return run(x, t, conditions, evidence);
}

DenoiserOutput TransformerDenoiser::denoise_with_grad(const at::Tensor& x, double t,
                                                      const std::vector<std::string>& conditions) {
    if (!continuous_) {
        throw std::logic_error(
            "denoise_with_grad: only the continuous family is differentiable in its input; for the "
            "discrete family take gradients with respect to one-hot tokens in the controller");
    }
    at::AutoGradMode grad(true);
    return run(x, t, conditions, {});
}

// -------------------------------------------------------------------------------------------------------------

std::shared_ptr<Denoiser> load_transformer_denoiser(const json& config, const fs::path& dir,
                                                    std::shared_ptr<const Tokenizer> tokenizer, Family family) {
    const std::string where = "'" + (dir / "config.json").string() + "'";
    if (!tokenizer) throw ModelError(where + ": no tokenizer");
    if (!config.is_object() || !config.contains("network") || !config.at("network").is_object()) {
        throw ModelError(where +
                         ": key 'network' (an object: the network's configuration) is missing or not an object");
    }
    if (!config.contains("weights") || !config.at("weights").is_string()) {
        throw ModelError(where +
                         ": key 'weights' (the safetensors file of the network's parameters) is missing or "
                         "not a string");
    }
    json network_config = config.at("network");
    if (!network_config.contains("family")) network_config["family"] = family_name(family);
    if (network_config.at("family") != family_name(family)) {
        throw ModelError(where + ": the network is " + network_config.at("family").dump() + ", but the " +
                         family_name(family) + " family was asked for");
    }

    const fs::path weights = model_file(dir, config.at("weights").get<std::string>());
    std::shared_ptr<nn::DenoiserNet> network;
    try {
        // Building the network allocates every parameter: a config that needs more than the weights file holds (at
        // 2 bytes a parameter, the narrowest it stores) is refused first.
        const int64_t parameters = nn::DenoiserConfig::parse(network_config, *tokenizer, family).parameters_at_least();
        std::error_code ec;
        const uint64_t held = fs::file_size(weights, ec);
        if (ec)
            throw SafeTensorsError("'" + weights.string() + "': cannot read: " + ec.message());  // as the load would
        if (static_cast<uint64_t>(parameters) > held / 2)
            throw ModelError(where + ": 'network' makes at least " + std::to_string(parameters) + " parameters, " +
                             byte_size_text(2 * static_cast<uint64_t>(parameters)) +
                             " of weights at 2 bytes each, but '" + weights.filename().string() + "' holds " +
                             byte_size_text(held) + ": the config does not describe these weights");
        network = nn::make_denoiser_net(network_config, *tokenizer);
    } catch (const ConfigError& e) {
        throw ModelError(where + ": 'network': " + e.what());
    }

    // The sampler uses config.json's schedule; it must be the one the network learned.
    if (auto* c = dynamic_cast<nn::ContinuousDenoiserNet*>(network.get()); c && config.contains("schedule")) {
        const json& s = config.at("schedule");
        const json trained = c->config().at("schedule");
        // A CDCD network's schedule includes its learned time warp, which its weights carry too: the two must agree.
        const bool same_warp =
            !c->cdcd() || (s.is_object() && s.contains("warp") && s.at("warp") == trained.at("warp"));
        if (!s.is_object() || s.value("name", std::string("sqrt")) != c->schedule().name() ||
            s.value("T", int64_t{2000}) != c->schedule().T() || !same_warp) {
            throw ModelError(where + ": 'schedule' " + s.dump() +
                             " differs from the one the network was trained with " + trained.dump());
        }
    }
    if (auto* d = dynamic_cast<nn::DiscreteDenoiserNet*>(network.get()); d && config.contains("mask_schedule")) {
        const json& s = config.at("mask_schedule");
        const double eps = s.is_object() ? s.value("eps", 1e-3) : -1.0;
        if (std::abs(eps - d->mask_schedule().eps()) > 1e-12) {
            throw ModelError(where + ": 'mask_schedule' " + s.dump() +
                             " differs from the one the network was trained with {\"eps\":" +
                             std::to_string(d->mask_schedule().eps()) + "}");
        }
    }

    nn::load_module_file(*network, weights);
    return std::make_shared<TransformerDenoiser>(std::move(network), std::move(tokenizer));
}

}  // namespace rudder
