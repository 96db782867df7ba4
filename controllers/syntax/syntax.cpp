// The classifier-guided controllers. The syntax controllers are guided by a noisy syntax classifier and judged by
// the bundled tagger and parser:
//   pos          a target part-of-speech sequence (one PTB tag per word; it also fixes the length);
//   syntax_span  words [start, end) form a constituent with a given label;
//   syntax_tree  a target constituency tree in bracket notation (its words' count fixes the length).
// sentiment is guided by a noisy attribute classifier and judged by a separate clean-text classifier:
//   sentiment    the text's polarity, "positive" or "negative" (E2E's customer rating).
// Guidance: log p(target | x_t) from the classifier trained on the run's model (`rudder train-controller`), as a
// gradient on the latent in the GUIDE phase (continuous) or on the one-hot tokens in the PREDICT phase
// (discrete; the host turns it into logit deltas). See docs/syntax.md and docs/recipes.md for the model
// lookup and the scores.
#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../common/params.hpp"
#include <rudder/syntax/annotator.hpp>
#include <rudder/syntax/classifier.hpp>
#include <rudder/text/tree.hpp>

namespace {

namespace fs = std::filesystem;
namespace rs = rudder::syntax;

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
    return out;
}

// What every classifier-guided controller shares: the noisy classifier (found for the run's model) and guidance
// in both families. Subclasses name their classifier, build the target once its classes are known, and judge.
class ClassifierControl : public rudder::Controller {
public:
    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        const bool continuous = run.family == RUDDER_FAMILY_CONTINUOUS;
        load_classifier(continuous);
        const rs::TextClassifier& c = *classifier_;
        const std::string what = std::string("the ") + classifier_kind();
        if (reads_text_) {
            begin_reading_text(run, what);
            return;
        }
        if (c.continuous() != continuous)
            throw rudder::Error(what + " '" + c.dir().string() + "' was trained for the " +
                                    (c.continuous() ? "continuous" : "discrete") + " family; this run is " +
                                    (continuous ? "continuous" : "discrete"),
                                RUDDER_ERR_INVALID_ARGUMENT);
        if (c.vocab_size() != run.vocab_size)
            throw rudder::Error(what + " '" + c.dir().string() + "' knows " + std::to_string(c.vocab_size()) +
                                " tokens; the run's model has " + std::to_string(run.vocab_size) +
                                " (it was trained for another model; one of another vocabulary reads the text with "
                                "\"input\": \"text\")");
        for (int64_t id = 0; id < run.vocab_size; ++id)
            if (run_.token_text(id) != c.token(id))
                throw rudder::Error(what + " '" + c.dir().string() +
                                    "' was trained for another vocabulary "
                                    "(token " +
                                    std::to_string(id) + " is '" + c.token(id) + "', the model's is '" +
                                    run_.token_text(id) +
                                    "'); a classifier of another vocabulary reads the text "
                                    "with \"input\": \"text\"");
        if (continuous) {
            const DLTensor* table = run_.embedding();
            if (table == nullptr || table->ndim != 2)
                throw rudder::Error("the host gives no embedding table; the continuous " +
                                    std::string(classifier_kind()) +
                                    " needs one to check that it matches the model (plugin ABI 1.1)");
            const double distance =
                c.embedding_distance(static_cast<const float*>(table->data), table->shape[0], table->shape[1]);
            if (!(distance <= 1e-5))
                throw rudder::Error(what + " '" + c.dir().string() +
                                    "' was trained on another embedding "
                                    "table than the run's model has (largest difference " +
                                    std::to_string(distance) +
                                    "); train it for this model with `rudder train-controller`");
        }
        if (run.seq_len > c.max_length())
            throw rudder::Error("the run has " + std::to_string(run.seq_len) + " positions; " + what +
                                " takes at most " + std::to_string(c.max_length()) + " (lower max_length)");
        target_ = build_target(c, run.seq_len);
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        const rudder_run_info& run = run_.info();
        if (run.family == RUDDER_FAMILY_CONTINUOUS) {
            if (step.phase != RUDDER_PHASE_GUIDE || out.grad == nullptr) return;
            float* log_prob = out.log_prob != nullptr ? static_cast<float*>(out.log_prob->data) : nullptr;
            classifier_->guide(step.latent->data, run.batch_size, run.seq_len, step.t, target_,
                               static_cast<float*>(out.grad->data), log_prob);
            out.written |= RUDDER_WROTE_GRAD | (log_prob != nullptr ? RUDDER_WROTE_LOG_PROB : 0u);
            return;
        }
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        const rudder::Rows rows(step, run);
        if (rows.size() == 0) return;
        // The denoiser's most likely tokens at each row, most likely first: the host's candidates where it offers
        // them (the delta goes to candidate_delta), else found here from x0 (the delta goes to logit_delta).
        rudder::Candidates candidates(step, out, top_k_);
        const int64_t k = std::min(top_k_, candidates.k());
        scores_.resize(static_cast<size_t>(rows.size() * k));
        // Each sequence's log p(c | x_t) as it stands, for a host that weighs particles by it: the gradient's pass
        // gives it; exact scoring runs one more classifier pass per sequence (against rows * k for the candidates).
        float* log_prob = out.log_prob != nullptr ? static_cast<float*>(out.log_prob->data) : nullptr;
        if (scoring_ == Scoring::exact) {
            score_exactly(step, rows, candidates, k);
            if (log_prob != nullptr)
                classify(static_cast<const int64_t*>(step.tokens->data), run.batch_size, step.t, log_prob);
        } else {
            score_by_gradient(step, rows, candidates, k, log_prob);
        }
        if (log_prob != nullptr) out.written |= RUDDER_WROTE_LOG_PROB;
        // Only differences within a row matter: shifted so that the lowest scored candidate gets 0, which every
        // other token gets too (never favoured over a candidate). The gradient's scores are relative to the current
        // token, which scores 0 and counts as one of them.
        for (int64_t r = 0; r < rows.size(); ++r) {
            const float* row = scores_.data() + r * k;
            float lowest = *std::min_element(row, row + k);
            if (scoring_ == Scoring::gradient) lowest = std::min(lowest, 0.0f);
            for (int64_t j = 0; j < k; ++j) candidates.set_delta(r, j, row[j] - lowest);
        }
    }

