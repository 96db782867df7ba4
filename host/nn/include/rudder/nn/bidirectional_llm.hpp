// LLaDA (GSAI-ML/LLaDA-8B-Base, -Instruct, LLaDA-1.5) and Dream (Dream-org/Dream-v0-Base-7B, -Instruct-7B): masked
// diffusion language models that are LLaMA- and Qwen2-style transformers with bidirectional attention, loaded from
// their public checkpoints in Hugging Face layout (config.json + model.safetensors or model.safetensors.index.json
// and shards) and run in float32 (16-bit weights widened a slice at a time as they are used). docs/checkpoints.md
// says what loads and what is refused.
//
// The network, as the authors' code defines it (LLaDA's modeling_llada.py, an OLMo "llama" block; Dream's
// modeling_dream.py, Qwen2's layers), with H = hidden size, I = MLP width, h = heads, g = key/value heads,
// d = H / h, V = embedding rows, N layers; LLaDA's names first, Dream's after the slash:
//   x = wte[tokens] / embed_tokens[tokens]                                               [V, H]
//   per layer i (LLaDA: model.transformer.blocks.i.; Dream: model.layers.i.):
//     a = rms(x) * attn_norm / input_layernorm                                           [H]
//     q = a Wq (+ bq), k = a Wk (+ bk), v = a Wv (+ bv)   q_proj / self_attn.q_proj      [h d, H], [g d, H], [g d, H]
//         (biases: Dream always, LLaDA when include_qkv_bias)
//     q, k rotated (rotate-half form, base rope_theta over d); each key/value head serves h / g consecutive query
//     heads; softmax(q k^T / sqrt(d)) v over every position (no causal mask)
//     x = x + attended Wo                                  attn_out / self_attn.o_proj   [H, h d]
//     m = rms(x) * ff_norm / post_attention_layernorm                                    [H]
//     x = x + (silu(m Wgate) * (m Wup)) Wdown              ff_proj, up_proj, ff_out / mlp.gate_proj, up_proj,
//                                                          down_proj                     [I, H], [I, H], [H, I]
//   logits = (rms(x) * ln_f / norm) Wout                   model.transformer.ff_out / lm_head   [V, H]
//                                                          (the embedding when weight_tying / tie_word_embeddings)
//   rms(x) = x / sqrt(mean(x^2) + eps)
// Dream predicts each token at the position before it (it was adapted from an autoregressive model): the
// prediction for position i is the output at i - 1, and position 0 keeps its own.
// Neither model is conditioned on the noise level: the network sees only the tokens, the mask among them.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <rudder/nn/held_matrix.hpp>
#include <rudder/nn/model_files.hpp>

namespace rudder::nn {

enum class BidirectionalLlmFlavor { llada, dream };

struct BidirectionalLlmConfig {
    BidirectionalLlmFlavor flavor = BidirectionalLlmFlavor::llada;
    int64_t vocab_size = 0;  // embedding and output rows (LLaDA's embedding_size, Dream's vocab_size)
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t n_layers = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    int64_t max_length = 0;  // max_sequence_length / max_position_embeddings
    double rope_theta = 10000.0;
    double rms_eps = 1e-5;
    bool qkv_bias = false;
    bool tied_output = false;  // the output projection is the embedding
    int64_t mask_id = -1;
    int64_t pad_id = -1;  // -1: none; LLaDA and Dream pad with their end-of-text token
    int64_t eos_id = -1;

    bool shifted() const { return flavor == BidirectionalLlmFlavor::dream; }
    std::string name() const { return flavor == BidirectionalLlmFlavor::llada ? "LLaDA" : "Dream"; }
};

// Whether a config.json is LLaDA's ("model_type": "llada") or Dream's ("model_type": "Dream").
bool is_bidirectional_llm_config(const nlohmann::json& config);

// Reads the fields the network depends on. An unknown field, a missing or mistyped one, and a value this network
// does not run (another activation or block type, ALiBi, rope scaling, sliding windows, a mask id outside the
// vocabulary) are a ModelError naming `file` and the field.
BidirectionalLlmConfig parse_bidirectional_llm_config(const nlohmann::json& config, const std::filesystem::path& file);

// Fast-dLLM's approximate key/value caches (Wu et al. 2025): each layer's keys and values of every position, as a
// full forward left them (rotary applied, one per key/value head: [B, kv_heads, L, d]), reused by later forwards of a
// window of positions while the rest of the sequence is taken as unchanged.
struct KeyValueCache {
    std::vector<at::Tensor> keys, values;  // per layer
    int64_t length = 0;                    // positions held (0: empty)
};

class BidirectionalLlm {
public:
    // Loads `dir`: config.json, then model.safetensors or model.safetensors.index.json and its shards, mapped
    // (load_safetensors): every matrix is used where it lies in the mapped file, and one stored in float16 or bfloat16
    // is widened to float32 at each use (a slice of rows at a time, as fast as a matrix widened at load), so a 16 GB
    // bfloat16 checkpoint is held once, as the page cache's pages; the norms' and biases' vectors are widened once.
    // Every tensor must be present with its shape, and nothing else may be in the files. Throws ModelError naming the
    // file.
    static BidirectionalLlm load(const std::filesystem::path& dir);

