#include <rudder/nn/teacher.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include <rudder/nn/config_error.hpp>

#include "dropout.hpp"

namespace rudder::nn {
using json = nlohmann::json;

CausalBlock::CausalBlock(int64_t dim, int64_t heads, int64_t hidden) : heads_(heads) {
    ln_attn_ = register_module("ln_attn", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
    proj_ = register_module("proj", torch::nn::Linear(dim, dim));
    ln_mlp_ = register_module("ln_mlp", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc_in_ = register_module("fc_in", torch::nn::Linear(dim, hidden));
    fc_out_ = register_module("fc_out", torch::nn::Linear(hidden, dim));
}

at::Tensor CausalBlock::forward(const at::Tensor& x, const at::Tensor& future, double p, at::Generator* gen) {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2), head_dim = D / heads_;
    // [B, T, 3D] -> three [B, H, T, Dh]
    const at::Tensor qkv =
        qkv_->forward(ln_attn_->forward(x)).view({B, T, 3, heads_, head_dim}).permute({2, 0, 3, 1, 4});
    const at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    const at::Tensor attention = dropout(at::softmax(scores, -1, at::kFloat), p, gen);
    const at::Tensor mixed = at::matmul(attention, v).transpose(1, 2).reshape({B, T, D});
    at::Tensor h = x + dropout(proj_->forward(mixed), p, gen);
    const at::Tensor mlp = fc_out_->forward(at::gelu(fc_in_->forward(ln_mlp_->forward(h))));
    return h + dropout(mlp, p, gen);
}

TeacherLM::TeacherLM(const json& config, const Tokenizer& tokenizer)
    : vocab_size_(tokenizer.vocab_size()), pad_id_(tokenizer.pad_id()) {
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader r(config, "", issues);
    dim_ = r.integer("dim", 8, 4096).value_or(128);
    layers_ = r.integer("layers", 1, 64).value_or(3);
    heads_ = r.integer("heads", 1, 64).value_or(4);
    hidden_ = r.integer("hidden", 1, 65536).value_or(4 * dim_);
    max_length_ = r.integer("max_length", 1, 4096, json_input::kRequired).value_or(1);
    dropout_ = r.number("dropout", 0.0, 0.9).value_or(0.0);
    if (r.has("vocab_size")) {
        const int64_t v = r.integer("vocab_size", 4, int64_t{1} << 31).value_or(vocab_size_);
        if (v != vocab_size_)
            r.issue("vocab_size", "the network was built for " + std::to_string(v) + " tokens but the tokenizer has " +
                                      std::to_string(vocab_size_));
    }
    if (dim_ % heads_ != 0)
        r.issue("heads",
                "dim (" + std::to_string(dim_) + ") must be a multiple of heads (" + std::to_string(heads_) + ")");
    r.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError("teacher network config", std::move(issues));

    token_embedding_ = register_module("token_embedding", torch::nn::Embedding(vocab_size_, dim_));
    // One position more than max_length: the start symbol sits before the text.
    position_embedding_ = register_module("position_embedding", torch::nn::Embedding(max_length_ + 1, dim_));
    for (int64_t i = 0; i < layers_; ++i)
        blocks_.push_back(
            register_module("block" + std::to_string(i), std::make_shared<CausalBlock>(dim_, heads_, hidden_)));
    ln_final_ = register_module("ln_final", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim_})));

    // GPT-2's initialisation: small normal weights, zero biases, and residual projections scaled down by depth so
    // the residual stream does not grow with the number of blocks. Draws from the default CPU generator.
    at::NoGradGuard no_grad;
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers_));
    for (const auto& item : named_parameters()) {
        const std::string& name = item.key();
        at::Tensor p = item.value();
        if (name.find("ln_") != std::string::npos) continue;  // LayerNorm: weight 1, bias 0 already
        if (p.dim() == 1) {
            p.zero_();
        } else {
            const bool residual = name.find("proj.") != std::string::npos || name.find("fc_out.") != std::string::npos;
            p.normal_(0.0, residual ? residual_std : 0.02);
        }
    }
}

