#include <rudder/nn/syntax_nets.hpp>

#include <ATen/ATen.h>
#include <torch/nn/utils/rnn.h>

#include "dropout.hpp"
#include <rudder/nn/config_error.hpp>
#include <rudder/text/words.hpp>

namespace rudder::nn {
using json = nlohmann::json;

namespace {

EncoderConfig read_encoder_config(json_input::ObjectReader& r, int64_t vocab_size) {
    EncoderConfig c;
    c.sizes.vocab_size = vocab_size;
    c.sizes.word_dim = r.integer("word_dim", 1, 4096).value_or(64);
    c.sizes.feature_dim = r.integer("feature_dim", 1, 4096).value_or(32);
    c.sizes.buckets = r.integer("buckets", 2, int64_t{1} << 24).value_or(8192);
    c.sizes.hidden = r.integer("hidden", 1, 4096).value_or(128);
    c.sizes.layers = r.integer("layers", 1, 16).value_or(2);
    c.dropout = r.number("dropout", 0.0, 0.9).value_or(0.3);
    c.word_dropout = r.number("word_dropout", 0.0, 0.9).value_or(0.2);
    c.max_length = r.integer("max_length", 1, 4096, json_input::kRequired).value_or(1);
    if (r.has("vocab_size")) {
        const int64_t v = r.integer("vocab_size", 1, int64_t{1} << 31).value_or(vocab_size);
        if (v != vocab_size)
            r.issue("vocab_size", "the network was built for " + std::to_string(v) + " words but the vocabulary has " +
                                      std::to_string(vocab_size));
    }
    return c;
}

json encoder_json(const EncoderConfig& c) {
    return {{"word_dim", c.sizes.word_dim},   {"feature_dim", c.sizes.feature_dim}, {"buckets", c.sizes.buckets},
            {"hidden", c.sizes.hidden},       {"layers", c.sizes.layers},           {"dropout", c.dropout},
            {"word_dropout", c.word_dropout}, {"max_length", c.max_length},         {"vocab_size", c.sizes.vocab_size}};
}

}  // namespace

WordEncoder::WordEncoder(const Sizes& s, bool sentinels) : sentinels_(sentinels) {
    word_embedding_ = register_module("word_embedding", torch::nn::Embedding(s.vocab_size, s.word_dim));
    // Feature id 0 is padding: its row stays zero.
    feature_embedding_ =
        register_module("feature_embedding",
                        torch::nn::Embedding(torch::nn::EmbeddingOptions(s.buckets, s.feature_dim).padding_idx(0)));
    const int64_t input = s.word_dim + s.feature_dim;
    if (sentinels_) {
        start_ = register_parameter("start", at::randn({input}) * 0.1);
        end_ = register_parameter("end", at::randn({input}) * 0.1);
    }
    for (int64_t i = 0; i < s.layers; ++i)
        lstms_.push_back(register_module("lstm" + std::to_string(i),
                                         torch::nn::LSTM(torch::nn::LSTMOptions(i == 0 ? input : 2 * s.hidden, s.hidden)
                                                             .batch_first(true)
                                                             .bidirectional(true))));
}

at::Tensor WordEncoder::forward(const at::Tensor& words, const at::Tensor& features, double p, double word_dropout,
                                int64_t unk_id, at::Generator* gen) {
    TORCH_CHECK(words.dim() == 2 && features.dim() == 3 && features.size(0) == words.size(0) &&
                    features.size(1) == words.size(1) && features.size(2) == syntax::kWordFeatures,
                "WordEncoder: words [B, L] and features [B, L, ", syntax::kWordFeatures, "] expected");
    const at::Tensor present = words.ne(0);                   // [B, L]
    at::Tensor lengths = present.sum(1).to(at::kLong).cpu();  // [B]
    at::Tensor ids = words;
    if (gen && word_dropout > 0) {
        // Words replaced by <unk> teach the network to lean on the features for words it never saw.
        const at::Tensor drop =
            at::empty(words.sizes(), at::TensorOptions().dtype(at::kFloat)).bernoulli_(word_dropout, *gen);
        ids = at::where(drop.to(words.device()).to(at::kBool) & present, at::full_like(words, unk_id), words);
    }
    at::Tensor x = at::cat({word_embedding_->forward(ids), feature_embedding_->forward(features).sum(2)}, -1);
    const int64_t B = words.size(0), L = words.size(1);
    if (sentinels_) {
        const int64_t D = x.size(2);
        const at::Tensor zero = at::zeros({B, 1, D}, x.options());
        x = at::cat({start_.view({1, 1, D}).expand({B, 1, D}), x, zero}, 1);  // [B, L + 2, D]
        // The end vector at position length + 1 of each row.
        const at::Tensor positions = at::arange(L + 2, words.options()).unsqueeze(0);
        const at::Tensor is_end = positions.eq((lengths.to(words.device()) + 1).unsqueeze(1));
        x = x + is_end.unsqueeze(-1).to(x.scalar_type()) * end_.view({1, 1, D});
        lengths = lengths + 2;
    }
    const int64_t T = x.size(1);
    x = dropout(x, p, gen);
    for (size_t i = 0; i < lstms_.size(); ++i) {
        if (i > 0) x = dropout(x, p, gen);
        auto packed =
            torch::nn::utils::rnn::pack_padded_sequence(x, lengths, /*batch_first=*/true, /*enforce_sorted=*/false);
        auto out = std::get<0>(lstms_[i]->forward_with_packed_input(packed));
        x = std::get<0>(torch::nn::utils::rnn::pad_packed_sequence(out, /*batch_first=*/true, 0.0, T));
    }
    return dropout(x, p, gen);
}

// ---------------------------------------------------------------------------------------------------------------

TaggerNet::TaggerNet(const json& config, const Tokenizer& tokenizer) : unk_id_(tokenizer.unk_id()) {
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader r(config, "", issues);
    encoder_config_ = read_encoder_config(r, tokenizer.vocab_size());
    tags_ = r.texts("tags", json_input::kRequired).value_or(std::vector<std::string>{});
    upos_ = r.texts("upos").value_or(std::vector<std::string>{});
    if (r.has("tags") && tags_.empty() && issues.empty()) r.issue("tags", "expected at least one tag");
    r.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError("tagger network config", std::move(issues));
    encoder_ = register_module("encoder", std::make_shared<WordEncoder>(encoder_config_.sizes, false));
    tag_head_ = register_module(
        "tag_head", torch::nn::Linear(2 * encoder_config_.sizes.hidden, static_cast<int64_t>(tags_.size())));
    if (!upos_.empty())
        upos_head_ = register_module(
            "upos_head", torch::nn::Linear(2 * encoder_config_.sizes.hidden, static_cast<int64_t>(upos_.size())));
}

json TaggerNet::config() const {
    json j = encoder_json(encoder_config_);
    j["tags"] = tags_;
    j["upos"] = upos_;
    return j;
}

at::Tensor TaggerNet::loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor states = encoder_->forward(batch.tokens, batch.features, encoder_config_.dropout,
                                                encoder_config_.word_dropout, unk_id_, is_training() ? &gen : nullptr);
    const int64_t H = states.size(2);
    const at::Tensor flat = states.reshape({-1, H});
    at::Tensor loss = at::cross_entropy_loss(tag_head_->forward(flat), batch.targets.select(2, 0).reshape({-1}), {},
                                             at::Reduction::Mean, -1);
    if (upos_head_) {
        const at::Tensor upos_targets = batch.targets.select(2, 1).reshape({-1});
        // A batch without universal tags (bracketed trees) would give NaN.
        if (upos_targets.ge(0).any().item<bool>())
            loss = loss + at::cross_entropy_loss(upos_head_->forward(flat), upos_targets, {}, at::Reduction::Mean, -1);
    }
    return loss;
}

