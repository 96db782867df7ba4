#include <rudder/syntax/classifier.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <rudder/nn/text_classifier.hpp>

#include "load_network.hpp"

namespace rudder::syntax {

namespace {

int64_t checked_class(int64_t c, int64_t classes, const char* what) {
    if (c < 0 || c >= classes)
        throw std::invalid_argument(std::string(what) + " class " + std::to_string(c) + " is outside [0, " +
                                    std::to_string(classes) + ")");
    return c;
}

// Class k + 1 is names[k] (class 0 is "no word" / "not a constituent"); -1 if absent.
int64_t class_of(const std::vector<std::string>& names, const std::string& name) {
    const auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : static_cast<int64_t>(it - names.begin()) + 1;
}

}  // namespace

struct TextClassifier::Impl {
    LoadedModel<nn::TextClassifierNet> model;
};

TextClassifier::TextClassifier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextClassifier::~TextClassifier() = default;

std::shared_ptr<TextClassifier> TextClassifier::load(const std::filesystem::path& dir, const std::string& type) {
    auto impl = std::make_unique<Impl>();
    impl->model = load_network_model<nn::TextClassifierNet>(
        dir, type, type == "attribute_classifier" ? "an attribute classifier" : "a noisy syntax classifier",
        Tokens::any);
    // Guidance differentiates with respect to the input only.
    for (auto& p : impl->model.network->parameters()) p.set_requires_grad(false);
    return std::shared_ptr<TextClassifier>(new TextClassifier(std::move(impl)));
}

bool TextClassifier::continuous() const { return impl_->model.network->family() == Family::continuous; }
int64_t TextClassifier::vocab_size() const { return impl_->model.network->vocab_size(); }
int64_t TextClassifier::embed_dim() const { return continuous() ? impl_->model.network->embed_dim() : 0; }
int64_t TextClassifier::max_length() const { return impl_->model.network->max_length(); }
const std::string& TextClassifier::token(int64_t id) const { return impl_->model.tokenizer->token(id); }
const std::filesystem::path& TextClassifier::dir() const { return impl_->model.dir; }
const std::vector<std::string>& TextClassifier::tags() const { return impl_->model.network->tags(); }
const std::vector<std::string>& TextClassifier::labels() const { return impl_->model.network->labels(); }
const std::vector<std::string>& TextClassifier::classes() const { return impl_->model.network->classes(); }

int64_t TextClassifier::tag_class(const std::string& tag) const { return class_of(tags(), tag); }
int64_t TextClassifier::chain_class(const std::string& chain) const { return class_of(labels(), chain); }
int64_t TextClassifier::class_index(const std::string& name) const {
    const int64_t k = class_of(classes(), name);  // attribute classes have no "none" class 0
    return k < 0 ? -1 : k - 1;
}

bool TextClassifier::masks_tokens() const { return impl_->model.network->masks_tokens(); }
int64_t TextClassifier::mask_id() const { return impl_->model.network->mask_id(); }
int64_t TextClassifier::pad_id() const { return impl_->model.tokenizer->pad_id(); }
std::vector<int64_t> TextClassifier::encode(const std::string& text) const {
    return impl_->model.tokenizer->encode(text);
}

std::vector<int64_t> TextClassifier::label_classes(const std::string& label) const {
    std::vector<int64_t> out;
    const auto& names = labels();
    for (size_t k = 0; k < names.size(); ++k) {
        const std::string& chain = names[k];
        for (size_t start = 0; start <= chain.size();) {
            const size_t plus = std::min(chain.find('+', start), chain.size());
            if (chain.compare(start, plus - start, label) == 0 && plus - start == label.size()) {
                out.push_back(static_cast<int64_t>(k) + 1);
                break;
            }
            start = plus + 1;
        }
    }
    return out;
}

double TextClassifier::embedding_distance(const float* table, int64_t rows, int64_t cols) const {
    const at::Tensor& mine = impl_->model.network->noise_embedding();
    if (!continuous() || mine.size(0) != rows || mine.size(1) != cols) return std::numeric_limits<double>::infinity();
    const at::Tensor theirs = at::from_blob(const_cast<float*>(table), {rows, cols}, at::kFloat);
    return (mine - theirs).abs().max().item<double>();
}

std::vector<double> TextClassifier::class_log_probs(const std::string& text) {
    nn::TextClassifierNet& net = *impl_->model.network;
    const Tokenizer& tokenizer = *impl_->model.tokenizer;
    std::vector<int64_t> ids = tokenizer.encode(text);
    ids.resize(static_cast<size_t>(net.max_length()), tokenizer.pad_id());
    at::NoGradGuard no_grad;
    at::Tensor t;
    const at::Tensor x = net.clean_input(at::tensor(ids, at::kLong).unsqueeze(0), t);
    const at::Tensor logp = net.class_log_probs(net.hidden(x, t)).to(at::kDouble).contiguous();
    return std::vector<double>(logp.data_ptr<double>(), logp.data_ptr<double>() + logp.numel());
}

void TextClassifier::guide(const void* input, int64_t batch, int64_t length, double t, const ClassifierTarget& target,
                           float* grad, float* log_prob) {
    guide(input, batch, length, std::vector<float>(static_cast<size_t>(batch), static_cast<float>(t)), target, grad,
          log_prob);
}

void TextClassifier::guide(const void* input, int64_t batch, int64_t length, const std::vector<float>& times,
                           const ClassifierTarget& target, float* grad, float* log_prob) {
    nn::TextClassifierNet& net = *impl_->model.network;
    if (static_cast<int64_t>(times.size()) != batch)
        throw std::invalid_argument("guide: " + std::to_string(times.size()) + " times for " + std::to_string(batch) +
                                    " rows");
    if (length > net.max_length())
        throw std::invalid_argument("the run has " + std::to_string(length) + " positions; the syntax classifier in '" +
                                    dir().string() + "' was trained for at most " + std::to_string(net.max_length()));
    at::Tensor x;
    if (continuous()) {
        x = at::from_blob(const_cast<void*>(input), {batch, length, net.embed_dim()}, at::kFloat).clone();
    } else {
        // The gradient is taken with respect to one-hot tokens; the log-probabilities alone read the tokens: an
        // embedding lookup instead of a [B, L, V] one-hot matmul, which costs a large share of exact scoring's passes.
        const at::Tensor tokens = at::from_blob(const_cast<void*>(input), {batch, length}, at::kLong);
        x = grad != nullptr ? at::one_hot(tokens, net.vocab_size()).to(at::kFloat) : tokens;
    }
    // The sampling loop runs without autograd; the gradient needs it here, the log-probabilities alone do not.
    at::AutoGradMode grad_mode(grad != nullptr);
    if (grad != nullptr) x.set_requires_grad(true);
    const at::Tensor h = net.hidden(x, at::tensor(times, at::kFloat));

    // Each term: log of the probability mass on the allowed classes, a masked logsumexp.
    auto allowed_mass = [](const at::Tensor& logp, const at::Tensor& allowed) {
        return at::logsumexp(logp.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity()), -1);
    };
    at::Tensor total = at::zeros({batch});
    // The allowed-class masks are filled in plain memory, then wrapped: one ATen call per term would cost more
    // than the classifier's forward pass for a tree's hundreds of spans, on every guidance step.
    const auto tag_classes = static_cast<int64_t>(tags().size()) + 1;
    std::vector<int64_t> positions;
    std::vector<uint8_t> tag_allowed;
    for (size_t i = 0; i < target.tags.size() && static_cast<int64_t>(i) < length; ++i) {
        if (target.tags[i].empty()) continue;
        positions.push_back(static_cast<int64_t>(i));
        tag_allowed.resize(tag_allowed.size() + static_cast<size_t>(tag_classes), 0);
        uint8_t* row = tag_allowed.data() + tag_allowed.size() - static_cast<size_t>(tag_classes);
        for (int64_t c : target.tags[i]) row[checked_class(c, tag_classes, "tag")] = 1;
    }
    if (!positions.empty()) {
        const auto P = static_cast<int64_t>(positions.size());
        const at::Tensor allowed = at::from_blob(tag_allowed.data(), {1, P, tag_classes}, at::kByte).to(at::kBool);
        const at::Tensor logp = net.tag_log_probs(h).index_select(1, at::tensor(positions, at::kLong));  // [B, P, C]
        total = total + allowed_mass(logp, allowed).sum(1);
    }
    if (!target.spans.empty()) {
        const auto n = static_cast<int64_t>(target.spans.size());
        const auto label_classes = static_cast<int64_t>(labels().size()) + 1;
        std::vector<int64_t> starts, lasts;
        std::vector<uint8_t> span_allowed(static_cast<size_t>(n * label_classes), 0);
        for (int64_t k = 0; k < n; ++k) {
            const auto& span = target.spans[static_cast<size_t>(k)];
            if (span.start < 0 || span.end <= span.start || span.end > length)
                throw std::invalid_argument("span [" + std::to_string(span.start) + ", " + std::to_string(span.end) +
                                            ") does not fit the run's " + std::to_string(length) + " positions");
            starts.push_back(span.start);
            lasts.push_back(span.end - 1);
            for (int64_t c : span.classes)
                span_allowed[static_cast<size_t>(k * label_classes + checked_class(c, label_classes, "label"))] = 1;
        }
        const at::Tensor allowed = at::from_blob(span_allowed.data(), {1, n, label_classes}, at::kByte).to(at::kBool);
        const at::Tensor logp = net.span_log_probs(h, at::tensor(starts, at::kLong), at::tensor(lasts, at::kLong));
        total = total + allowed_mass(logp, allowed).sum(1);  // logp: [B, n, C]
    }
    if (!target.classes.empty()) {
        const auto n_classes = static_cast<int64_t>(classes().size());
        std::vector<uint8_t> class_allowed(static_cast<size_t>(n_classes), 0);
        for (int64_t c : target.classes)
            class_allowed[static_cast<size_t>(checked_class(c, n_classes, "attribute"))] = 1;
        const at::Tensor allowed = at::from_blob(class_allowed.data(), {1, n_classes}, at::kByte).to(at::kBool);
        total = total + allowed_mass(net.class_log_probs(h), allowed);
    }
    if (grad != nullptr) {
        total.sum().backward();
        const at::Tensor g = x.grad().contiguous();
        std::memcpy(grad, g.data_ptr<float>(), static_cast<size_t>(g.numel()) * sizeof(float));
    }
    if (log_prob != nullptr) {
        const at::Tensor lp = total.detach().contiguous();
        std::memcpy(log_prob, lp.data_ptr<float>(), static_cast<size_t>(batch) * sizeof(float));
    }
}

