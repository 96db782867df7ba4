#include <rudder/nn/bidirectional_llm.hpp>

#include <ATen/ATen.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/safetensors.hpp>

#include "checkpoint_files.hpp"
#include "rotary.hpp"

namespace rudder::nn {
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace checkpoint;

namespace {

double positive_number(const json& object, const std::string& key, const fs::path& file, double fallback) {
    if (!object.contains(key)) return fallback;
    const json& v = object.at(key);
    if (!v.is_number() || !(v.get<double>() > 0)) config_fail(file, key, "expected a positive number, got " + v.dump());
    return v.get<double>();
}

// An id field: a non-negative integer, or null / absent for none (-1).
int64_t optional_id(const json& object, const std::string& key, const fs::path& file) {
    if (!object.contains(key) || object.at(key).is_null()) return -1;
    const json& v = object.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) config_fail(file, key, "expected a token id, got " + v.dump());
    return v.get<int64_t>();
}

// `key` must hold `want` (or be absent when `absent_ok`): a setting this network does not implement otherwise.
void require_value(const json& object, const std::string& key, const json& want, const fs::path& file, bool absent_ok,
                   const std::string& why) {
    if (!object.contains(key)) {
        if (absent_ok) return;
        config_fail(file, key, "missing (expected " + want.dump() + ")");
    }
    if (object.at(key) != want)
        config_fail(file, key, "only " + want.dump() + " is supported (" + why + "), got " + object.at(key).dump());
}

BidirectionalLlmConfig parse_llada(const json& config, const fs::path& file) {
    std::set<std::string> known = hub_metadata_keys();
    for (const char* k : {"activation_type",
                          "alibi",
                          "alibi_bias_max",
                          "attention_dropout",
                          "attention_layer_norm",
                          "attention_layer_norm_with_affine",
                          "bias_for_layer_norm",
                          "block_group_size",
                          "block_type",
                          "d_model",
                          "embedding_dropout",
                          "embedding_size",
                          "eos_token_id",
                          "flash_attention",
                          "include_bias",
                          "include_qkv_bias",
                          "init_cutoff_factor",
                          "init_device",
                          "init_fn",
                          "init_std",
                          "input_emb_norm",
                          "layer_norm_type",
                          "layer_norm_with_affine",
                          "mask_token_id",
                          "max_sequence_length",
                          "mlp_hidden_size",
                          "mlp_ratio",
                          "multi_query_attention",
                          "n_heads",
                          "n_kv_heads",
                          "n_layers",
                          "pad_token_id",
                          "precision",
                          "residual_dropout",
                          "rms_norm_eps",
                          "rope",
                          "rope_full_precision",
                          "rope_theta",
                          "scale_logits",
                          "use_cache",
                          "vocab_size",
                          "weight_tying",
                          "clip_qkv"})
        known.insert(k);
    check_known(config, known, "", file);
    require_value(config, "block_type", "llama", file, false, "the LLaMA block LLaDA uses");
    require_value(config, "activation_type", "silu", file, true, "SwiGLU's gate");
    require_value(config, "layer_norm_type", "rms", file, true, "RMSNorm");
    require_value(config, "layer_norm_with_affine", true, file, true, "norms with a weight");
    require_value(config, "alibi", false, file, true, "rotary positions, not ALiBi");
    require_value(config, "rope", true, file, true, "rotary positions");
    require_value(config, "include_bias", false, file, true, "projections without bias");
    require_value(config, "attention_layer_norm", false, file, true, "no norm of q and k");
    require_value(config, "input_emb_norm", false, file, true, "no norm of the embedding");
    require_value(config, "scale_logits", false, file, true, "unscaled logits");
    require_value(config, "block_group_size", 1, file, true, "one block per group");
    if (config.contains("bias_for_layer_norm") && !config.at("bias_for_layer_norm").is_null())
        require_value(config, "bias_for_layer_norm", false, file, true, "norms without bias");
    if (config.contains("clip_qkv") && !config.at("clip_qkv").is_null())
        config_fail(file, "clip_qkv",
                    "only null is supported (no clipping of q, k, v), got " + config.at("clip_qkv").dump());
    if (config.contains("multi_query_attention") && !config.at("multi_query_attention").is_null() &&
        config.at("multi_query_attention") != false)
        config_fail(file, "multi_query_attention",
                    "only null or false is supported (n_kv_heads says how many key/value heads)");

    BidirectionalLlmConfig c;
    c.flavor = BidirectionalLlmFlavor::llada;
    c.hidden_size = positive_int(config, "d_model", "d_model", file);
    c.n_layers = positive_int(config, "n_layers", "n_layers", file);
    c.n_heads = positive_int(config, "n_heads", "n_heads", file);
    c.n_kv_heads = config.contains("n_kv_heads") && !config.at("n_kv_heads").is_null()
                       ? positive_int(config, "n_kv_heads", "n_kv_heads", file)
                       : c.n_heads;
    if (config.contains("mlp_hidden_size") && !config.at("mlp_hidden_size").is_null())
        c.intermediate_size = positive_int(config, "mlp_hidden_size", "mlp_hidden_size", file);
    else
        c.intermediate_size = positive_int(config, "mlp_ratio", "mlp_ratio", file) * c.hidden_size;
    const int64_t vocab = positive_int(config, "vocab_size", "vocab_size", file);
    c.vocab_size = config.contains("embedding_size") && !config.at("embedding_size").is_null()
                       ? positive_int(config, "embedding_size", "embedding_size", file)
                       : vocab;
    if (c.vocab_size < vocab) config_fail(file, "embedding_size", "smaller than vocab_size");
    c.max_length = positive_int(config, "max_sequence_length", "max_sequence_length", file);
    c.rope_theta = positive_number(config, "rope_theta", file, 10000.0);
    c.rms_eps = positive_number(config, "rms_norm_eps", file, 1e-5);
    c.qkv_bias = config.contains("include_qkv_bias") && boolean(config, "include_qkv_bias", "include_qkv_bias", file);
    c.tied_output = config.contains("weight_tying") && boolean(config, "weight_tying", "weight_tying", file);
    c.mask_id = config.contains("mask_token_id") ? optional_id(config, "mask_token_id", file) : 126336;  // LLaDA's
    c.pad_id = optional_id(config, "pad_token_id", file);
    c.eos_id = optional_id(config, "eos_token_id", file);
    return c;
}

BidirectionalLlmConfig parse_dream(const json& config, const fs::path& file) {
    std::set<std::string> known = hub_metadata_keys();
    for (const char* k : {"attention_dropout",   "bos_token_id",        "eos_token_id",
                          "hidden_act",          "hidden_size",         "initializer_range",
                          "intermediate_size",   "mask_token_id",       "max_position_embeddings",
                          "max_window_layers",   "num_attention_heads", "num_hidden_layers",
                          "num_key_value_heads", "pad_token_id",        "rms_norm_eps",
                          "rope_scaling",        "rope_theta",          "sliding_window",
                          "tie_word_embeddings", "use_cache",           "use_sliding_window",
                          "vocab_size"})
        known.insert(k);
    check_known(config, known, "", file);
    require_value(config, "hidden_act", "silu", file, true, "SwiGLU's gate");
    require_value(config, "use_sliding_window", false, file, true, "attention over every position");
    if (config.contains("rope_scaling") && !config.at("rope_scaling").is_null())
        config_fail(file, "rope_scaling",
                    "only null is supported (plain rotary positions), got " + config.at("rope_scaling").dump());

    BidirectionalLlmConfig c;
    c.flavor = BidirectionalLlmFlavor::dream;
    c.hidden_size = positive_int(config, "hidden_size", "hidden_size", file);
    c.n_layers = positive_int(config, "num_hidden_layers", "num_hidden_layers", file);
    c.n_heads = positive_int(config, "num_attention_heads", "num_attention_heads", file);
    c.n_kv_heads = config.contains("num_key_value_heads") && !config.at("num_key_value_heads").is_null()
                       ? positive_int(config, "num_key_value_heads", "num_key_value_heads", file)
                       : c.n_heads;
    c.intermediate_size = positive_int(config, "intermediate_size", "intermediate_size", file);
    c.vocab_size = positive_int(config, "vocab_size", "vocab_size", file);
    c.max_length = positive_int(config, "max_position_embeddings", "max_position_embeddings", file);
    c.rope_theta = positive_number(config, "rope_theta", file, 10000.0);
    c.rms_eps = positive_number(config, "rms_norm_eps", file, 1e-6);
    c.qkv_bias = true;  // Qwen2's q, k and v projections have biases
    c.tied_output =
        config.contains("tie_word_embeddings") && boolean(config, "tie_word_embeddings", "tie_word_embeddings", file);
    c.mask_id = config.contains("mask_token_id") ? optional_id(config, "mask_token_id", file) : 151666;  // Dream's
    c.pad_id = optional_id(config, "pad_token_id", file);
    c.eos_id = optional_id(config, "eos_token_id", file);
    return c;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * weight;
}

}  // namespace