std::pair<at::Tensor, at::Tensor> TaggerNet::logits(const at::Tensor& words, const at::Tensor& features) {
    at::NoGradGuard no_grad;
    const at::Tensor states = encoder_->forward(words, features, 0.0, 0.0, unk_id_, nullptr);
    return {tag_head_->forward(states), upos_head_ ? upos_head_->forward(states) : at::Tensor()};
}

// ---------------------------------------------------------------------------------------------------------------

ParserNet::ParserNet(const json& config, const Tokenizer& tokenizer) : unk_id_(tokenizer.unk_id()) {
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader r(config, "", issues);
    encoder_config_ = read_encoder_config(r, tokenizer.vocab_size());
    span_hidden_ = r.integer("span_hidden", 1, 8192).value_or(192);
    labels_ = r.texts("labels", json_input::kRequired).value_or(std::vector<std::string>{});
    if (r.has("labels") && labels_.empty() && issues.empty()) r.issue("labels", "expected at least one label");
    r.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError("parser network config", std::move(issues));
    encoder_ = register_module("encoder", std::make_shared<WordEncoder>(encoder_config_.sizes, true));
    const int64_t H = encoder_config_.sizes.hidden;
    from_forward_ =
        register_module("from_forward", torch::nn::Linear(torch::nn::LinearOptions(H, span_hidden_).bias(false)));
    from_backward_ = register_module("from_backward", torch::nn::Linear(H, span_hidden_));
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({span_hidden_})));
    output_ = register_module("output", torch::nn::Linear(span_hidden_, static_cast<int64_t>(labels_.size()) + 1));
}

