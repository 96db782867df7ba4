#include <rudder/nn/dit_trainable.hpp>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

#include <rudder/nn/config_error.hpp>
#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/schedule.hpp>

#include "dit_forward.hpp"

namespace rudder::nn {
using json = nlohmann::json;

namespace {

// torch.nn.Linear's default initialisation (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// for the weight and the bias, as MDLM's DiT leaves its linear layers.
at::Tensor linear_init(int64_t out, int64_t in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    return at::empty({out, in}, at::kFloat).uniform_(-bound, bound);
}
at::Tensor bias_init(int64_t out, int64_t in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    return at::empty({out}, at::kFloat).uniform_(-bound, bound);
}

// A module with no parameters of its own: a step of a parameter's dotted path.
struct PathModule : torch::nn::Module {};

}  // namespace

at::Tensor DitTrainableNet::add(const std::string& path, const at::Tensor& value) {
    torch::nn::Module* node = this;
    size_t from = 0;
    for (size_t dot = path.find('.'); dot != std::string::npos; from = dot + 1, dot = path.find('.', from)) {
        const std::string name = path.substr(from, dot - from);
        std::shared_ptr<torch::nn::Module> child;
        for (const auto& item : node->named_children())
            if (item.key() == name) child = item.value();
        if (!child) child = node->register_module(name, std::make_shared<PathModule>());
        node = child.get();
    }
    return node->register_parameter(path.substr(from), value);
}

DitTrainableNet::DitTrainableNet(const json& network_config, const Tokenizer& tokenizer) {
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader r(network_config, "", issues);
    DitConfig& c = config_;
    c.flavor = DitFlavor::mdlm;
    c.vocab_size = tokenizer.vocab_size();
    c.hidden_size = r.integer("hidden_dim", 8, 8192).value_or(256);
    c.cond_dim = r.integer("cond_dim", 1, 8192).value_or(128);
    c.n_blocks = r.integer("n_blocks", 1, 128).value_or(4);
    c.n_heads = r.integer("n_heads", 1, 128).value_or(4);
    c.max_length = r.integer("max_length", 1, 65536, json_input::kRequired).value_or(1);
    c.time_conditioning = r.boolean("time_conditioning").value_or(false);
    dropout_ = r.number("dropout", 0.0, 0.9).value_or(0.1);
    if (r.has("vocab_size")) {
        const int64_t v = r.integer("vocab_size", 2, int64_t{1} << 31).value_or(c.vocab_size);
        if (v != c.vocab_size)
            r.issue("vocab_size", "the network was built for " + std::to_string(v) +
                                      " tokens (the mask included) but the tokenizer has " +
                                      std::to_string(c.vocab_size));
    }
    if (c.hidden_size % c.n_heads != 0 || (c.hidden_size / c.n_heads) % 2 != 0)
        r.issue("n_heads", "hidden_dim (" + std::to_string(c.hidden_size) + ") must split into " +
                               std::to_string(c.n_heads) + " heads of an even width (rotary embedding)");
    if (tokenizer.mask_id() != c.vocab_size - 1)
        r.issue("", "the tokenizer's mask must be its last id, as the DiT's is (got " +
                        std::to_string(tokenizer.mask_id()) + " of " + std::to_string(c.vocab_size) + ")");
    r.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError("MDLM DiT network config", std::move(issues));

    // MDLM's DiT initialisation: the embedding kaiming-uniform (a = sqrt(5), fan-in the hidden size), linear
    // layers as torch.nn.Linear leaves them, LayerNorm weights 1, and every adaLN modulation and the output layer
    // zero (adaLN-Zero: each block starts as the identity, the output at 0).
    at::NoGradGuard no_grad;
    const int64_t H = c.hidden_size, C = c.cond_dim, V = c.vocab_size;
    w_.embedding = add("backbone.vocab_embed.embedding", linear_init(V, H));
    w_.sigma_in_w = add("backbone.sigma_map.mlp.0.weight", linear_init(C, 256));
    w_.sigma_in_b = add("backbone.sigma_map.mlp.0.bias", bias_init(C, 256));
    w_.sigma_out_w = add("backbone.sigma_map.mlp.2.weight", linear_init(C, C));
    w_.sigma_out_b = add("backbone.sigma_map.mlp.2.bias", bias_init(C, C));
    for (int64_t i = 0; i < c.n_blocks; ++i) {
        const std::string b = "backbone.blocks." + std::to_string(i) + ".";
        DitWeights::Block block;
        block.norm1 = add(b + "norm1.weight", at::ones({H}));
        block.qkv = add(b + "attn_qkv.weight", linear_init(3 * H, H));
        block.attn_out = add(b + "attn_out.weight", linear_init(H, H));
        block.norm2 = add(b + "norm2.weight", at::ones({H}));
        block.mlp_in_w = add(b + "mlp.0.weight", linear_init(4 * H, H));
        block.mlp_in_b = add(b + "mlp.0.bias", bias_init(4 * H, H));
        block.mlp_out_w = add(b + "mlp.2.weight", linear_init(H, 4 * H));
        block.mlp_out_b = add(b + "mlp.2.bias", bias_init(H, 4 * H));
        block.ada_w = add(b + "adaLN_modulation.weight", at::zeros({6 * H, C}));
        block.ada_b = add(b + "adaLN_modulation.bias", at::zeros({6 * H}));
        w_.blocks.push_back(block);
    }
    w_.final_norm = add("backbone.output_layer.norm_final.weight", at::ones({H}));
    w_.head_w = add("backbone.output_layer.linear.weight", at::zeros({V, H}));
    w_.head_b = add("backbone.output_layer.linear.bias", at::zeros({V}));
    w_.final_ada_w = add("backbone.output_layer.adaLN_modulation.weight", at::zeros({2 * H, C}));
    w_.final_ada_b = add("backbone.output_layer.adaLN_modulation.bias", at::zeros({2 * H}));
}

at::Tensor DitTrainableNet::loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor& tokens = batch.tokens;
    if (!tokens.defined() || tokens.dim() != 2 || tokens.scalar_type() != at::kLong)
        throw std::invalid_argument("DitTrainableNet::loss: tokens must be int64 [B, L]");
    const int64_t mask = config_.mask_id();
    const SubsNoise noise = draw_subs_noise(tokens, mask, config_.schedule_eps, gen, batch.clean);
    // The total noise of the log-linear schedule at each row's time, as MDLM gives its backbone (which ignores it
    // without time conditioning).
    const MaskSchedule schedule(config_.schedule_eps);
    const auto times = noise.t.accessor<double, 1>();
    std::vector<float> sigmas;
    for (int64_t b = 0; b < noise.t.size(0); ++b) sigmas.push_back(static_cast<float>(schedule.sigma_bar(times[b])));
    const at::Tensor sigma = at::tensor(sigmas);
    const bool drop = is_training() && dropout_ > 0.0;
    const at::Tensor states =
        dit_states(config_, w_, noise.x_t, 0, sigma, nullptr, nullptr, drop ? dropout_ : 0.0, drop ? &gen : nullptr);
    // SUBS never predicts the mask: its logit is -inf (index_fill keeps the bias's gradient elsewhere).
    const at::Tensor bias = w_.head_b.index_fill(0, at::tensor({mask}, at::kLong).to(w_.head_b.device()),
                                                 -std::numeric_limits<float>::infinity());
    return subs_nelbo(states, noise, tokens, w_.head_w, bias);
}

json DitTrainableNet::config() const {
    return {{"hidden_dim", config_.hidden_size},
            {"cond_dim", config_.cond_dim},
            {"n_blocks", config_.n_blocks},
            {"n_heads", config_.n_heads},
            {"dropout", dropout_},
            {"time_conditioning", config_.time_conditioning},
            {"max_length", config_.max_length},
            {"vocab_size", config_.vocab_size}};
}

json DitTrainableNet::hub_config() const {
    return {{"architectures", {"MDLM"}},
            {"model_type", "mdlm"},
            {"vocab_size", config_.vocab_size},
            {"model_length", config_.max_length},
            {"hidden_dim", config_.hidden_size},
            {"cond_dim", config_.cond_dim},
            {"n_blocks", config_.n_blocks},
            {"n_heads", config_.n_heads},
            {"dropout", dropout_},
            {"time_conditioning", config_.time_conditioning},
            {"torch_dtype", "float32"}};
}

}  // namespace rudder::nn