bool is_bidirectional_llm_config(const json& config) {
    if (!config.is_object() || config.contains("format_version") || !config.contains("model_type")) return false;
    const json& type = config.at("model_type");
    return type == "llada" || type == "Dream";
}

BidirectionalLlmConfig parse_bidirectional_llm_config(const json& config, const fs::path& file) {
    if (!config.is_object()) throw ModelError("'" + file.string() + "' must hold a JSON object");
    if (!config.contains("model_type")) config_fail(file, "model_type", "missing (\"llada\" or \"Dream\")");
    const json& type = config.at("model_type");
    BidirectionalLlmConfig c;
    if (type == "llada")
        c = parse_llada(config, file);
    else if (type == "Dream")
        c = parse_dream(config, file);
    else
        config_fail(file, "model_type", "expected \"llada\" or \"Dream\", got " + type.dump());
    const std::string heads = c.flavor == BidirectionalLlmFlavor::llada ? "n_heads" : "num_attention_heads";
    if (c.hidden_size % c.n_heads != 0 || (c.hidden_size / c.n_heads) % 2 != 0)
        config_fail(file, heads, "the hidden size must split into heads of an even width (rotary positions)");
    if (c.n_heads % c.n_kv_heads != 0)
        config_fail(file, c.flavor == BidirectionalLlmFlavor::llada ? "n_kv_heads" : "num_key_value_heads",
                    "must divide the number of query heads (" + std::to_string(c.n_heads) + ")");
    if (c.mask_id < 0 || c.mask_id >= c.vocab_size)
        config_fail(file, "mask_token_id",
                    std::to_string(c.mask_id) + " is not an id of the " + std::to_string(c.vocab_size) + " tokens");
    for (const auto& [id, key] :
         {std::pair<int64_t, const char*>{c.pad_id, "pad_token_id"}, {c.eos_id, "eos_token_id"}})
        if (id >= c.vocab_size)
            config_fail(file, key,
                        std::to_string(id) + " is not an id of the " + std::to_string(c.vocab_size) + " tokens");
    return c;
}