protected:
    // Reads the keys every classifier control takes: "classifier", "top_k", "scoring" and "input".
    void read_params(rudder::Params& p) {
        top_k_ = p->integer("top_k", 1, 1 << 24).value_or(top_k_);
        classifier_name_ = p->text("classifier").value_or("");
        const std::string input = p->text("input").value_or("tokens");
        if (input == "text")
            reads_text_ = true;
        else if (input != "tokens")
            p->issue("input", "expected \"tokens\" or \"text\", got \"" + input + "\"");
        // Read through the text, a classifier has no gradient with respect to the model's tokens: exact scoring.
        const std::string scoring = p->text("scoring").value_or(reads_text_ ? "exact" : "gradient");
        if (scoring == "exact")
            scoring_ = Scoring::exact;
        else if (scoring != "gradient")
            p->issue("scoring", "expected \"gradient\" or \"exact\", got \"" + scoring + "\"");
        else if (reads_text_)
            p->issue("scoring",
                     "\"input\": \"text\" scores the candidates exactly (the classifier reads the decoded "
                     "text, so it has no gradient with respect to the model's tokens); leave out "
                     "\"scoring\" or give \"exact\"");
    }

    virtual const char* classifier_kind() const = 0;  // for messages: "syntax classifier"
    virtual const char* classifier_type() const = 0;  // its config.json "type"
    virtual const char* classifier_suffix()
        const = 0;  // default "<model folder>-<suffix>"; examples/train/<suffix>-<family>.json
    virtual rs::ClassifierTarget build_target(const rs::TextClassifier& c, int64_t length) = 0;

