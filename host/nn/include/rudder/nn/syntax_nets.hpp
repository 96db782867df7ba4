// The annotation networks: a part-of-speech tagger and a span-based constituency parser, both on a small BiLSTM
// over word embeddings plus hashed prefix/suffix/shape features (rudder/text/words.hpp), so that unseen words such as
// restaurant names still get sensible representations. Trained by `rudder train` (kinds "tagger", "parser");
// used through rudder/syntax/annotator.hpp, which does not include this header.
#pragma once

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/rnn.h>

#include <memory>
#include <string>
#include <vector>

#include <rudder/nn/trainable.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {

// Words -> contextual states: word embedding (ids from a WordTokenizer over syntax::word_key forms) and the sum
// of the hashed feature embeddings, then `layers` bidirectional LSTM layers with dropout between them.
class WordEncoder : public torch::nn::Module {
public:
    struct Sizes {
        int64_t vocab_size, word_dim, buckets, feature_dim, hidden, layers;
    };
    WordEncoder(const Sizes& sizes, bool sentinels);

    // words [B, L] (0 = pad), features [B, L, F]. With sentinels, learned start and end vectors surround each
    // sentence and the result has L + 2 positions. Returns [B, L(+2), 2 * hidden] (zeros after each sentence).
    // `gen` non-null: training (word dropout to `unk_id` and dropout, drawn from gen).
    at::Tensor forward(const at::Tensor& words, const at::Tensor& features, double dropout, double word_dropout,
                       int64_t unk_id, at::Generator* gen);

private:
    bool sentinels_;
    torch::nn::Embedding word_embedding_{nullptr}, feature_embedding_{nullptr};
    at::Tensor start_, end_;
    std::vector<torch::nn::LSTM> lstms_;
};

// The encoder's settings in a network config; shared by both networks.
struct EncoderConfig {
    WordEncoder::Sizes sizes{};
    double dropout = 0.0, word_dropout = 0.0;
    int64_t max_length = 0;
};

// A PTB tagger with an optional universal-tag head. Config: word_dim (64), feature_dim (32), buckets (8192),
// hidden (128), layers (2), dropout (0.3), word_dropout (0.2), max_length, vocab_size (checked), tags (PTB tags,
// required), upos (universal tags; may be empty).
class TaggerNet final : public TrainableNetwork {
public:
    TaggerNet(const nlohmann::json& config, const Tokenizer& tokenizer);
    // Summed cross-entropy of the two heads over the batch's words (targets -1 are skipped).
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;
    nlohmann::json config() const override;

    // Logits of each head for a batch (eval mode, no graph): {[B, L, tags], [B, L, upos] or undefined}.
    std::pair<at::Tensor, at::Tensor> logits(const at::Tensor& words, const at::Tensor& features);

    const std::vector<std::string>& tags() const { return tags_; }
    const std::vector<std::string>& upos() const { return upos_; }

private:
    EncoderConfig encoder_config_;
    int64_t unk_id_;
    std::vector<std::string> tags_, upos_;
    std::shared_ptr<WordEncoder> encoder_;
    torch::nn::Linear tag_head_{nullptr}, upos_head_{nullptr};
};

// The span parser (Stern et al. 2017; Kitaev & Klein 2018's span scoring without self-attention): fencepost
// states from the BiLSTM, span [i, j) as [f_j - f_i ; b_i - b_j], an MLP to label scores, label 0 meaning "not a
// constituent". Trained with cross-entropy on every span (Gaddy et al. 2018 found this local loss as good as the
// margin loss); decoded with CKY (syntax/chart.hpp). Config: the encoder's keys, span_hidden (192), labels (the
// chain labels, e.g. "S+VP", required; 0 is implicit).
class ParserNet final : public TrainableNetwork {
public:
    ParserNet(const nlohmann::json& config, const Tokenizer& tokenizer);
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;
    nlohmann::json config() const override;

    // Log-probabilities of the labels of the spans (b, i, j) listed in `spans` [N, 3] (eval mode, no graph):
    // [N, labels + 1].
    at::Tensor span_log_probs(const at::Tensor& words, const at::Tensor& features, const at::Tensor& spans);

    const std::vector<std::string>& labels() const { return labels_; }  // label k + 1 is labels()[k]

private:
    at::Tensor span_logits(const at::Tensor& words, const at::Tensor& features, const at::Tensor& spans,
                           at::Generator* gen);

    EncoderConfig encoder_config_;
    int64_t unk_id_, span_hidden_;
    std::vector<std::string> labels_;
    std::shared_ptr<WordEncoder> encoder_;
    torch::nn::Linear from_forward_{nullptr}, from_backward_{nullptr}, output_{nullptr};
    torch::nn::LayerNorm norm_{nullptr};
};

}  // namespace rudder::nn