TextReader::TextReader(std::shared_ptr<TextClassifier> classifier, std::vector<std::vector<std::string>> pieces,
                       std::vector<int32_t> kind_after, int64_t end_id, int64_t mask_id)
    : classifier_(std::move(classifier)), pieces_(std::move(pieces)), kind_after_(std::move(kind_after)),
      end_id_(end_id), mask_id_(mask_id) {
    if (!classifier_->masks_tokens())
        throw std::invalid_argument("the classifier in '" + classifier_->dir().string() +
                                    "' was not trained on masked tokens (a discrete, absorbing denoiser's noise), so "
                                    "it cannot read another model's text as it is being unmasked");
    const size_t V = kind_after_.size();
    if (pieces_.empty() || V == 0) throw std::invalid_argument("the model gives no token pieces to read its text by");
    for (size_t k = 0; k < pieces_.size(); ++k)
        if (pieces_[k].size() != V)
            throw std::invalid_argument("token pieces of kind " + std::to_string(k) + ": " +
                                        std::to_string(pieces_[k].size()) + " for " + std::to_string(V) + " tokens");
    for (int32_t k : kind_after_)
        if (k < 0 || static_cast<size_t>(k) >= pieces_.size())
            throw std::invalid_argument("a token's kind after (" + std::to_string(k) + ") is not one of the " +
                                        std::to_string(pieces_.size()) + " kinds");
    // A piece may go on the word before it when it does not start with whitespace and is the same after every kind (a
    // decoder that puts its own space between words writes a word's piece differently after a word).
    may_continue_.assign(V, 0);
    for (size_t v = 0; v < V; ++v) {
        const std::string& piece = pieces_[0][v];
        bool same = true;
        for (size_t k = 1; k < pieces_.size(); ++k) same = same && pieces_[k][v] == piece;
        may_continue_[v] = same && !piece.empty() && std::isspace(static_cast<unsigned char>(piece[0])) == 0 ? 1 : 0;
    }
}