private:
    // Discrete guidance scores each row's k most likely tokens v by log p(c | x with the row's position set to v),
    // up to a constant per row, into scores_ [rows, k]. FUDGE-like, only the denoiser's top candidates are scored:
    // the classifier is trusted near the denoiser's own predictions, and rare tokens stay out.
    //
    // "gradient" (Taylor): the first-order change g[v] - g[current] from one gradient of log p(c | x_t) with respect
    // to the one-hot tokens. One classifier pass (and its backward) per step, but the linear estimate is poor far
    // from the current input: without the cut it favours rare tokens whose embeddings align with the gradient.
    void score_by_gradient(const rudder_step& step, const rudder::Rows& rows, const rudder::Candidates& candidates,
                           int64_t k, float* log_prob) {
        const rudder_run_info& run = run_.info();
        const int64_t B = run.batch_size, L = run.seq_len, V = run.vocab_size;
        grad_.resize(static_cast<size_t>(B * L * V));
        classifier_->guide(step.tokens->data, B, L, step.t, target_, grad_.data(), log_prob);
        const auto* tokens = static_cast<const int64_t*>(step.tokens->data);
        for (int64_t r = 0; r < rows.size(); ++r) {
            const int64_t position = rows.flat(r);
            const float* g = grad_.data() + position * V;
            const float current = g[tokens[position]];
            for (int64_t j = 0; j < k; ++j) scores_[static_cast<size_t>(r * k + j)] = g[candidates.id(r, j)] - current;
        }
    }

    // "exact": log p(c | x) itself for each substitution (predictor guidance as Nisonoff et al. and Schiff et al.
    // describe it, one position at a time): rows * k classifier passes per step, batched, no backward. The
    // substituted sequences are states at t_next, the time the step goes to.
    void score_exactly(const rudder_step& step, const rudder::Rows& rows, const rudder::Candidates& candidates,
                       int64_t k) {
        const int64_t L = run_.info().seq_len;
        const auto* tokens = static_cast<const int64_t*>(step.tokens->data);
        const double t = step.t_next > 0 ? step.t_next : step.t;
        const int64_t total = rows.size() * k;
        // At most kExactBatch sequences per classifier call, so a step with many rows stays in bounded memory.
        constexpr int64_t kExactBatch = 512;
        for (int64_t first = 0; first < total; first += kExactBatch) {
            const int64_t n = std::min(kExactBatch, total - first);
            substituted_.resize(static_cast<size_t>(n * L));
            for (int64_t s = 0; s < n; ++s) {
                const int64_t r = (first + s) / k, j = (first + s) % k;
                int64_t* sequence = substituted_.data() + s * L;
                std::copy(tokens + rows.batch(r) * L, tokens + (rows.batch(r) + 1) * L, sequence);
                sequence[rows.position(r)] = candidates.id(r, j);
            }
            classify(substituted_.data(), n, t, scores_.data() + first);
        }
    }

    // log p(target | x) of n of the run's sequences [n, L] at time t, into log_prob [n]: the classifier on the run's
    // tokens, or on its own tokens of their text ("input": "text"; each at the time its masked share gives).
    void classify(const int64_t* sequences, int64_t n, double t, float* log_prob) {
        const int64_t L = run_.info().seq_len;
        if (!reader_) {
            classifier_->guide(sequences, n, L, t, target_, nullptr, log_prob);
            return;
        }
        const int64_t Lc = reader_->length();
        read_.resize(static_cast<size_t>(n * Lc));
        times_.resize(static_cast<size_t>(n));
        for (int64_t s = 0; s < n; ++s)
            times_[static_cast<size_t>(s)] =
                static_cast<float>(reader_->read(sequences + s * L, L, read_.data() + s * Lc));
        classifier_->guide(read_.data(), n, Lc, times_, target_, nullptr, log_prob);
    }

    // "input": "text": the classifier reads the run's decoded text in its own vocabulary (rs::TextReader), so a
    // classifier trained for one model guides another that masks tokens (a BPE MDLM guided by the word-level
    // classifiers, say). Its positions are its own words: targets are built at its length, not the run's.
    void begin_reading_text(const rudder_run_info& run, const std::string& what) {
        if (run.family == RUDDER_FAMILY_CONTINUOUS || run.mask_id < 0)
            throw rudder::Error(
                "\"input\": \"text\" reads the text of a model that masks tokens (the discrete "
                "family); this run is " +
                    std::string(run.family == RUDDER_FAMILY_CONTINUOUS ? "continuous" : "without a mask"),
                RUDDER_ERR_INVALID_ARGUMENT);
        auto pieces = run_.token_pieces();
        if (!pieces)
            throw rudder::Error(
                "the host gives no token pieces for the run's tokenizer (plugin ABI 1.3), so \"input\": "
                "\"text\" cannot read its text",
                RUDDER_ERR_UNSUPPORTED);
        try {  // the reader refuses a classifier not trained on masked tokens, naming it
            reader_ = std::make_unique<rs::TextReader>(classifier_, std::move(pieces->text),
                                                       std::move(pieces->kind_after), run.pad_id, run.mask_id);
        } catch (const std::invalid_argument& e) {
            throw rudder::Error(what + ", \"input\": \"text\": " + e.what(), RUDDER_ERR_INVALID_ARGUMENT);
        }
        target_ = build_target(*classifier_, reader_->length());
    }

    // The classifier named in params, else "<model folder>-<suffix>" next to the run's model (the bundled layout).
    void load_classifier(bool continuous) {
        std::string name = classifier_name_;
        if (name.empty()) {
            const std::string model = fs::path(run_.model_dir()).filename().string();
            if (model.empty())
                throw rudder::Error("the run's model is not a directory, so there is no default " +
                                    std::string(classifier_kind()) + "; give \"classifier\"");
            name = model + "-" + classifier_suffix();
        }
        std::string dir;
        try {
            dir = run_.find_model(name);
        } catch (const rudder::Error&) {
            throw rudder::Error(
                "no " + std::string(classifier_kind()) + " '" + name +
                    "' (train one for this model with `rudder train-controller`, a copy of examples/train/" +
                    classifier_suffix() + "-" + (continuous ? "continuous" : "discrete") +
                    ".json with its \"denoiser\" and \"out\" changed, or name it in \"classifier\"; one trained for "
                    "another vocabulary reads this model's text with \"input\": \"text\")",
                RUDDER_ERR_INVALID_ARGUMENT);
        }
        if (!classifier_ || classifier_->dir() != fs::path(dir))
            classifier_ = rs::TextClassifier::load(dir, classifier_type());
    }

    enum class Scoring { gradient, exact };
    std::string classifier_name_;
    int64_t top_k_ = 10;
    Scoring scoring_ = Scoring::gradient;
    std::vector<float> grad_;           // discrete, gradient: d log p(c) / d one-hot tokens [B, L, V]
    std::vector<float> scores_;         // discrete: the step's candidate scores [rows, k]
    std::vector<int64_t> substituted_;  // discrete, exact: a batch of substituted sequences [n, L]
    std::shared_ptr<rs::TextClassifier> classifier_;
    rs::ClassifierTarget target_;
    bool reads_text_ = false;
    std::unique_ptr<rs::TextReader> reader_;  // "input": "text"
    std::vector<int64_t> read_;               // "input": "text": the classifier's tokens of a batch [n, its length]
    std::vector<float> times_;                // and their times [n]
};

