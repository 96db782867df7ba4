// The DiT of MDLM (kuleshov-group/mdlm-owt), SEDD (louaaron/sedd-small), BD3-LM (kuleshov-group/bd3lm-owt-*), UDLM
// (kuleshov-group/udlm-lm1b) and DUO (s-sahoo/duo), loaded from their public checkpoints in
// Hugging Face layout (config.json + model.safetensors, or model.safetensors.index.json + shards) and run in
// float32. docs/checkpoints.md describes what loads and what is refused.
//
// The network, as the authors' code defines it (read in kuleshov-group/mdlm models/dit.py and the hub's
// modeling_mdlm.py / configuration_mdlm.py; louaaron/Score-Entropy-Discrete-Diffusion model/transformer.py and
// model/rotary.py), with H = hidden size, C = cond_dim, V = vocabulary (GPT-2's 50,257 + mask = 50,258), N blocks:
//   x = vocab_embed.embedding[tokens]                                       [V, H]
//   c = silu(sigma_map.mlp.2(silu(sigma_map.mlp.0(timestep_features(sigma)))))
//         sigma_map.mlp.0: weight [C, 256], bias [C]; sigma_map.mlp.2: weight [C, C], bias [C]
//         timestep_features: [cos(sigma f), sin(sigma f)], f_i = 10000^(-i/128), i < 128
//   per block i (blocks.i.):
//     shift1, scale1, gate1, shift2, scale2, gate2 = adaLN_modulation(c)    weight [6H, C], bias [6H]
//     h = LN(x) * norm1.weight * (1 + scale1) + shift1                       LN without affine; norm1.weight [H]
//     q, k, v = attn_qkv(h) (no bias)                                        weight [3H, H]
//     q, k rotated (rotate-half form, base 10000, over the head dimension); bidirectional softmax attention
//     x = x + gate1 * attn_out(attention) (no bias)                          weight [H, H]
//     h = LN(x) * norm2.weight * (1 + scale2) + shift2                       norm2.weight [H]
//     x = x + gate2 * mlp.2(gelu_tanh(mlp.0(h)))                             mlp.0 [4H, H] + [4H]; mlp.2 [H, 4H] + [H]
//   output_layer: shift, scale = adaLN_modulation(c) ([2H, C], [2H]);
//     out = linear(LN(x) * norm_final.weight * (1 + scale) + shift)         linear weight [V, H], bias [V]
//   rotary_emb.inv_freq [H / heads / 2]: a buffer, recomputed here and checked against the file when present.
// MDLM's hub checkpoint holds these under "backbone." (its MDLM wrapper's DITBackbone), as BD3-LM's, UDLM's and DUO's
// do (their wrappers are built the same way); SEDD's without a prefix. UDLM and DUO give the network sigma = -log
// alpha_t of their log-linear schedule, as MDLM with time conditioning does. MDLM-OWT has time_conditioning false: its
// sigma is replaced by 0, so c is a constant (BD3-LM's checkpoints too). BD3-LM: the attention scores of query p over
// key q are -inf unless block(q) <= block(p), block(i) = i / block_size: its sampler's path without a key/value cache
// (bd3lms models/dit.py, sample_mode with the x0 part of block_diff_mask); forward_segment is the path with the cache.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <rudder/nn/model_files.hpp>

namespace rudder::nn {

// MDLM and SEDD diffuse with absorbing noise (the mask is the last id); UDLM (kuleshov-group/udlm-lm1b) and DUO
// (s-sahoo/duo) with uniform noise, on the same network, log-linear: no mask, their output is the clean token.
// BD3-LM (kuleshov-group/bd3lm-owt-block_size4, ...) is MDLM's network with block-causal attention: a position sees
// its own block and the blocks before it, so a block is predicted from the finished ones (block diffusion).
enum class DitFlavor { mdlm, sedd, udlm, duo, bd3lm };
const char* dit_flavor_name(DitFlavor flavor);  // "MDLM", "SEDD", "UDLM", "DUO", "BD3-LM"

struct DitConfig {
    DitFlavor flavor = DitFlavor::mdlm;
    int64_t vocab_size = 0;  // absorbing: including the mask token, which is the last id
    int64_t hidden_size = 0;
    int64_t cond_dim = 0;
    int64_t n_blocks = 0;
    int64_t n_heads = 0;
    int64_t max_length = 0;          // MDLM's model_length, SEDD's model.length
    bool time_conditioning = false;  // MDLM: from the config; SEDD: always
    bool scale_by_sigma = false;     // SEDD only: the log score is offset by log(e^sigma - 1) + log(V - 1)
    double schedule_eps = 1e-3;      // the log-linear schedule's eps: sigma(t) = -log(1 - (1 - eps) t)
    int64_t block_size = 0;          // BD3-LM: attention is block-causal over blocks of this many positions; 0: none

