// The noisy text classifier as the classifier controllers use it (pos, syntax_span, syntax_tree, sentiment): load
// a model directory of type "syntax_classifier" or "attribute_classifier" (written by `rudder train-controller`),
// and compute log p(target | x_t) and its gradient with respect to the sampler's state. No LibTorch header here (the
// network is behind a pointer), so a controller including it compiles in seconds; it links rudder_syntax. Not
// thread-safe: one call at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace rudder::syntax {

// A syntax target in the classifier's classes. log p(target | x) is the sum of the terms below, each the log of
// the probability that the classifier puts on the allowed classes.
struct ClassifierTarget {
    // Position i's allowed tag classes (TextClassifier::tag_class; 0 = "no word here", i.e. the text ended);
    // an empty list leaves position i free. At most the run's length entries.
    std::vector<std::vector<int64_t>> tags;
    // Words [start, end) and the label classes allowed for them (TextClassifier::label_classes; 0 = "not a
    // constituent").
    struct Span {
        int64_t start = 0, end = 0;
        std::vector<int64_t> classes;
    };
    std::vector<Span> spans;
    // The text's allowed attribute classes (TextClassifier::class_index); empty leaves the class free.
    std::vector<int64_t> classes;
};

class TextClassifier {
public:
    // `type`: the config.json type expected, "syntax_classifier" or "attribute_classifier". Throws ModelError
    // naming the file and the problem.
    static std::shared_ptr<TextClassifier> load(const std::filesystem::path& dir,
                                                const std::string& type = "syntax_classifier");
    ~TextClassifier();

    bool continuous() const;     // which family's noise it was trained on
    int64_t vocab_size() const;  // the denoiser's vocabulary
    int64_t embed_dim() const;   // continuous: the latent width; 0 for discrete
    int64_t max_length() const;
    const std::string& token(int64_t id) const;  // the denoiser vocabulary it was trained with
    const std::filesystem::path& dir() const;
    const std::vector<std::string>& tags() const;     // class k + 1 is tags()[k]
    const std::vector<std::string>& labels() const;   // class k + 1 is labels()[k]: unary chains such as "S+VP"
    const std::vector<std::string>& classes() const;  // attribute class k is classes()[k]; empty without that head

    // The class of a PTB tag (joined tags such as "PRP+VBZ" included), -1 if the classifier never saw it.
    int64_t tag_class(const std::string& tag) const;
    // The classes of every chain label with `label` as one of its '+'-separated parts ("VP" -> "VP", "S+VP", ...).
    std::vector<int64_t> label_classes(const std::string& label) const;
    // The exact chain label's class (e.g. "S+VP"), -1 if unknown.
    int64_t chain_class(const std::string& chain) const;
    // The attribute class named `name`, -1 if unknown.
    int64_t class_index(const std::string& name) const;

    // Whether its noise masks tokens (a discrete, absorbing denoiser's; not a clean-text judge's): what a TextReader
    // needs, since it shows a word it cannot read yet as masked.
    bool masks_tokens() const;
    int64_t mask_id() const;
    int64_t pad_id() const;
    // A text in its own tokens (its tokenizer's encode: no padding, no cut).
    std::vector<int64_t> encode(const std::string& text) const;

    // The largest absolute difference between `table` [rows, cols] and the denoiser embedding the classifier was
    // trained with (continuous), or +inf if the shapes differ.
    double embedding_distance(const float* table, int64_t rows, int64_t cols) const;

    // The attribute classes' log-probabilities for a clean text, tokenized with the classifier's own vocabulary
    // (words it does not know become its unknown token) and padded, or cut, to max_length, at the smallest time
    // trained on: how a clean-text judge ("noise": false) classifies. Throws std::logic_error without that head.
    std::vector<double> class_log_probs(const std::string& text);

    // log p(target | input at time t) for each of the `batch` rows into log_prob (may be null), and its gradient
    // into grad (may be null). Continuous: input is the latent, float [batch, length, embed_dim], and grad has its
    // shape. Discrete: input is the tokens, int64 [batch, length] (mask id where masked), and grad is with respect
    // to their one-hot encoding, float [batch, length, vocab_size]. All CPU memory, row-major.
    void guide(const void* input, int64_t batch, int64_t length, double t, const ClassifierTarget& target, float* grad,
               float* log_prob);
    // The same with a time for each row (`times`: batch entries).
    void guide(const void* input, int64_t batch, int64_t length, const std::vector<float>& times,
               const ClassifierTarget& target, float* grad, float* log_prob);

private:
    struct Impl;
    explicit TextClassifier(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// How a classifier trained on one vocabulary reads sequences of a model with another (a word-level classifier on a
// BPE model, say): through their text. Each sequence is decoded piece by piece and encoded with the classifier's
// tokenizer; a masked token becomes one masked token of the classifier (a word it cannot read yet), and so does a
// word one of whose pieces is masked; every end token (the model's pad) becomes the classifier's pad. The time is
// the share of the classifier's positions that are masked, which is what its training noise (each position masked
// with probability about t) makes it. The text right after a masked token, up to whitespace, belongs to the masked
// word as far as the classifier's tokenizer would join it to a word before it ("-friendly" does, "." does not).
// Approximate where a masked token stood for a piece of the word before it, or for several words: the reader takes
// each masked token as one word.
class TextReader {
public:
    // `pieces` [kinds][vocab] and `kind_after` [vocab]: the model's tokens as pieces of its text (TokenPieces, or
    // rudder_run_info.token_pieces); `end_id`: its pad (where its text ends); `mask_id`: its mask. Throws
    // std::invalid_argument when the classifier's noise does not mask tokens or the pieces are inconsistent.
    TextReader(std::shared_ptr<TextClassifier> classifier, std::vector<std::vector<std::string>> pieces,
               std::vector<int32_t> kind_after, int64_t end_id, int64_t mask_id);

    TextClassifier& classifier() const { return *classifier_; }
    int64_t length() const { return classifier_->max_length(); }  // the classifier's tokens per sequence
    // Writes one sequence of the model's `n` ids as length() classifier tokens into `out` (cut, or padded with the
    // classifier's pad) and returns its time.
    double read(const int64_t* ids, int64_t n, int64_t* out) const;

private:
    std::shared_ptr<TextClassifier> classifier_;
    std::vector<std::vector<std::string>> pieces_;
    std::vector<int32_t> kind_after_;
    std::vector<uint8_t> may_continue_;  // [vocab]: its piece may go on the word before it (no space first)
    int64_t end_id_ = 0, mask_id_ = 0;
};

}  // namespace rudder::syntax