// The syntax controllers: classifier "<model>-syntax"; the bundled tagger (and parser, for spans and trees) judge.
class SyntaxControl : public ClassifierControl {
public:
    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        if (!annotator_) {
            auto tagger = rs::TaggerModel::load(run_.find_model(tagger_name_));
            auto parser = needs_parser() ? rs::ParserModel::load(run_.find_model(parser_name_)) : nullptr;
            annotator_ = std::make_unique<rs::Annotator>(tagger, parser);
        }
        const auto annotations = annotator_->annotate_texts({sample.text != nullptr ? sample.text : ""});
        judge(annotations.at(0), verdict);
    }

protected:
    // Reads the keys every syntax controller takes: "classifier", "top_k", "tagger" and "parser".
    void read_syntax_params(rudder::Params& p) {
        read_params(p);
        tagger_name_ = p->text("tagger").value_or("ewt-tagger");
        parser_name_ = p->text("parser").value_or("gum-parser");
    }
    const char* classifier_kind() const override { return "syntax classifier"; }
    const char* classifier_type() const override { return "syntax_classifier"; }
    const char* classifier_suffix() const override { return "syntax"; }
    virtual bool needs_parser() const { return true; }
    virtual void judge(const rs::Annotation& a, rudder_verdict& verdict) = 0;

    // Tag terms shared by the controllers that fix the length: words at 0..n-1 (any tag, or `tags` when given),
    // "no word" from n on.
    static void fix_length(rs::ClassifierTarget& target, const rs::TextClassifier& c, int64_t n, int64_t length) {
        if (n > length)
            throw rudder::Error("the target has " + std::to_string(n) + " words; the run has only " +
                                std::to_string(length) + " positions (raise max_length)");
        std::vector<int64_t> any_word;
        for (int64_t k = 1; k <= static_cast<int64_t>(c.tags().size()); ++k) any_word.push_back(k);
        target.tags.resize(static_cast<size_t>(length));
        for (int64_t i = 0; i < length; ++i) {
            auto& allowed = target.tags[static_cast<size_t>(i)];
            if (i >= n)
                allowed = {0};
            else if (allowed.empty())
                allowed = any_word;
        }
    }