json ParserNet::config() const {
    json j = encoder_json(encoder_config_);
    j["span_hidden"] = span_hidden_;
    j["labels"] = labels_;
    return j;
}

at::Tensor ParserNet::span_logits(const at::Tensor& words, const at::Tensor& features, const at::Tensor& spans,
                                  at::Generator* gen) {
    const at::Tensor states = encoder_->forward(words, features, encoder_config_.dropout, encoder_config_.word_dropout,
                                                unk_id_, gen);  // [B, L + 2, 2H]
    const int64_t B = words.size(0), L = words.size(1), H = encoder_config_.sizes.hidden;
    // Fencepost k (before word k, 0 <= k <= L): the forward state at position k (which has read the start
    // sentinel and words 0..k-1) and the backward state at position k + 1 (words k.. and the end sentinel).
    const at::Tensor forward_states = states.narrow(2, 0, H).narrow(1, 0, L + 1);
    const at::Tensor backward_states = states.narrow(2, H, H).narrow(1, 1, L + 1);
    // The first layer is linear in the span's two fenceposts, so it is applied per fencepost, then combined.
    const at::Tensor f = from_forward_->forward(forward_states).reshape({B * (L + 1), span_hidden_});
    const at::Tensor b = from_backward_->forward(backward_states).reshape({B * (L + 1), span_hidden_});
    const at::Tensor row = spans.select(1, 0) * (L + 1);
    const at::Tensor i = row + spans.select(1, 1), j = row + spans.select(1, 2);
    at::Tensor h = f.index_select(0, j) - f.index_select(0, i) + b.index_select(0, i) - b.index_select(0, j);
    h = at::relu(norm_->forward(h));
    return output_->forward(dropout(h, encoder_config_.dropout, gen));
}

at::Tensor ParserNet::loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor targets = batch.targets;          // [B, L + 1, L + 1]
    const at::Tensor spans = targets.ge(0).nonzero();  // [N, 3]: (b, i, j)
    const int64_t width = targets.size(1);
    const at::Tensor cell = (spans.select(1, 0) * width + spans.select(1, 1)) * width + spans.select(1, 2);
    const at::Tensor labels = targets.reshape({-1}).index_select(0, cell);
    const at::Tensor logits = span_logits(batch.tokens, batch.features, spans, is_training() ? &gen : nullptr);
    return at::cross_entropy_loss(logits, labels);
}

at::Tensor ParserNet::span_log_probs(const at::Tensor& words, const at::Tensor& features, const at::Tensor& spans) {
    at::NoGradGuard no_grad;
    return at::log_softmax(span_logits(words, features, spans, nullptr), -1);
}

}  // namespace rudder::nn
