#include <rudder/nn/dit_checkpoint.hpp>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/schedule.hpp>

#include "checkpoint_files.hpp"
#include "dit_forward.hpp"
#include "dropout.hpp"
#include "rotary.hpp"

namespace rudder::nn {
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace checkpoint;

namespace {

// The hub configs of the kuleshov-group DiT models: MDLM's MDLMConfig, and UDLM's and DUO's, which add their own
// fields to the same ones (read in discrete-diffusion-guidance models/hf/configuration_udlm.py; DUO's hub files were
// not found, so its fields are those of the copies of configuration_duo.py that other projects carry).
DitConfig parse_hub_dit(const json& config, const fs::path& file, DitFlavor flavor) {
    std::set<std::string> known = hub_metadata_keys();
    for (const char* k :
         {"vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads", "time_conditioning"})
        known.insert(k);
    if (flavor == DitFlavor::udlm) known.insert({"cfg", "cfg_num_classes"});
    if (flavor == DitFlavor::duo) known.insert({"causal", "var_min"});
    if (flavor == DitFlavor::bd3lm)
        known.insert({"block_size", "cross_attn", "adaln", "attn_backend", "causal", "var_min", "sampling_eps_min",
                      "sampling_eps_max"});
    check_known(config, known, "", file);
    if (config.contains("torch_dtype")) {
        const json& d = config.at("torch_dtype");
        if (d != "float32" && d != "float16" && d != "bfloat16")
            config_fail(file, "torch_dtype", "expected float32, float16 or bfloat16, got " + d.dump());
    }
    DitConfig c;
    c.flavor = flavor;
    c.vocab_size = positive_int(config, "vocab_size", "vocab_size", file);
    c.max_length = positive_int(config, "model_length", "model_length", file);
    c.hidden_size = positive_int(config, "hidden_dim", "hidden_dim", file);
    c.cond_dim = positive_int(config, "cond_dim", "cond_dim", file);
    c.n_blocks = positive_int(config, "n_blocks", "n_blocks", file);
    c.n_heads = positive_int(config, "n_heads", "n_heads", file);
    // DUO's training asserts time conditioning (UniformState), and its config may not say so; BD3LMConfig's default
    // is false.
    if (config.contains("time_conditioning"))
        c.time_conditioning = boolean(config, "time_conditioning", "time_conditioning", file);
    else if (flavor == DitFlavor::duo || flavor == DitFlavor::bd3lm)
        c.time_conditioning = flavor == DitFlavor::duo;
    else
        c.time_conditioning = boolean(config, "time_conditioning", "time_conditioning", file);  // required: says so
    if (flavor == DitFlavor::bd3lm) {
        c.block_size = positive_int(config, "block_size", "block_size", file);
        if (c.block_size > c.max_length) config_fail(file, "block_size", "larger than model_length");
        if (config.contains("adaln") && !boolean(config, "adaln", "adaln", file))
            config_fail(file, "adaln", "false (the network without adaLN modulation) is not supported");
        if (config.contains("causal") && boolean(config, "causal", "causal", file))
            config_fail(file, "causal", "true (the autoregressive variant) is not supported");
        // Training settings (the x0 half of the training input, the attention kernel, the clipped noise range).
        if (config.contains("cross_attn")) boolean(config, "cross_attn", "cross_attn", file);
        if (config.contains("var_min")) boolean(config, "var_min", "var_min", file);
        if (config.contains("attn_backend") && !config.at("attn_backend").is_string())
            config_fail(file, "attn_backend", "expected a string");
        for (const char* k : {"sampling_eps_min", "sampling_eps_max"})
            if (config.contains(k) && !config.at(k).is_number()) config_fail(file, k, "expected a number");
    }
    if (flavor == DitFlavor::udlm && config.contains("cfg") && boolean(config, "cfg", "cfg", file))
        config_fail(file, "cfg",
                    "true (a class-conditional UDLM, with a cond_map of class embeddings) is not supported");
    if (flavor == DitFlavor::duo && config.contains("causal") && boolean(config, "causal", "causal", file))
        config_fail(file, "causal", "true (DUO's causal variant, without adaLN) is not supported");
    if (flavor == DitFlavor::duo && config.contains("var_min"))
        boolean(config, "var_min", "var_min", file);  // training only
    return c;
}

DitConfig parse_sedd(const json& config, const fs::path& file) {
    // The hub config is SEDD's whole training config (PyTorchModelHubMixin saves what the model was built from);
    // only "tokens", "graph", "noise" and "model" concern the network.
    check_known(config,
                {"tokens", "graph", "noise", "model", "ngpus", "training", "data", "eval", "optim", "sampling", "hydra",
                 "work_dir", "wandb"},
                "", file);
    DitConfig c;
    c.flavor = DitFlavor::sedd;
    c.time_conditioning = true;
    const int64_t tokens = positive_int(config, "tokens", "tokens", file);
    if (!config.contains("graph")) config_fail(file, "graph", "missing (an object with \"type\": \"absorb\")");
    const json& graph = config.at("graph");
    if (!graph.is_object()) config_fail(file, "graph", "expected an object");
    check_known(graph, {"type", "file", "report_all"}, "graph.", file);
    if (!graph.contains("type") || graph.at("type") != "absorb")
        config_fail(file, "graph.type",
                    "only \"absorb\" is supported (the uniform graph's score does not map to clean-token "
                    "probabilities here), got " +
                        (graph.contains("type") ? graph.at("type").dump() : std::string("nothing")));
    c.vocab_size = tokens + 1;  // the absorbing graph adds the mask token
    if (config.contains("noise")) {
        const json& noise = config.at("noise");
        if (!noise.is_object()) config_fail(file, "noise", "expected an object");
        check_known(noise, {"type", "sigma_min", "sigma_max"}, "noise.", file);
        if (!noise.contains("type") || noise.at("type") != "loglinear")
            config_fail(file, "noise.type",
                        "only \"loglinear\" is supported, got " +
                            (noise.contains("type") ? noise.at("type").dump() : std::string("nothing")));
    }
    if (!config.contains("model") || !config.at("model").is_object()) config_fail(file, "model", "missing (an object)");
    const json& model = config.at("model");
    check_known(
        model,
        {"name", "type", "hidden_size", "cond_dim", "length", "n_blocks", "n_heads", "scale_by_sigma", "dropout"},
        "model.", file);
    if (!model.contains("type") || model.at("type") != "ddit")
        config_fail(file, "model.type", "only \"ddit\" is supported");
    c.hidden_size = positive_int(model, "hidden_size", "model.hidden_size", file);
    c.cond_dim = positive_int(model, "cond_dim", "model.cond_dim", file);
    c.max_length = positive_int(model, "length", "model.length", file);
    c.n_blocks = positive_int(model, "n_blocks", "model.n_blocks", file);
    c.n_heads = positive_int(model, "n_heads", "model.n_heads", file);
    c.scale_by_sigma = boolean(model, "scale_by_sigma", "model.scale_by_sigma", file);
    return c;
}

// x * (1 + scale) + shift with the per-sample [B, H] modulation broadcast over positions.
at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

// LayerNorm without bias as the authors define it: normalised without affine parameters, then times the weight.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight) {
    return at::layer_norm(x, {x.size(-1)}, {}, {}, 1e-5) * weight;
}

}  // namespace