private:
    std::string tagger_name_, parser_name_;
    std::unique_ptr<rs::Annotator> annotator_;
};

// pos: {"tags": ["DT", "NN", ...]} or {"tags": "DT NN ..."}.
class Pos final : public SyntaxControl {
public:
    Pos(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        read_syntax_params(p);
        const nlohmann::json* tags = p->any("tags", rudder::json_input::kRequired, "the target tags, one per word");
        if (tags != nullptr && tags->is_string()) {
            std::string word;
            for (char ch : tags->get<std::string>() + " ") {
                if (ch != ' ')
                    word += ch;
                else if (!word.empty())
                    tags_.push_back(std::move(word)), word.clear();
            }
        } else if (tags != nullptr && tags->is_array()) {
            for (size_t i = 0; i < tags->size(); ++i) {
                if (!(*tags)[i].is_string() || (*tags)[i].get<std::string>().empty())
                    p->issues().push_back(
                        {"/tags/" + std::to_string(i), "expected a tag such as \"NN\", got " + (*tags)[i].dump()});
                else
                    tags_.push_back((*tags)[i].get<std::string>());
            }
        } else if (tags != nullptr) {
            p->issue("tags", "expected an array of tags or one string of space-separated tags");
        }
        p.finish();
        if (tags_.empty()) throw rudder::Error("/tags: give at least one tag");
    }

private:
    rs::ClassifierTarget build_target(const rs::TextClassifier& c, int64_t length) override {
        rs::ClassifierTarget target;
        for (size_t i = 0; i < tags_.size(); ++i) {
            const int64_t k = c.tag_class(tags_[i]);
            if (k < 0)
                throw rudder::Error("/tags/" + std::to_string(i) + ": unknown tag '" + tags_[i] +
                                    "' (known: " + joined(c.tags()) + ")");
            target.tags.push_back({k});
        }
        fix_length(target, c, static_cast<int64_t>(tags_.size()), length);
        return target;
    }
    bool needs_parser() const override { return false; }
    // Score: share of positions whose tag matches, over the longer of the two sequences; satisfied when all do.
    void judge(const rs::Annotation& a, rudder_verdict& verdict) override {
        const size_t n = std::max(a.pos.size(), tags_.size());
        size_t hits = 0;
        for (size_t i = 0; i < std::min(a.pos.size(), tags_.size()); ++i) hits += a.pos[i] == tags_[i];
        verdict.score = n > 0 ? static_cast<double>(hits) / static_cast<double>(n) : 0.0;
        verdict.satisfied = hits == n ? 1 : 0;
    }

