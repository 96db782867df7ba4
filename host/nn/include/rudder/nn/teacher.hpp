// The teacher: a small causal transformer language model over the word tokenizer, trained on E2E references. It
// judges fluency (`rudder score` reports its perplexity on generated texts); it is not a diffusion model.
//
// Sequence layout: the model reads <pad> as the start symbol, then the text's tokens, and predicts each next token;
// the token after the text is the first <pad>, which stands for "end of text" and is predicted (and scored) like
// any other token. A text of n tokens thus costs n + 1 predictions, and max_length counts text tokens only.
#pragma once

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <vector>

#include <rudder/nn/trainable.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {

// One pre-LayerNorm transformer block with causal self-attention written as plain matmuls.
class CausalBlock : public torch::nn::Module {
public:
    CausalBlock(int64_t dim, int64_t heads, int64_t hidden);
    // x: [B, T, D]; `future`: bool [T, T], true where a position must not look (j > i). `gen` draws dropout masks
    // (nullptr: no dropout).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& future, double dropout, at::Generator* gen);

private:
    int64_t heads_;
    torch::nn::LayerNorm ln_attn_{nullptr}, ln_mlp_{nullptr};
    torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_in_{nullptr}, fc_out_{nullptr};
};

class TeacherLM final : public TrainableNetwork {
public:
    // `config` (config.json's "network"): dim, layers, heads, max_length, hidden (default 4 * dim), dropout
    // (default 0), vocab_size (optional; must equal the tokenizer's). Throws ConfigError with pointers
    // relative to that object.
    TeacherLM(const nlohmann::json& config, const Tokenizer& tokenizer);

    // Mean next-token cross-entropy over every predicted position of the batch (text tokens and end tokens).
    // Dropout masks come from `gen`. batch.condition is ignored: the teacher is unconditional.
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;
    nlohmann::json config() const override;

    // Per text, the summed negative log-likelihood (nats) of its tokens and its end token, without a graph.
    // tokens: int64 [B, L], L <= max_length, each row a text then pads. Returns float64 [B].
    at::Tensor text_nll(const at::Tensor& tokens);
    // Next-token logits [B, T, V] for `input` [B, T] (start symbol first), T <= max_length + 1.
    at::Tensor logits(const at::Tensor& input, at::Generator* gen = nullptr);

    int64_t max_length() const { return max_length_; }

private:
    // The final (normalised) states [B, T, D] for `input` [B, T].
    at::Tensor hidden(const at::Tensor& input, at::Generator* gen);
    // The NLL of every prediction that counts (each text's tokens and its end token) [N], and the row of the
    // batch each belongs to [N].
    std::pair<at::Tensor, at::Tensor> counted_nll(const at::Tensor& tokens, at::Generator* gen);

    int64_t dim_, layers_, heads_, hidden_, max_length_, vocab_size_, pad_id_;
    double dropout_;
    torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
    torch::nn::LayerNorm ln_final_{nullptr};
    std::vector<std::shared_ptr<CausalBlock>> blocks_;
};

}  // namespace rudder::nn