const char* dit_flavor_name(DitFlavor flavor) {
    switch (flavor) {
        case DitFlavor::mdlm: return "MDLM";
        case DitFlavor::sedd: return "SEDD";
        case DitFlavor::udlm: return "UDLM";
        case DitFlavor::duo: return "DUO";
        case DitFlavor::bd3lm: return "BD3-LM";
    }
    return "?";
}

bool is_dit_checkpoint_config(const json& config) {
    if (!config.is_object() || config.contains("format_version")) return false;
    if (config.contains("model_type") && (config.at("model_type") == "mdlm" || config.at("model_type") == "udlm" ||
                                          config.at("model_type") == "duo" || config.at("model_type") == "bd3lm"))
        return true;
    return config.contains("model") && config.at("model").is_object() && config.at("model").contains("type") &&
           config.at("model").at("type") == "ddit" && config.contains("graph") && config.contains("tokens");
}

DitConfig parse_dit_config(const json& config, const fs::path& file) {
    if (!config.is_object()) throw ModelError("'" + file.string() + "' must hold a JSON object");
    if (config.contains("model_type")) {
        const json& type = config.at("model_type");
        if (type == "mdlm") return parse_hub_dit(config, file, DitFlavor::mdlm);
        if (type == "udlm") return parse_hub_dit(config, file, DitFlavor::udlm);
        if (type == "duo") return parse_hub_dit(config, file, DitFlavor::duo);
        if (type == "bd3lm") return parse_hub_dit(config, file, DitFlavor::bd3lm);
        config_fail(file, "model_type",
                    "only \"mdlm\", \"udlm\", \"duo\" and \"bd3lm\" are supported, got " + type.dump());
    }
    if (config.contains("model") && config.contains("graph")) return parse_sedd(config, file);
    throw ModelError(
        "'" + file.string() +
        "' is neither an MDLM config (\"model_type\": \"mdlm\") nor a SEDD config (\"model\", \"graph\", \"tokens\")");
}