    std::vector<std::string> tags_;
};

// syntax_span: {"span": [start, end, "LABEL"]}, words start..end-1 (end exclusive).
class SyntaxSpan final : public SyntaxControl {
public:
    SyntaxSpan(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        read_syntax_params(p);
        const nlohmann::json* span = p->any("span", rudder::json_input::kRequired, "[start, end, \"LABEL\"]");
        if (span != nullptr && !(span->is_array() && span->size() == 3 && (*span)[0].is_number_integer() &&
                                 (*span)[1].is_number_integer() && (*span)[2].is_string()))
            p->issue("span", "expected [start, end, \"LABEL\"] (words start..end-1), e.g. [0, 3, \"NP\"]");
        p.finish();
        start_ = (*span)[0].get<int64_t>();
        end_ = (*span)[1].get<int64_t>();
        label_ = (*span)[2].get<std::string>();
        if (start_ < 0 || end_ <= start_)
            throw rudder::Error("/span: expected 0 <= start < end, got [" + std::to_string(start_) + ", " +
                                std::to_string(end_) + "]");
    }

private:
    rs::ClassifierTarget build_target(const rs::TextClassifier& c, int64_t length) override {
        if (end_ > length)
            throw rudder::Error("/span: ends at word " + std::to_string(end_) + ", past the run's " +
                                std::to_string(length) + " positions");
        rs::ClassifierTarget target;
        const auto classes = c.label_classes(label_);
        if (classes.empty())
            throw rudder::Error("/span/2: unknown constituent label '" + label_ + "' (known: " + joined(c.labels()) +
                                ")");
        target.spans.push_back({start_, end_, classes});
        // The span's words must exist: no "no word" class inside it.
        target.tags.resize(static_cast<size_t>(end_));
        for (int64_t i = start_; i < end_; ++i)
            for (int64_t k = 1; k <= static_cast<int64_t>(c.tags().size()); ++k)
                target.tags[static_cast<size_t>(i)].push_back(k);
        return target;
    }
    // Hit: the parse of the text has a constituent labelled LABEL over exactly those words.
    void judge(const rs::Annotation& a, rudder_verdict& verdict) override {
        bool hit = false;
        if (!a.words.empty())
            for (const auto& s : rs::labelled_spans(a.tree))
                hit = hit || (s.start == start_ && s.end == end_ && s.label == label_);
        verdict.satisfied = hit ? 1 : 0;
        verdict.score = hit ? 1.0 : 0.0;
    }

    int64_t start_ = 0, end_ = 0;
    std::string label_;
};