BidirectionalLlm BidirectionalLlm::load(const fs::path& dir) {
    const fs::path config_file = dir / "config.json";
    BidirectionalLlm net;
    BidirectionalLlmConfig& c = net.config_;
    c = parse_bidirectional_llm_config(read_json_file(config_file), config_file);
    const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, d = H / c.n_heads;
    const int64_t q_rows = c.n_heads * d, kv_rows = c.n_kv_heads * d;
    const bool llada = c.flavor == BidirectionalLlmFlavor::llada;
    const std::string embedding = llada ? "model.transformer.wte.weight" : "model.embed_tokens.weight";
    const std::string final_norm = llada ? "model.transformer.ln_f.weight" : "model.norm.weight";
    const std::string output = llada ? "model.transformer.ff_out.weight" : "lm_head.weight";
    struct Names {
        std::string attn_norm, q, k, v, o, ff_norm, gate, up, down;
    };
    auto names = [&](int64_t i) {
        const std::string b = (llada ? "model.transformer.blocks." : "model.layers.") + std::to_string(i) + ".";
        if (llada)
            return Names{b + "attn_norm.weight", b + "q_proj",          b + "k_proj",
                         b + "v_proj",           b + "attn_out.weight", b + "ff_norm.weight",
                         b + "ff_proj.weight",   b + "up_proj.weight",  b + "ff_out.weight"};
        return Names{b + "input_layernorm.weight", b + "self_attn.q_proj",        b + "self_attn.k_proj",
                     b + "self_attn.v_proj",       b + "self_attn.o_proj.weight", b + "post_attention_layernorm.weight",
                     b + "mlp.gate_proj.weight",   b + "mlp.up_proj.weight",      b + "mlp.down_proj.weight"};
    };
    Shapes expected = {{embedding, {V, H}}, {final_norm, {H}}};
    if (!c.tied_output) expected[output] = {V, H};
    const auto layer_shapes = [&](int64_t i) {
        const Names n = names(i);
        Shapes layer = {{n.attn_norm, {H}},
                        {n.q + ".weight", {q_rows, H}},
                        {n.k + ".weight", {kv_rows, H}},
                        {n.v + ".weight", {kv_rows, H}},
                        {n.o, {H, q_rows}},
                        {n.ff_norm, {H}},
                        {n.gate, {I, H}},
                        {n.up, {I, H}},
                        {n.down, {H, I}}};
        if (c.qkv_bias)
            layer.insert({{n.q + ".bias", {q_rows}}, {n.k + ".bias", {kv_rows}}, {n.v + ".bias", {kv_rows}}});
        return layer;
    };
    check_weights_can_hold(dir, config_file, llada ? "n_layers" : "num_hidden_layers", c.n_layers, layer_shapes(0),
                           expected);
    for (int64_t i = 0; i < c.n_layers; ++i) expected.merge(layer_shapes(i));
    Weights weights = load_weights(dir, expected, {}, "the " + c.name() + " network", Storage::keep_matrices);
    net.embedding_ = weights.take(embedding);
    net.final_norm_ = weights.take(final_norm);
    net.output_ = c.tied_output ? net.embedding_ : weights.take(output);
    for (int64_t i = 0; i < c.n_layers; ++i) {
        const Names n = names(i);
        Layer layer;
        layer.attn_norm = weights.take(n.attn_norm);
        layer.q_w = weights.take(n.q + ".weight");
        layer.k_w = weights.take(n.k + ".weight");
        layer.v_w = weights.take(n.v + ".weight");
        if (c.qkv_bias) {
            layer.q_b = weights.take(n.q + ".bias");
            layer.k_b = weights.take(n.k + ".bias");
            layer.v_b = weights.take(n.v + ".bias");
        }
        layer.o_w = weights.take(n.o);
        layer.ff_norm = weights.take(n.ff_norm);
        layer.gate_w = weights.take(n.gate);
        layer.up_w = weights.take(n.up);
        layer.down_w = weights.take(n.down);
        net.layers_.push_back(std::move(layer));
    }
    return net;
}