DitNetwork DitNetwork::load(const fs::path& dir) {
    const fs::path config_file = dir / "config.json";
    DitNetwork net;
    DitConfig& c = net.config_;
    c = parse_dit_config(read_json_file(config_file), config_file);
    if (c.hidden_size % c.n_heads != 0 || (c.hidden_size / c.n_heads) % 2 != 0)
        config_fail(config_file, c.flavor == DitFlavor::sedd ? "model.n_heads" : "n_heads",
                    "the hidden size must split into heads of an even width (rotary embedding)");

    const int64_t H = c.hidden_size, C = c.cond_dim, V = c.vocab_size, head_dim = H / c.n_heads;
    const std::string p = c.tensor_prefix();
    Shapes expected = {
        {p + "vocab_embed.embedding", {V, H}},
        {p + "sigma_map.mlp.0.weight", {C, 256}},
        {p + "sigma_map.mlp.0.bias", {C}},
        {p + "sigma_map.mlp.2.weight", {C, C}},
        {p + "sigma_map.mlp.2.bias", {C}},
        {p + "output_layer.norm_final.weight", {H}},
        {p + "output_layer.linear.weight", {V, H}},
        {p + "output_layer.linear.bias", {V}},
        {p + "output_layer.adaLN_modulation.weight", {2 * H, C}},
        {p + "output_layer.adaLN_modulation.bias", {2 * H}},
    };
    const auto block_shapes = [&](int64_t i) {
        const std::string b = p + "blocks." + std::to_string(i) + ".";
        return Shapes{{b + "norm1.weight", {H}},
                      {b + "attn_qkv.weight", {3 * H, H}},
                      {b + "attn_out.weight", {H, H}},
                      {b + "norm2.weight", {H}},
                      {b + "mlp.0.weight", {4 * H, H}},
                      {b + "mlp.0.bias", {4 * H}},
                      {b + "mlp.2.weight", {H, 4 * H}},
                      {b + "mlp.2.bias", {H}},
                      {b + "adaLN_modulation.weight", {6 * H, C}},
                      {b + "adaLN_modulation.bias", {6 * H}}};
    };
    check_weights_can_hold(dir, config_file, c.flavor == DitFlavor::sedd ? "model.n_blocks" : "n_blocks", c.n_blocks,
                           block_shapes(0), expected);
    for (int64_t i = 0; i < c.n_blocks; ++i) expected.merge(block_shapes(i));
    const std::string inv_freq_name = p + "rotary_emb.inv_freq";  // a buffer: optional, checked if present
    Shapes optional = {{inv_freq_name, {head_dim / 2}}};
    // BD3-LM keeps its clipped training noise range as two scalar buffers beside the backbone (when var_min).
    if (c.flavor == DitFlavor::bd3lm) optional.insert({{"sampling_eps_min", {}}, {"sampling_eps_max", {}}});
    Weights weights = load_weights(dir, expected, optional, std::string("the ") + dit_flavor_name(c.flavor) + " DiT");
    auto take = [&](const std::string& name) { return weights.take(name); };
    if (weights.by_name.count(inv_freq_name)) {
        const at::Tensor stored = take(inv_freq_name);
        const at::Tensor computed =
            at::pow(10000.0, -at::arange(0, head_dim, 2, at::kFloat) / static_cast<double>(head_dim));
        // Tolerant enough for a buffer stored in bfloat16 (8 bits of mantissa); another base is far outside it.
        if (!at::allclose(stored, computed, 1e-2, 1e-6))
            throw SafeTensorsError("'" + weights.file.string() + "': tensor '" + inv_freq_name +
                                   "' is not the rotary frequencies of base 10000 this reader computes");
    }
    DitWeights& w = net.w_;
    w.embedding = take(p + "vocab_embed.embedding");
    w.sigma_in_w = take(p + "sigma_map.mlp.0.weight");
    w.sigma_in_b = take(p + "sigma_map.mlp.0.bias");
    w.sigma_out_w = take(p + "sigma_map.mlp.2.weight");
    w.sigma_out_b = take(p + "sigma_map.mlp.2.bias");
    for (int64_t i = 0; i < c.n_blocks; ++i) {
        const std::string b = p + "blocks." + std::to_string(i) + ".";
        w.blocks.push_back(DitWeights::Block{
            take(b + "norm1.weight"), take(b + "attn_qkv.weight"), take(b + "attn_out.weight"),
            take(b + "norm2.weight"), take(b + "mlp.0.weight"), take(b + "mlp.0.bias"), take(b + "mlp.2.weight"),
            take(b + "mlp.2.bias"), take(b + "adaLN_modulation.weight"), take(b + "adaLN_modulation.bias")});
    }
    w.final_norm = take(p + "output_layer.norm_final.weight");
    w.final_ada_w = take(p + "output_layer.adaLN_modulation.weight");
    w.final_ada_b = take(p + "output_layer.adaLN_modulation.bias");
    w.head_w = take(p + "output_layer.linear.weight");
    w.head_b = take(p + "output_layer.linear.bias");
    return net;
}