// syntax_tree: {"tree": "(S (NP ...) (VP ...))"}.
class SyntaxTree final : public SyntaxControl {
public:
    SyntaxTree(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        read_syntax_params(p);
        const auto text = p->text("tree", rudder::json_input::kRequired);
        p.finish();
        try {
            tree_ = rs::read_tree(*text, "/tree");
        } catch (const std::exception& e) {
            throw rudder::Error(e.what());
        }
        words_ = static_cast<int64_t>(rs::words(tree_).size());
    }

private:
    rs::ClassifierTarget build_target(const rs::TextClassifier& c, int64_t length) override {
        rs::ClassifierTarget target;
        fix_length(target, c, words_, length);
        // Every span of the text: the tree's chain label if it has that span, else "not a constituent".
        std::vector<std::vector<int64_t>> label_of(static_cast<size_t>(words_ * (words_ + 1)));
        for (const auto& span : rs::chain_spans(tree_)) {
            int64_t k = c.chain_class(span.label);
            std::vector<int64_t> classes =
                k > 0 ? std::vector<int64_t>{k} : c.label_classes(span.label.substr(0, span.label.find('+')));
            if (classes.empty())
                throw rudder::Error("/tree: unknown constituent label '" + span.label +
                                    "' (known: " + joined(c.labels()) + ")");
            label_of[static_cast<size_t>(span.start * (words_ + 1) + span.end)] = classes;
        }
        for (int64_t i = 0; i < words_; ++i)
            for (int64_t j = i + 1; j <= words_; ++j) {
                auto classes = label_of[static_cast<size_t>(i * (words_ + 1) + j)];
                target.spans.push_back({i, j, classes.empty() ? std::vector<int64_t>{0} : classes});
            }
        return target;
    }
    // Score: labelled bracket F1 against the tree by word position (rudder/text/tree.hpp span_score); satisfied when
    // every bracket matches.
    void judge(const rs::Annotation& a, rudder_verdict& verdict) override {
        if (a.words.empty()) {
            verdict.satisfied = 0;
            verdict.score = 0.0;
            return;
        }
        const rs::BracketScore score = rs::span_score(tree_, a.tree);
        verdict.score = score.f1();
        verdict.satisfied = score.exact;
    }

    rs::Tree tree_;
    int64_t words_ = 0;
};

// sentiment: {"polarity": "positive"}. Guided by the attribute classifier "<model>-sentiment" towards that class;
// judged by a separate classifier trained on clean text ("judge", default e2e-sentiment-judge), which sees the
// text only, so it judges any model's output.
class Sentiment final : public ClassifierControl {
public:
    Sentiment(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        read_params(p);
        polarity_ = p->text("polarity", rudder::json_input::kRequired).value_or("");
        judge_name_ = p->text("judge").value_or("e2e-sentiment-judge");
        p.finish();
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        if (!judge_) {
            judge_ = rs::TextClassifier::load(run_.find_model(judge_name_), "attribute_classifier");
            judge_class_ = class_of(*judge_, "/judge");
        }
        const std::vector<double> logp = judge_->class_log_probs(sample.text != nullptr ? sample.text : "");
        const auto best = std::max_element(logp.begin(), logp.end()) - logp.begin();
        verdict.score = std::exp(logp[static_cast<size_t>(judge_class_)]);
        verdict.satisfied = best == judge_class_ ? 1 : 0;
    }

private:
    const char* classifier_kind() const override { return "sentiment classifier"; }
    const char* classifier_type() const override { return "attribute_classifier"; }
    const char* classifier_suffix() const override { return "sentiment"; }
    rs::ClassifierTarget build_target(const rs::TextClassifier& c, int64_t) override {
        rs::ClassifierTarget target;
        target.classes = {class_of(c, "/polarity")};
        return target;
    }
    int64_t class_of(const rs::TextClassifier& c, const char* where) const {
        const int64_t k = c.class_index(polarity_);
        if (k < 0)
            throw rudder::Error(std::string(where) + ": '" + c.dir().string() + "' has no class '" + polarity_ +
                                "' (its classes: " + joined(c.classes()) + ")");
        return k;
    }

    std::string polarity_, judge_name_;
    std::shared_ptr<rs::TextClassifier> judge_;
    int64_t judge_class_ = -1;
};

}  // namespace

// Discrete guidance reads and writes only the step's rows and their candidates (plugin ABI 1.2); x0 is read only
// where the host offers no candidates.
static constexpr uint64_t kDiscreteForms = RUDDER_CAP_ROWS | RUDDER_CAP_CANDIDATES;