void BidirectionalLlm::to(const at::Device& device) {
    const bool tied = output_.values.is_same(embedding_.values);
    embedding_.to(device);
    final_norm_ = final_norm_.to(device);
    if (tied)
        output_ = embedding_;
    else
        output_.to(device);
    for (auto& l : layers_) {
        for (at::Tensor* t : {&l.attn_norm, &l.q_b, &l.k_b, &l.v_b, &l.ff_norm})
            if (t->defined()) *t = t->to(device);
        for (HeldMatrix* m : {&l.q_w, &l.k_w, &l.v_w, &l.o_w, &l.gate_w, &l.up_w, &l.down_w}) m->to(device);
    }
}

void BidirectionalLlm::quantize_int8() {
    if (embedding_.is_int8()) return;
    const bool tied = output_.values.is_same(embedding_.values);
    // One matrix at a time, each replacing its original: the peak holds one matrix twice, not the network.
    embedding_ = quantize_rows_int8(embedding_.values);
    output_ = tied ? embedding_ : quantize_rows_int8(output_.values);
    for (auto& l : layers_)
        for (HeldMatrix* m : {&l.q_w, &l.k_w, &l.v_w, &l.o_w, &l.gate_w, &l.up_w, &l.down_w})
            *m = quantize_rows_int8(m->values);
}

at::Tensor BidirectionalLlm::forward(const at::Tensor& tokens, KeyValueCache* fill) const {
    if (tokens.dim() != 2 || tokens.scalar_type() != at::kLong)
        throw std::invalid_argument("BidirectionalLlm::forward: tokens must be int64 [B, L]");
    return logits_of(run(tokens, 0, tokens.size(1), nullptr, fill));
}

at::Tensor BidirectionalLlm::forward_window(const at::Tensor& window, int64_t begin, const KeyValueCache& cache) const {
    check_window("forward_window", window, begin, cache);
    return logits_of(run(window, begin, cache.length, &cache, nullptr));
}