double TextReader::read(const int64_t* ids, int64_t n, int64_t* out) const {
    const int64_t length = this->length(), mask = classifier_->mask_id(), pad = classifier_->pad_id();
    const auto V = static_cast<int64_t>(kind_after_.size());
    int64_t written = 0;
    auto put = [&](int64_t id) {
        if (written < length) out[written++] = id;
    };
    std::string segment;  // clean text since the last mask or end token
    bool glued = false;   // the segment starts right after a masked token, with no space between
    bool after_mask = false;
    int32_t kind = 0;
    auto flush = [&] {
        if (!segment.empty()) {
            const std::vector<int64_t> words = classifier_->encode(segment);
            // The words of the segment's first chunk (up to whitespace) that the classifier's tokenizer would join to
            // a word before them belong to the masked word: as many as a letter put before the chunk removes.
            size_t skip = 0;
            if (glued) {
                const std::string chunk = segment.substr(0, segment.find_first_of(" \t\r\n"));
                const size_t alone = classifier_->encode(chunk).size(),
                             joined = classifier_->encode("x" + chunk).size();
                skip = std::min(words.size(), alone + 1 > joined ? alone + 1 - joined : 0);
            }
            for (size_t w = skip; w < words.size(); ++w) put(words[w]);
        }
        segment.clear();
        glued = false;
    };
    for (int64_t i = 0; i < n && written < length; ++i) {
        const int64_t id = ids[i];
        if (id == mask_id_ || id == end_id_) {
            flush();
            put(id == mask_id_ ? mask : pad);
            after_mask = id == mask_id_;
            kind = 0;
            continue;
        }
        if (id < 0 || id >= V)
            throw std::invalid_argument("token " + std::to_string(id) + " at position " + std::to_string(i) +
                                        " is outside the model's " + std::to_string(V) + " tokens");
        if (segment.empty() && after_mask) glued = may_continue_[static_cast<size_t>(id)] != 0;
        after_mask = false;
        segment += pieces_[static_cast<size_t>(kind)][static_cast<size_t>(id)];
        kind = kind_after_[static_cast<size_t>(id)];
    }
    flush();
    int64_t masked = 0;
    for (int64_t i = 0; i < written; ++i) masked += out[i] == mask;
    for (int64_t i = written; i < length; ++i) out[i] = pad;
    return std::max(nn::TextClassifierNet::kMinTime, static_cast<double>(masked) / static_cast<double>(length));
}

}  // namespace rudder::syntax