json TeacherLM::config() const {
    return {{"dim", dim_},
            {"layers", layers_},
            {"heads", heads_},
            {"hidden", hidden_},
            {"max_length", max_length_},
            {"dropout", dropout_},
            {"vocab_size", vocab_size_}};
}

at::Tensor TeacherLM::hidden(const at::Tensor& input, at::Generator* gen) {
    const int64_t T = input.size(1);
    TORCH_CHECK(T >= 1 && T <= max_length_ + 1, "teacher input of ", T, " positions; at most ", max_length_ + 1);
    const double p = is_training() ? dropout_ : 0.0;
    at::Tensor x = token_embedding_->forward(input) + position_embedding_->weight.narrow(0, 0, T);
    x = dropout(x, p, gen);
    const at::Tensor future = at::ones({T, T}, input.options().dtype(at::kBool)).triu(1);
    for (const auto& block : blocks_) x = block->forward(x, future, p, gen);
    return ln_final_->forward(x);
}

at::Tensor TeacherLM::logits(const at::Tensor& input, at::Generator* gen) {
    // The output layer is the token embedding, transposed (tied weights).
    return at::matmul(hidden(input, gen), token_embedding_->weight.t());
}

std::pair<at::Tensor, at::Tensor> TeacherLM::counted_nll(const at::Tensor& tokens, at::Generator* gen) {
    TORCH_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong, "teacher tokens must be int64 [B, L]");
    TORCH_CHECK(tokens.size(1) <= max_length_, "teacher tokens of ", tokens.size(1),
                " positions; this teacher was built for max_length ", max_length_);
    const int64_t B = tokens.size(0);
    // A text ends at its first pad; everything after it is padding the loss never sees.
    const at::Tensor lengths = tokens.ne(pad_id_).to(at::kLong).cumprod(1).sum(1);  // [B]
    const int64_t longest = B ? lengths.max().item<int64_t>() : 0;
    // Only the columns some text needs: causal attention makes the result identical, and E2E texts are short.
    const at::Tensor text = tokens.narrow(1, 0, longest);
    const at::Tensor pad_column = at::full({B, 1}, pad_id_, tokens.options());
    const at::Tensor input = at::cat({pad_column, text}, 1);   // start symbol, then the text
    const at::Tensor target = at::cat({text, pad_column}, 1);  // the next token at every position; end = pad
    const at::Tensor positions = at::arange(longest + 1, tokens.options()).unsqueeze(0);
    const at::Tensor counted = positions.le(lengths.unsqueeze(1)).reshape(-1);  // through each text's end token
    const at::Tensor index = counted.nonzero().squeeze(1);
    // The output layer only where a prediction counts: about half the positions of a batch of E2E texts.
    const at::Tensor states = hidden(input, gen).reshape({B * (longest + 1), dim_}).index_select(0, index);
    const at::Tensor logp = at::log_softmax(at::matmul(states, token_embedding_->weight.t()), -1, at::kFloat);
    const at::Tensor nll = -logp.gather(1, target.reshape({-1, 1}).index_select(0, index)).squeeze(1);
    return {nll, at::div(index, longest + 1, "floor")};
}

at::Tensor TeacherLM::loss(const TrainingBatch& batch, at::Generator& gen) {
    return counted_nll(batch.tokens, &gen).first.mean();
}

at::Tensor TeacherLM::text_nll(const at::Tensor& tokens) {
    at::NoGradGuard no_grad;
    auto [nll, rows] = counted_nll(tokens, nullptr);
    return at::zeros({tokens.size(0)}, nll.options().dtype(at::kDouble)).index_add_(0, rows, nll.to(at::kDouble));
}

}  // namespace rudder::nn