// The keys every syntax controller takes, in each schema below.
#define SYNTAX_COMMON_KEYS                                                                                             \
    "\"classifier\": { \"type\": \"string\", \"description\": \"noisy syntax classifier: bundled name or path "        \
    "(default <model>-syntax)\" }, "                                                                                   \
    "\"tagger\": { \"type\": \"string\", \"description\": \"the tagger that judges (default ewt-tagger)\" }, "         \
    "\"parser\": { \"type\": \"string\", \"description\": \"the parser that judges (default gum-parser)\" }, "         \
    "\"top_k\": { \"type\": \"integer\", \"minimum\": 1, \"description\": \"discrete: guide among the denoiser's top " \
    "k tokens (default 10)\" }, "                                                                                      \
    "\"scoring\": { \"enum\": [\"gradient\", \"exact\"], \"description\": \"discrete: score the candidates by the "    \
    "classifier's gradient (default) or exactly, one classifier pass each (the default with input text)\" }, "         \
    "\"input\": { \"enum\": [\"tokens\", \"text\"], \"description\": \"what the classifier reads: the model's tokens " \
    "(default), or its text in the classifier's own vocabulary (a classifier of another model that masks tokens; "     \
    "exact scoring)\" }"

static const char kPosSchema[] = R"({ "type": "object", "properties": {
    "tags": { "description": "target PTB tags, one per word: an array or one space-separated string" }, )" SYNTAX_COMMON_KEYS
                                 R"(}, "required": ["tags"], "additionalProperties": false })";
static const char kSpanSchema[] = R"({ "type": "object", "properties": {
    "span": { "type": "array", "description": "[start, end, LABEL]: words start..end-1 form a LABEL constituent" }, )" SYNTAX_COMMON_KEYS
                                  R"(}, "required": ["span"], "additionalProperties": false })";
static const char kTreeSchema[] = R"({ "type": "object", "properties": {
    "tree": { "type": "string", "description": "target constituency tree in bracket notation" }, )" SYNTAX_COMMON_KEYS
                                  R"(}, "required": ["tree"], "additionalProperties": false })";

RUDDER_CONTROLLER(pos_desc, Pos, "pos", "1.0.0", "a target part-of-speech sequence (noisy-classifier guidance)",
                  kPosSchema, RUDDER_CAP_GRADIENT | RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_EVALUATE | kDiscreteForms)
RUDDER_CONTROLLER(span_desc, SyntaxSpan, "syntax_span", "1.0.0",
                  "words [start, end) form a constituent with a given label (noisy-classifier guidance)", kSpanSchema,
                  RUDDER_CAP_GRADIENT | RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_EVALUATE | kDiscreteForms)
RUDDER_CONTROLLER(tree_desc, SyntaxTree, "syntax_tree", "1.0.0",
                  "a target constituency tree (noisy-classifier guidance)", kTreeSchema,
                  RUDDER_CAP_GRADIENT | RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_EVALUATE | kDiscreteForms)
static const char kSentimentSchema[] = R"schema({ "type": "object", "properties": {
    "polarity": { "type": "string", "description": "the target class: positive or negative" },
    "classifier": { "type": "string", "description": "noisy sentiment classifier: bundled name or path (default <model>-sentiment)" },
    "judge": { "type": "string", "description": "clean-text classifier that judges (default e2e-sentiment-judge)" },
    "top_k": { "type": "integer", "minimum": 1, "description": "discrete: guide among the denoiser's top k tokens (default 10)" },
    "scoring": { "enum": ["gradient", "exact"], "description": "discrete: score the candidates by the classifier's gradient (default) or exactly, one classifier pass each (the default with input text)" },
    "input": { "enum": ["tokens", "text"], "description": "what the classifier reads: the model's tokens (default), or its text in the classifier's own vocabulary (a classifier of another model that masks tokens; exact scoring)" }
  }, "required": ["polarity"], "additionalProperties": false })schema";

RUDDER_CONTROLLER(sentiment_desc, Sentiment, "sentiment", "1.0.0", "the text's polarity (noisy-classifier guidance)",
                  kSentimentSchema, RUDDER_CAP_GRADIENT | RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_EVALUATE | kDiscreteForms)
RUDDER_PLUGIN("rudder-syntax", &pos_desc, &span_desc, &tree_desc, &sentiment_desc)