void DitNetwork::to(const at::Device& device) {
    for (at::Tensor* t : {&w_.embedding, &w_.sigma_in_w, &w_.sigma_in_b, &w_.sigma_out_w, &w_.sigma_out_b,
                          &w_.final_norm, &w_.final_ada_w, &w_.final_ada_b, &w_.head_w, &w_.head_b})
        *t = t->to(device);
    for (auto& b : w_.blocks)
        for (at::Tensor* t : {&b.norm1, &b.qkv, &b.attn_out, &b.norm2, &b.mlp_in_w, &b.mlp_in_b, &b.mlp_out_w,
                              &b.mlp_out_b, &b.ada_w, &b.ada_b})
            *t = t->to(device);
}

double DitNetwork::sigma_at(double t) const { return MaskSchedule(config_.schedule_eps).sigma_bar(t); }

at::Tensor DitNetwork::forward(const at::Tensor& tokens, const at::Tensor& sigma) const {
    return forward_segment(tokens, 0, sigma, nullptr, nullptr);
}

at::Tensor DitNetwork::forward_segment(const at::Tensor& tokens, int64_t start, const at::Tensor& sigma,
                                       const DitKeyValues* past, DitKeyValues* present) const {
    return at::linear(dit_states(config_, w_, tokens, start, sigma, past, present), w_.head_w, w_.head_b);
}