    bool uniform() const { return flavor == DitFlavor::udlm || flavor == DitFlavor::duo; }
    int64_t mask_id() const { return uniform() ? -1 : vocab_size - 1; }  // -1: none (uniform noise)
    std::string tensor_prefix() const { return flavor == DitFlavor::sedd ? "" : "backbone."; }
};

// Whether a config.json is one of these checkpoints' ("model_type" "mdlm", "bd3lm", "udlm" or "duo"; SEDD: a "model"
// object of "type" "ddit" beside "graph" and "tokens") rather than a Rudder model directory's.
bool is_dit_checkpoint_config(const nlohmann::json& config);

// Reads the fields the network depends on. A field this reader does not know, a missing or mistyped one, and a
// value it cannot run (SEDD's uniform graph, a non-log-linear noise) are a ModelError naming `file` and the field.
DitConfig parse_dit_config(const nlohmann::json& config, const std::filesystem::path& file);

// The network's tensors, under the names of the comment above (without the prefix): held by DitNetwork, and by the
// trainable DiT (nn/dit_trainable.hpp) as views of its parameters, so that both run one forward pass.
struct DitWeights {
    struct Block {
        at::Tensor norm1, qkv, attn_out, norm2, mlp_in_w, mlp_in_b, mlp_out_w, mlp_out_b, ada_w, ada_b;
    };
    at::Tensor embedding, sigma_in_w, sigma_in_b, sigma_out_w, sigma_out_b;
    std::vector<Block> blocks;
    at::Tensor final_norm, final_ada_w, final_ada_b, head_w, head_b;
};

// The rotated keys and the values of a run of positions, one [B, heads, positions, head_dim] tensor per network
// block: BD3-LM's key/value cache of finished blocks (bd3lms' sample_mode with its cache).
struct DitKeyValues {
    std::vector<at::Tensor> keys, values;
};

class DitNetwork {
public:
    // Loads `dir`: config.json, then model.safetensors or, failing that, model.safetensors.index.json and its
    // shards. Every tensor must be present with its shape (float32, float16 or bfloat16; held as float32), and
    // nothing else may be in the files. Throws ModelError (SafeTensorsError for the weights) naming the file.
    static DitNetwork load(const std::filesystem::path& dir);

    const DitConfig& config() const { return config_; }
    void to(const at::Device& device);

    // The network's raw output [B, L, V] for tokens int64 [B, L] and noise levels sigma float [B] (MDLM without
    // time conditioning ignores sigma, as its code does).
    at::Tensor forward(const at::Tensor& tokens, const at::Tensor& sigma) const;
    // BD3-LM's cached forward: the raw output [B, S, V] for `tokens` [B, S] at positions start .. start + S - 1,
    // attending to `past`, the keys and values of positions 0 .. start - 1 (null or empty when start is 0). Under
    // block-causal attention a block never sees later ones, so without time conditioning a finished block's keys and
    // values never change: the output equals forward()'s over the whole sequence at those positions. `present`, when
    // given, receives the segment's own keys and values. `start` must be a multiple of block_size (0 for the other
    // flavors).
    at::Tensor forward_segment(const at::Tensor& tokens, int64_t start, const at::Tensor& sigma,
                               const DitKeyValues* past, DitKeyValues* present) const;
    // SEDD's log score [B, L, V] as its SEDD.forward returns it (scale_by_sigma offset, 0 at each input token).
    at::Tensor sedd_log_score(const at::Tensor& tokens, const at::Tensor& sigma) const;
    // Log-probabilities [B, L, V] of the clean token. Absorbing noise, Rudder's discrete output: at a masked position
    // the log-softmax of the raw output over every token but the mask; at an unmasked position 0 at its own token;
    // impossible entries are kImpossibleLogProb. For MDLM this is SUBS; for SEDD's absorbing graph it is exact for
    // the true score (see the .cpp). Uniform noise (UDLM, DUO): the log-softmax of the raw output, x_theta, which
    // their sampler treats as the clean token given the other positions (docs/checkpoints.md).
    at::Tensor clean_log_probs(const at::Tensor& tokens, const at::Tensor& sigma) const;
    // SEDD: clean_log_probs and, from the same forward, the log of each position's total unmasking score,
    // log sum_{y != mask} s_y with s the score sedd_log_score gives ([B, L]; meaningful where masked). With the
    // clean-token log-probabilities it gives the score itself, s_y = p0(y) e^total, which SEDD's samplers read.
    std::pair<at::Tensor, at::Tensor> sedd_clean_log_probs_and_score_total(const at::Tensor& tokens,
                                                                           const at::Tensor& sigma) const;
    // The total noise the network is given at diffusion time t in (0, 1]: the log-linear schedule's.
    double sigma_at(double t) const;

private:
    DitConfig config_;
    DitWeights w_;
};

}  // namespace rudder::nn
