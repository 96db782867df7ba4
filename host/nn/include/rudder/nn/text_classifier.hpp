// The noisy text classifier that guides the classifier controllers (pos, syntax_span, syntax_tree, sentiment):
// from a denoiser's noisy input at diffusion time t it predicts each position's part-of-speech tag and, for every
// span, its constituent label (the syntax heads), and/or one class for the whole text (the attribute head). Trained by
// `rudder train-controller` (kind "syntax_classifier") on E2E text annotated by the bundled tagger and parser, noised
// by the same process as the denoiser it guides, as Diffusion-LM trains its tree classifier. Used through
// rudder/syntax/classifier.hpp, which does not include this header.
//
// Input, per family:
//   continuous: x_t = sqrt(ab_k) E[w] + sqrt(1 - ab_k) eps, with the denoiser's own embedding table E (kept in the
//               weights as the buffer "noise_embedding", frozen) and schedule; the network sees x_t projected up.
//   discrete:   tokens masked with probability (1 - eps) t (the denoiser's log-linear schedule); the network
//               embeds them with its own table, and takes a one-hot (or soft) [B, L, V] input too, so the
//               gradient with respect to the one-hot tokens exists for guidance. A uniform-noise denoiser's
//               classifier ("graph": "uniform") sees its noise instead: each token redrawn uniformly with
//               probability 1 - exp(-sigma_bar(t)), geometric sigma_bar (nn::sample_transition).
// Both add a time embedding and run the denoiser's transformer trunk (nn/denoiser_net.hpp) without condition.
//
// Heads (syntax heads when "tags" is not empty, the attribute head when "classes" is not empty):
// tags [B, L, tags + 1], class 0 meaning "no word here" (the text ended), so a target also fixes the
// length; spans [B, L, L, labels + 1] for span (i, e) = words i..e inclusive, class 0 meaning "not a
// constituent", labels being the parser's unary-chain labels ("S+VP"); classes [B, classes] from the mean of the
// final states over all positions (the sampler's pads included, as it sees them). Loss: the sum of the heads'
// cross-entropies (every position's tag, every span inside the text, the text's class).
//
// "noise": false trains on clean text only (time 1e-3, nothing masked or noised): a clean-text judge, such as
// the one the sentiment controller evaluates with.
//
// Config ("network"): family, vocab_size, max_length and the family's noise (embed_dim and schedule, or
// mask_schedule) are filled in from the denoiser by the trainer; dim 128, layers 3, heads 4, ff_dim 512,
// span_hidden 128; tags and labels (kind syntax_classifier) or classes (kind attribute_classifier) are filled in
// from the training data.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/schedule.hpp>
#include <rudder/nn/trainable.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {

class TextClassifierNet final : public TrainableNetwork {
public:
    TextClassifierNet(const nlohmann::json& config, const Tokenizer& tokenizer);

    // The smallest time trained on (as the discrete denoiser's loss), and the only one "noise": false trains on.
    static constexpr double kMinTime = 1e-3;

    // batch.tokens [B, L] (clean); syntax heads: batch.tags [B, L] (tag + 1, 0 after the text), batch.targets
    // [B, L + 1, L + 1] (label of span [i, j): 0 none, -1 not a span of the text); attribute head: batch.classes [B].
    at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) override;
    nlohmann::json config() const override;

    Family family() const { return trunk_config_.family; }
    int64_t max_length() const { return trunk_config_.max_length; }
    int64_t vocab_size() const { return trunk_config_.vocab_size; }
    int64_t embed_dim() const { return trunk_config_.embed_dim; }
    const std::vector<std::string>& tags() const { return tags_; }        // class k + 1 is tags()[k]
    const std::vector<std::string>& labels() const { return labels_; }    // class k + 1 is labels()[k]
    const std::vector<std::string>& classes() const { return classes_; }  // attribute class k is classes()[k]
    bool has_syntax_heads() const { return !tags_.empty(); }
    // Whether its noise masks tokens (discrete, absorbing, "noise" on): then a masked position is its mask_id().
    bool masks_tokens() const { return family() == Family::discrete && noise_ && trunk_config_.graph != "uniform"; }
    int64_t mask_id() const { return trunk_config_.mask_id; }

    // The continuous denoiser's embedding table [V, D] that x_t is made from (the trainer copies it in).
    const at::Tensor& noise_embedding() const { return noise_embedding_; }
    void set_noise_embedding(const at::Tensor& table);

    // Final states [B, L, dim] at times t (float [B]). `input`: continuous float x_t [B, L, D]; discrete int64
    // tokens [B, L] (mask_id where masked) or float one-hot [B, L, V]. Differentiable with respect to `input`.
    at::Tensor hidden(const at::Tensor& input, const at::Tensor& t);
    at::Tensor tag_log_probs(const at::Tensor& hidden);   // [B, L, tags + 1]
    at::Tensor span_log_probs(const at::Tensor& hidden);  // [B, L, L, labels + 1]: every span (start, last)
    // Only the spans (starts[k], lasts[k]) (int64 [n]): [B, n, labels + 1]. Guidance needs a few of the L * L.
    at::Tensor span_log_probs(const at::Tensor& hidden, const at::Tensor& starts, const at::Tensor& lasts);
    at::Tensor class_log_probs(const at::Tensor& hidden);  // [B, classes]
    // The most likely class [B] of clean tokens [B, L], noised as in training (the dev accuracy).
    at::Tensor predict_classes(const at::Tensor& tokens, at::Generator& gen);
    // Clean tokens [B, L] as `hidden` takes them at the smallest time (set in `t`): what "noise": false trains
    // on, and how a clean-text judge reads a text.
    at::Tensor clean_input(const at::Tensor& tokens, at::Tensor& t);

private:
    at::Tensor noisy_input(const at::Tensor& tokens, at::Generator& gen, at::Tensor& t);
    at::Tensor label_spans(const at::Tensor& start_plus_end);  // [..., span_hidden] -> [..., labels + 1]

    DenoiserConfig trunk_config_;
    int64_t span_hidden_ = 128;
    std::vector<std::string> tags_, labels_, classes_;
    bool noise_ = true;
    GaussianSchedule schedule_;
    MaskSchedule mask_schedule_;
    UniformNoiseSchedule uniform_schedule_;  // discrete, "graph": "uniform"
    at::Tensor noise_embedding_;             // continuous: buffer [V, D]
    at::Tensor token_embedding_;             // discrete: [V, dim]
    torch::nn::Linear input_proj_{nullptr}, time_mlp1_{nullptr}, time_mlp2_{nullptr};
    std::shared_ptr<TransformerTrunk> trunk_;
    torch::nn::Linear tag_head_{nullptr}, span_start_{nullptr}, span_end_{nullptr}, span_head_{nullptr};
    torch::nn::Linear class_head_{nullptr};
};

}  // namespace rudder::nn