    const BidirectionalLlmConfig& config() const { return config_; }
    // The dtype the embedding matrix is held in: the file's (a 16-bit matrix stays as stored, widened at each use),
    // int8 after quantize_int8.
    at::ScalarType embedding_dtype() const { return embedding_.values.scalar_type(); }
    void to(const at::Device& device);
    // Weight-only int8 quantisation: every matrix (the embedding, each layer's seven projections, the output) is
    // replaced by int8 with a float32 scale per row (quantize_rows_int8), about a quarter of float32's bytes and half
    // of bfloat16's; the norms and biases stay float32, and the products run in float32 over int8 slices widened as
    // they are used (linear_widening). Once: a second call changes nothing.
    void quantize_int8();

    // The logits [B, L, V] for tokens int64 [B, L], Dream's shifted to the position they predict. With `fill`, every
    // layer's keys and values are kept there.
    at::Tensor forward(const at::Tensor& tokens, KeyValueCache* fill = nullptr) const;
    // The logits [B, n, V] of positions [begin, begin + n) given their tokens `window` int64 [B, n], their queries
    // reading the keys and values `cache` holds for every other position (and their own, fresh): Fast-dLLM's prefix
    // cache when the window runs to the end of the sequence, its dual cache otherwise. Dream's shift stays within the
    // window, as Fast-dLLM's Dream code shifts it: the window's first row is its own position's output. The cache is
    // left as it was.
    at::Tensor forward_window(const at::Tensor& window, int64_t begin, const KeyValueCache& cache) const;
    // Log-probabilities [B, L, vocab] of the clean token over the first `vocab` ids (the tokenizer's; the rows past
    // it are padding no text uses): SUBS (nn::subs_log_probs). With `outside`, also the rows those leave out (the
    // mask's, then the ids from `vocab` on) on the same scale, [B, L, 1 + V - vocab], meaningful at masked positions:
    // log_softmax over the two together is the softmax over every row, as the authors' samplers take it. The output
    // layer runs on the masked positions' rows only: an unmasked position is certain of its token, and with
    // Dream's vocabulary of 151,936 the layer is a quarter of the network's work. With `fill`, as forward's.
    at::Tensor clean_log_probs(const at::Tensor& tokens, int64_t vocab, at::Tensor* outside = nullptr,
                               KeyValueCache* fill = nullptr) const;
    // clean_log_probs [B, n, vocab] of positions [begin, begin + n) as forward_window runs them.
    at::Tensor clean_log_probs_window(const at::Tensor& window, int64_t begin, const KeyValueCache& cache,
                                      int64_t vocab, at::Tensor* outside = nullptr) const;

private:
    // The layers and the final norm over positions [begin, begin + n) of a sequence of `length`: hidden states
    // [B, n, hidden]; keys and values of the other positions from `cache` (read), or every position's kept in `fill`.
    at::Tensor run(const at::Tensor& tokens, int64_t begin, int64_t length, const KeyValueCache* cache,
                   KeyValueCache* fill) const;
    // The output layer over hidden states: every row's logits, Dream's shifted to the position they predict.
    at::Tensor logits_of(const at::Tensor& hidden) const;
    void check_vocab(int64_t vocab) const;
    // `caller` names the public function in the error.
    void check_window(const char* caller, const at::Tensor& window, int64_t begin, const KeyValueCache& cache) const;
    // The output layer over `hidden` [B, n, hidden] of the same positions as `tokens`, at its masked positions only
    // (Dream's shifted: position p's from row p - 1, the first's from its own), and SUBS.
    at::Tensor masked_log_probs(const at::Tensor& hidden, const at::Tensor& tokens, int64_t vocab,
                                at::Tensor* outside) const;
    struct Layer {
        at::Tensor attn_norm, q_b, k_b, v_b, ff_norm;
        HeldMatrix q_w, k_w, v_w, o_w, gate_w, up_w, down_w;
    };
    BidirectionalLlmConfig config_;
    HeldMatrix embedding_, output_;
    at::Tensor final_norm_;
    std::vector<Layer> layers_;
};

}  // namespace rudder::nn