at::Tensor dit_states(const DitConfig& c, const DitWeights& w, const at::Tensor& tokens, int64_t start,
                      const at::Tensor& sigma_in, const DitKeyValues* past, DitKeyValues* present, double dropout,
                      at::Generator* gen) {
    if (tokens.dim() != 2 || tokens.scalar_type() != at::kLong)
        throw std::invalid_argument("DitNetwork::forward: tokens must be int64 [B, L]");
    const int64_t B = tokens.size(0), L = tokens.size(1), H = c.hidden_size, heads = c.n_heads, head_dim = H / heads;
    if (L < 1 || start < 0 || start + L > c.max_length)
        throw std::invalid_argument("DitNetwork::forward: positions " + std::to_string(start) + " to " +
                                    std::to_string(start + L) + "; the network takes 1 to " +
                                    std::to_string(c.max_length));
    if (start > 0 && (c.block_size == 0 || start % c.block_size != 0))
        throw std::invalid_argument(
            "DitNetwork::forward_segment: a segment after position 0 needs block-causal attention "
            "(BD3-LM) and must start at a block boundary, got " +
            std::to_string(start));
    const int64_t past_length = past != nullptr && !past->keys.empty() ? past->keys.front().size(2) : 0;
    if (past_length != start || (past != nullptr && !past->keys.empty() &&
                                 (static_cast<int64_t>(past->keys.size()) != c.n_blocks ||
                                  static_cast<int64_t>(past->values.size()) != c.n_blocks)))
        throw std::invalid_argument("DitNetwork::forward_segment: the past keys and values must cover positions 0 to " +
                                    std::to_string(start) + " in each of the " + std::to_string(c.n_blocks) +
                                    " blocks");
    if (tokens.numel() > 0 && (tokens.min().item<int64_t>() < 0 || tokens.max().item<int64_t>() >= c.vocab_size))
        throw std::invalid_argument("DitNetwork::forward: a token id outside [0, " + std::to_string(c.vocab_size) +
                                    ")");
    if (sigma_in.dim() != 1 || sigma_in.size(0) != B)
        throw std::invalid_argument("DitNetwork::forward: sigma must be [B]");
    const auto device = w.embedding.device();
    at::Tensor sigma = sigma_in.to(device, at::kFloat);
    if (!c.time_conditioning) sigma = at::zeros_like(sigma);  // what MDLM's backbone does without time conditioning

    // Noise-level features: the DiT's sinusoidal timestep embedding (256 features, max period 10000).
    const int64_t half = 128;
    const at::Tensor freqs =
        at::exp(-std::log(10000.0) * at::arange(half, at::TensorOptions().dtype(at::kFloat).device(device)) /
                static_cast<double>(half));
    const at::Tensor args = sigma.unsqueeze(1) * freqs.unsqueeze(0);
    const at::Tensor features = at::cat({at::cos(args), at::sin(args)}, -1);
    const at::Tensor cond =
        at::silu(at::linear(at::silu(at::linear(features, w.sigma_in_w, w.sigma_in_b)), w.sigma_out_w, w.sigma_out_b));

    // Rotary tables [L, 1, head_dim] at the segment's positions (rotate-half form: the frequencies repeated over both
    // halves).
    const at::Tensor inv_freq =
        at::pow(10000.0, -at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kFloat).device(device)) /
                             static_cast<double>(head_dim));
    const at::Tensor angles = at::outer(at::arange(start, start + L, inv_freq.options()), inv_freq);
    const at::Tensor both = at::cat({angles, angles}, -1).unsqueeze(1);
    const at::Tensor cos = both.cos(), sin = both.sin();
    const double attention_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));

    // BD3-LM: key q is hidden from query p when q's block comes after p's ([L, start + L], true where hidden); the
    // past positions are in earlier blocks than every query, so always seen.
    at::Tensor hidden_by_block;
    if (c.block_size > 0) {
        const at::Tensor block = at::arange(start, start + L, at::TensorOptions().dtype(at::kLong).device(device))
                                     .div(c.block_size, "floor");
        hidden_by_block = block.unsqueeze(0).gt(block.unsqueeze(1));
        if (start > 0)
            hidden_by_block = at::cat({at::zeros({L, start}, hidden_by_block.options()), hidden_by_block}, 1);
    }
    if (present != nullptr) {
        present->keys.clear();
        present->values.clear();
    }

    at::Tensor x = at::embedding(w.embedding, tokens.to(device));
    for (size_t i = 0; i < w.blocks.size(); ++i) {
        const DitWeights::Block& b = w.blocks[i];
        const auto mod = at::linear(cond, b.ada_w, b.ada_b).chunk(6, 1);
        at::Tensor h = modulate(layer_norm(x, b.norm1), mod[0], mod[1]);
        const at::Tensor qkv = at::linear(h, b.qkv).view({B, L, 3, heads, head_dim});
        const at::Tensor q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);  // [B, L, heads, d]
        const at::Tensor q_rot = (q * cos + rotate_half(q) * sin).transpose(1, 2);
        at::Tensor k_rot = (k * cos + rotate_half(k) * sin).transpose(1, 2);  // [B, heads, L, d]
        at::Tensor v_heads = v.transpose(1, 2);
        if (present != nullptr) {
            present->keys.push_back(k_rot);
            present->values.push_back(v_heads);
        }
        if (start > 0) {
            k_rot = at::cat({past->keys[i], k_rot}, 2);
            v_heads = at::cat({past->values[i], v_heads}, 2);
        }
        at::Tensor scores = at::matmul(q_rot, k_rot.transpose(-2, -1)) * attention_scale;
        if (hidden_by_block.defined())
            scores = scores.masked_fill(hidden_by_block, -std::numeric_limits<float>::infinity());
        const at::Tensor weights = at::softmax(scores, -1);
        const at::Tensor attended = at::matmul(weights, v_heads).transpose(1, 2).reshape({B, L, H});
        x = x + mod[2].unsqueeze(1) * nn::dropout(at::linear(attended, b.attn_out), dropout, gen);
        h = modulate(layer_norm(x, b.norm2), mod[3], mod[4]);
        const at::Tensor mlp =
            at::linear(at::gelu(at::linear(h, b.mlp_in_w, b.mlp_in_b), "tanh"), b.mlp_out_w, b.mlp_out_b);
        x = x + mod[5].unsqueeze(1) * nn::dropout(mlp, dropout, gen);
    }
    const auto mod = at::linear(cond, w.final_ada_w, w.final_ada_b).chunk(2, 1);
    return modulate(layer_norm(x, w.final_norm), mod[0], mod[1]);
}