at::Tensor BidirectionalLlm::run(const at::Tensor& tokens, int64_t begin, int64_t length, const KeyValueCache* cache,
                                 KeyValueCache* fill) const {
    const BidirectionalLlmConfig& c = config_;
    const int64_t B = tokens.size(0), n = tokens.size(1), heads = c.n_heads, kv_heads = c.n_kv_heads;
    const int64_t d = c.hidden_size / heads;
    if (n < 1 || length > c.max_length)
        throw std::invalid_argument("BidirectionalLlm::forward: " + std::to_string(length) +
                                    " positions; the network takes 1 to " + std::to_string(c.max_length));
    if (tokens.numel() > 0 && (tokens.min().item<int64_t>() < 0 || tokens.max().item<int64_t>() >= c.vocab_size))
        throw std::invalid_argument("BidirectionalLlm::forward: a token id outside [0, " +
                                    std::to_string(c.vocab_size) + ")");
    const auto device = embedding_.values.device();
    const auto options = at::TensorOptions().dtype(at::kFloat).device(device);

    // Rotary tables [n, d] of the positions run (rotate-half form: the frequencies repeated over both halves),
    // computed in float64 and rounded once: with theta = 500,000 and thousands of positions the angles need the
    // precision.
    const at::Tensor inv_freq =
        at::pow(c.rope_theta, -at::arange(0, d, 2, options.dtype(at::kDouble)) / static_cast<double>(d));
    const at::Tensor angles = at::outer(at::arange(begin, begin + n, inv_freq.options()), inv_freq);
    const at::Tensor both = at::cat({angles, angles}, -1);
    const at::Tensor cos = both.cos().to(at::kFloat), sin = both.sin().to(at::kFloat);
    const double attention_scale = 1.0 / std::sqrt(static_cast<double>(d));
    if (fill) {
        fill->keys.assign(layers_.size(), {});
        fill->values.assign(layers_.size(), {});
        fill->length = length;
    }

    at::Tensor x = embedding_rows(embedding_, tokens.to(device));
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& l = layers_[i];
        const at::Tensor a = rms_norm(x, l.attn_norm, c.rms_eps);
        // [B, heads, n, d]
        at::Tensor q = linear_widening(a, l.q_w, l.q_b).view({B, n, heads, d}).transpose(1, 2);
        at::Tensor k = linear_widening(a, l.k_w, l.k_b).view({B, n, kv_heads, d}).transpose(1, 2);
        at::Tensor v = linear_widening(a, l.v_w, l.v_b).view({B, n, kv_heads, d}).transpose(1, 2);
        q = q * cos + rotate_half(q) * sin;
        k = k * cos + rotate_half(k) * sin;
        if (fill) {
            fill->keys[i] = k;
            fill->values[i] = v;
        }
        if (cache) {  // the cached positions around the window, the window's own fresh
            const at::Tensor& ck = cache->keys[i];
            const at::Tensor& cv = cache->values[i];
            const int64_t after = length - begin - n;
            std::vector<at::Tensor> ks, vs;
            if (begin > 0) {
                ks.push_back(ck.narrow(2, 0, begin));
                vs.push_back(cv.narrow(2, 0, begin));
            }
            ks.push_back(k);
            vs.push_back(v);
            if (after > 0) {
                ks.push_back(ck.narrow(2, begin + n, after));
                vs.push_back(cv.narrow(2, begin + n, after));
            }
            k = at::cat(ks, 2);
            v = at::cat(vs, 2);
        }
        if (kv_heads != heads) {
            k = k.repeat_interleave(heads / kv_heads, 1);
            v = v.repeat_interleave(heads / kv_heads, 1);
        }
        const at::Tensor weights = at::softmax(at::matmul(q, k.transpose(-2, -1)) * attention_scale, -1);
        const at::Tensor attended = at::matmul(weights, v).transpose(1, 2).reshape({B, n, heads * d});
        x = x + linear_widening(attended, l.o_w);
        const at::Tensor m = rms_norm(x, l.ff_norm, c.rms_eps);
        x = x + linear_widening(at::silu(linear_widening(m, l.gate_w)) * linear_widening(m, l.up_w), l.down_w);
    }
    return rms_norm(x, final_norm_, c.rms_eps);
}

at::Tensor BidirectionalLlm::logits_of(const at::Tensor& hidden) const {
    at::Tensor logits = linear_widening(hidden, output_);
    const int64_t n = hidden.size(1);
    if (config_.shifted() && n > 1) logits = at::cat({logits.narrow(1, 0, 1), logits.narrow(1, 0, n - 1)}, 1);
    return logits;
}

