// The DiT of MDLM's public checkpoints (nn/dit_checkpoint.hpp), trainable: its parameters carry the hub
// checkpoint's tensor names (backbone.vocab_embed.embedding, backbone.blocks.0.attn_qkv.weight, ...), it learns
// with MDLM's objective (SUBS, log-linear schedule), and hub_config() is MDLM's config.json, so the folder
// `rudder train` writes loads through exactly the code a downloaded MDLM takes. The forward pass is the loader's
// own (dit_forward.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/trainable.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {

class DitTrainableNet final : public TrainableNetwork {
public:
    // `network_config`: hidden_dim (256), cond_dim (128), n_blocks (4), n_heads (4; hidden_dim / n_heads even),
    // dropout (0.1, MDLM's), time_conditioning (false, as MDLM-OWT), max_length (required: the model_length);
    // vocab_size, when given, must be the tokenizer's. The tokenizer's last id must be its mask (the DiT's mask is
    // its last id). Initial weights as MDLM's DiT initialises them, from the default CPU generator. Throws
    // ConfigError.
    DitTrainableNet(const nlohmann::json& network_config, const Tokenizer& tokenizer);

    // MDLM's continuous-time negative ELBO under SUBS (nn::subs_nelbo), with MDLM's dropout while training.
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;
    // The training config's network object, completed: what rebuilds this network.
    nlohmann::json config() const override;
    // config.json as kuleshov-group's MDLM checkpoints have it ("model_type": "mdlm", MDLMConfig's fields).
    nlohmann::json hub_config() const;

private:
    // Registers `value` as the parameter `path` ("backbone.blocks.0.norm1.weight"), creating the modules on the way.
    at::Tensor add(const std::string& path, const at::Tensor& value);

    DitConfig config_;
    double dropout_ = 0.1;
    DitWeights w_;  // the registered parameters themselves, as the forward pass takes them
};

}  // namespace rudder::nn