namespace {
// SEDD's scale_by_sigma offset [B, 1, 1] of a raw output [B, L, V]: log(e^sigma - 1) (through expm1 where sigma is
// small, as SEDD computes it) + log(V - 1); 0 without scale_by_sigma.
at::Tensor sedd_offset(const DitConfig& c, const at::Tensor& raw, const at::Tensor& sigma_in) {
    if (!c.scale_by_sigma) return at::zeros({raw.size(0), 1, 1}, raw.options());
    const at::Tensor sigma = sigma_in.to(raw.device(), at::kFloat);
    const at::Tensor esigm1_log = at::where(sigma < 0.5, at::expm1(sigma), sigma.exp() - 1).log();
    return (esigm1_log + std::log(static_cast<double>(raw.size(-1) - 1))).view({-1, 1, 1});
}
}  // namespace

at::Tensor DitNetwork::sedd_log_score(const at::Tensor& tokens, const at::Tensor& sigma_in) const {
    const at::Tensor out = forward(tokens, sigma_in);
    return (out - sedd_offset(config_, out, sigma_in)).scatter(-1, tokens.to(out.device()).unsqueeze(-1), 0.0);
}

std::pair<at::Tensor, at::Tensor> DitNetwork::sedd_clean_log_probs_and_score_total(const at::Tensor& tokens,
                                                                                   const at::Tensor& sigma) const {
    const at::Tensor raw = forward(tokens, sigma);
    // At a masked position the score is the offset raw output at every y but the mask (whose entry is 0).
    at::Tensor unmasking = raw.clone();
    unmasking.select(-1, config_.mask_id()).fill_(-std::numeric_limits<float>::infinity());
    const at::Tensor total = at::logsumexp(unmasking, -1) - sedd_offset(config_, raw, sigma).view({-1, 1});
    return {subs_log_probs(raw, tokens, config_.mask_id()), total};
}

// Why one mapping serves both: MDLM's SUBS is defined on the raw output exactly so. For SEDD's absorbing graph the
// true log score at a masked position is log p0(y | x_t) - log(e^sigma - 1) for every clean token y (the ratio of
// unmasking to y over staying masked), so the clean-token distribution is the softmax of the score over y != mask:
// every per-sample offset (scale_by_sigma's included) cancels, and the raw output gives it directly. The network's
// score is not exactly normalised; the softmax normalises it, which is what SEDD's analytic (Tweedie) step does.
// UDLM and DUO (uniform noise) have no mask: their output is x_theta, the clean-token distribution they plug into
// the posterior q(z_s | z_t, x = x_theta) (their _compute_posterior / _posterior_from_x0), a log-softmax over all V.
at::Tensor DitNetwork::clean_log_probs(const at::Tensor& tokens, const at::Tensor& sigma) const {
    if (config_.uniform()) return at::log_softmax(forward(tokens, sigma), -1);
    return subs_log_probs(forward(tokens, sigma), tokens, config_.mask_id());
}

}  // namespace rudder::nn