at::Tensor BidirectionalLlm::clean_log_probs(const at::Tensor& tokens, int64_t vocab, at::Tensor* outside,
                                             KeyValueCache* fill) const {
    check_vocab(vocab);
    if (tokens.dim() != 2 || tokens.scalar_type() != at::kLong)
        throw std::invalid_argument("BidirectionalLlm::clean_log_probs: tokens must be int64 [B, L]");
    return masked_log_probs(run(tokens, 0, tokens.size(1), nullptr, fill), tokens, vocab, outside);
}

at::Tensor BidirectionalLlm::clean_log_probs_window(const at::Tensor& window, int64_t begin, const KeyValueCache& cache,
                                                    int64_t vocab, at::Tensor* outside) const {
    check_vocab(vocab);
    check_window("clean_log_probs_window", window, begin, cache);
    return masked_log_probs(run(window, begin, cache.length, &cache, nullptr), window, vocab, outside);
}

void BidirectionalLlm::check_vocab(int64_t vocab) const {
    if (vocab < 2 || vocab > config_.vocab_size || config_.mask_id >= vocab)
        throw std::invalid_argument("BidirectionalLlm::clean_log_probs: " + std::to_string(vocab) +
                                    " tokens, but the network has " + std::to_string(config_.vocab_size) +
                                    " and the mask is " + std::to_string(config_.mask_id));
}

void BidirectionalLlm::check_window(const char* caller, const at::Tensor& window, int64_t begin,
                                    const KeyValueCache& cache) const {
    const std::string where = std::string("BidirectionalLlm::") + caller + ": ";
    if (window.dim() != 2 || window.scalar_type() != at::kLong)
        throw std::invalid_argument(where + "tokens must be int64 [B, n]");
    if (cache.length < 1 || cache.keys.size() != layers_.size() || cache.keys[0].size(0) != window.size(0))
        throw std::invalid_argument(where + "the cache holds no forward of this batch");
    if (begin < 0 || begin + window.size(1) > cache.length)
        throw std::invalid_argument(where + "positions [" + std::to_string(begin) + ", " +
                                    std::to_string(begin + window.size(1)) + ") outside the cached " +
                                    std::to_string(cache.length));
}

at::Tensor BidirectionalLlm::masked_log_probs(const at::Tensor& hidden, const at::Tensor& tokens, int64_t vocab,
                                              at::Tensor* outside) const {
    const int64_t B = hidden.size(0), n = hidden.size(1), V = config_.vocab_size;
    const int64_t mask = config_.mask_id, probe = mask == 0 ? 1 : 0;
    const at::Tensor ids = tokens.to(hidden.device()).reshape({-1});
    const at::Tensor rows = ids.eq(mask).nonzero().squeeze(1);  // flat positions b * n + p
    // An unmasked position: its token certain, every other impossible (SUBS carry-over); no row of the output layer.
    at::Tensor out = at::full({B * n, vocab}, kImpossibleLogProb, hidden.options());
    const at::Tensor clean = ids.ne(mask).nonzero().squeeze(1);
    out.index_put_({clean, ids.index_select(0, clean)}, at::zeros({}, out.options()));
    if (outside) *outside = at::full({B * n, 1 + V - vocab}, kImpossibleLogProb, hidden.options());
    if (rows.numel() > 0) {
        // Dream's logits at position p are its output at p - 1 (the first position keeps its own).
        const at::Tensor from = config_.shifted() ? rows - rows.remainder(n).gt(0).to(at::kLong) : rows;
        const at::Tensor logits = linear_widening(hidden.reshape({B * n, -1}).index_select(0, from), output_);
        at::Tensor raw_outside, probe_logit;
        if (outside) {
            raw_outside = at::cat({logits.narrow(-1, mask, 1), logits.narrow(-1, vocab, V - vocab)}, -1);
            probe_logit = logits.select(-1, probe).clone();  // (subs_log_probs writes into the logits)
        }
        const at::Tensor logp = subs_log_probs(logits.narrow(-1, 0, vocab), ids.index_select(0, rows), mask);
        out.index_copy_(0, rows, logp);
        // One token's logit minus its log-probability is the kept rows' log-normaliser: no second pass over them.
        if (outside) outside->index_copy_(0, rows, raw_outside - (probe_logit - logp.select(-1, probe)).unsqueeze(-1));
    }
    if (outside) *outside = outside->view({B, n, -1});
    return out.view({B, n, vocab});
}

}  // namespace rudder::nn
