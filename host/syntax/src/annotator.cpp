#include <rudder/syntax/annotator.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include <rudder/nn/syntax_nets.hpp>
#include <rudder/text/chart.hpp>
#include <rudder/text/words.hpp>

#include "load_network.hpp"

namespace rudder::syntax {
namespace fs = std::filesystem;
using json = nlohmann::json;

void encode_tokens(const WordTokenizer& vocabulary, int64_t buckets, const std::vector<std::string>& tokens,
                   std::vector<int64_t>& ids, std::vector<int64_t>& features) {
    for (const auto& token : tokens) {
        ids.push_back(vocabulary.id(word_key(token)));
        const auto f = word_features(token, buckets);
        features.insert(features.end(), f.begin(), f.end());
    }
}

namespace {

// A batch of token sentences as the networks read them: word ids [B, L] and features [B, L, F].
std::pair<at::Tensor, at::Tensor> encode_batch(const WordTokenizer& vocabulary, int64_t buckets,
                                               const std::vector<std::vector<std::string>>& sentences, size_t begin,
                                               size_t end) {
    size_t longest = 1;
    for (size_t s = begin; s < end; ++s) longest = std::max(longest, sentences[s].size());
    const auto B = static_cast<int64_t>(end - begin), L = static_cast<int64_t>(longest);
    at::Tensor words = at::zeros({B, L}, at::kLong);
    at::Tensor features = at::zeros({B, L, kWordFeatures}, at::kLong);
    auto w = words.accessor<int64_t, 2>();
    auto f = features.accessor<int64_t, 3>();
    std::vector<int64_t> ids, feats;
    for (size_t s = begin; s < end; ++s) {
        if (sentences[s].empty()) throw std::invalid_argument("sentence " + std::to_string(s + 1) + " has no tokens");
        ids.clear();
        feats.clear();
        encode_tokens(vocabulary, buckets, sentences[s], ids, feats);
        const auto b = static_cast<int64_t>(s - begin);
        for (size_t t = 0; t < ids.size(); ++t) {
            w[b][static_cast<int64_t>(t)] = ids[t];
            for (int64_t k = 0; k < kWordFeatures; ++k)
                f[b][static_cast<int64_t>(t)][k] =
                    feats[t * static_cast<size_t>(kWordFeatures) + static_cast<size_t>(k)];
        }
    }
    return {words, features};
}

void check_batch_size(int64_t batch_size) {
    if (batch_size < 1) throw std::invalid_argument("batch_size must be >= 1, got " + std::to_string(batch_size));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

struct TaggerModel::Impl {
    LoadedModel<nn::TaggerNet> model;
};

TaggerModel::TaggerModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TaggerModel::~TaggerModel() = default;

std::shared_ptr<TaggerModel> TaggerModel::load(const fs::path& dir) {
    auto impl = std::make_unique<Impl>();
    impl->model = load_network_model<nn::TaggerNet>(dir, "tagger", "a part-of-speech tagger", Tokens::words);
    return std::shared_ptr<TaggerModel>(new TaggerModel(std::move(impl)));
}

bool TaggerModel::has_upos() const { return !impl_->model.network->upos().empty(); }
const fs::path& TaggerModel::dir() const { return impl_->model.dir; }

std::vector<TokenTags> TaggerModel::tag(const std::vector<std::vector<std::string>>& sentences,
                                        int64_t batch_size) const {
    check_batch_size(batch_size);
    auto& m = impl_->model;
    std::vector<TokenTags> out;
    out.reserve(sentences.size());
    for (size_t begin = 0; begin < sentences.size(); begin += static_cast<size_t>(batch_size)) {
        const size_t end = std::min(sentences.size(), begin + static_cast<size_t>(batch_size));
        const auto [words, features] = encode_batch(*m.vocabulary, m.buckets, sentences, begin, end);
        const auto [tag_logits, upos_logits] = m.network->logits(words, features);
        const at::Tensor best = tag_logits.argmax(-1).contiguous();
        const at::Tensor best_upos = upos_logits.defined() ? upos_logits.argmax(-1).contiguous() : best;
        const auto xpos_of = best.accessor<int64_t, 2>();
        const auto upos_of = best_upos.accessor<int64_t, 2>();
        for (size_t s = begin; s < end; ++s) {
            TokenTags t;
            const auto b = static_cast<int64_t>(s - begin);
            for (size_t k = 0; k < sentences[s].size(); ++k) {
                t.xpos.push_back(m.network->tags()[static_cast<size_t>(xpos_of[b][static_cast<int64_t>(k)])]);
                if (upos_logits.defined())
                    t.upos.push_back(m.network->upos()[static_cast<size_t>(upos_of[b][static_cast<int64_t>(k)])]);
            }
            out.push_back(std::move(t));
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------------------

struct ParserModel::Impl {
    LoadedModel<nn::ParserNet> model;
};

ParserModel::ParserModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ParserModel::~ParserModel() = default;

std::shared_ptr<ParserModel> ParserModel::load(const fs::path& dir) {
    auto impl = std::make_unique<Impl>();
    impl->model = load_network_model<nn::ParserNet>(dir, "parser", "a constituency parser", Tokens::words);
    return std::shared_ptr<ParserModel>(new ParserModel(std::move(impl)));
}

const fs::path& ParserModel::dir() const { return impl_->model.dir; }

std::vector<Tree> ParserModel::parse(const std::vector<std::vector<std::string>>& sentences,
                                     const std::vector<std::vector<std::string>>& tags, int64_t batch_size) const {
    check_batch_size(batch_size);
    if (tags.size() != sentences.size())
        throw std::invalid_argument("parse: " + std::to_string(sentences.size()) + " sentences but " +
                                    std::to_string(tags.size()) + " tag lists");
    auto& m = impl_->model;
    const auto& labels = m.network->labels();
    std::vector<Tree> out;
    out.reserve(sentences.size());
    for (size_t begin = 0; begin < sentences.size(); begin += static_cast<size_t>(batch_size)) {
        const size_t end = std::min(sentences.size(), begin + static_cast<size_t>(batch_size));
        const auto [words, features] = encode_batch(*m.vocabulary, m.buckets, sentences, begin, end);
        // Every span [i, j) of every sentence, as (b, i, j) rows.
        std::vector<int64_t> rows;
        for (size_t s = begin; s < end; ++s) {
            const auto n = static_cast<int64_t>(sentences[s].size());
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = i + 1; j <= n; ++j) rows.insert(rows.end(), {static_cast<int64_t>(s - begin), i, j});
        }
        const at::Tensor spans =
            at::from_blob(rows.data(), {static_cast<int64_t>(rows.size() / 3), 3}, at::kLong).clone();
        const at::Tensor log_probs = m.network->span_log_probs(words, features, spans);
        const auto [best_score, best_label] = log_probs.narrow(1, 1, log_probs.size(1) - 1).max(1);
        const at::Tensor empty = log_probs.select(1, 0).contiguous();
        const at::Tensor score = best_score.contiguous();
        const at::Tensor label = best_label.contiguous();
        const float* empty_p = empty.data_ptr<float>();
        const float* score_p = score.data_ptr<float>();
        const int64_t* label_p = label.data_ptr<int64_t>();
        size_t row = 0;
        for (size_t s = begin; s < end; ++s) {
            const auto n = static_cast<int64_t>(sentences[s].size());
            if (tags[s].size() != sentences[s].size())
                throw std::invalid_argument("parse: sentence " + std::to_string(s + 1) + " has " +
                                            std::to_string(sentences[s].size()) + " tokens but " +
                                            std::to_string(tags[s].size()) + " tags");
            SpanChart chart(n);
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t j = i + 1; j <= n; ++j, ++row) {
                    const auto at = static_cast<size_t>(chart.at(i, j));
                    // Log-odds against "no constituent": the log-likelihood of labelling every span of the sentence,
                    // with the spans outside the tree taken as no constituent, is a constant plus the sum of these
                    // over the tree's spans. (Raw log-probabilities would make every confident span score ~0, and
                    // CKY could not tell a tree of constituents from one of non-constituents.)
                    chart.label_score[at] = score_p[row] - empty_p[row];
                    chart.label[at] = label_p[row] + 1;
                    chart.empty_score[at] = 0.0f;
                }
            }
            std::vector<Span> found;
            for (const auto& span : decode_chart(chart))
                found.push_back({span.start, span.end, labels[static_cast<size_t>(span.label - 1)]});
            out.push_back(tree_from_spans(sentences[s], tags[s], found));
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------------------

Annotator::Annotator(std::shared_ptr<const TaggerModel> tagger, std::shared_ptr<const ParserModel> parser)
    : tagger_(std::move(tagger)), parser_(std::move(parser)) {
    if (!tagger_) throw std::invalid_argument("Annotator: a tagger is required");
}

std::vector<Annotation> Annotator::annotate(const std::vector<std::vector<std::string>>& sentences) const {
    std::vector<Segmentation> segmentations;
    std::vector<std::vector<std::string>> tokens;
    std::vector<size_t> index;  // non-empty sentences
    for (size_t s = 0; s < sentences.size(); ++s) {
        if (sentences[s].empty()) continue;
        segmentations.push_back(segment(sentences[s]));
        tokens.push_back(segmentations.back().tokens);
        index.push_back(s);
    }
    const std::vector<TokenTags> token_tags = tagger_->tag(tokens);
    std::vector<std::vector<std::string>> xpos;
    for (const auto& t : token_tags) xpos.push_back(t.xpos);
    std::vector<Tree> trees;
    if (parser_) trees = parser_->parse(tokens, xpos);
    std::vector<Annotation> out(sentences.size());
    for (size_t k = 0; k < index.size(); ++k) {
        Annotation& a = out[index[k]];
        a.words = sentences[index[k]];
        a.pos = project_tags(segmentations[k], xpos[k]);
        if (parser_) a.tree = project_tree(segmentations[k], trees[k], a.pos);
    }
    return out;
}

std::vector<Annotation> Annotator::annotate_texts(const std::vector<std::string>& texts) const {
    std::vector<std::vector<std::string>> sentences;
    sentences.reserve(texts.size());
    for (const auto& text : texts) sentences.push_back(WordTokenizer::split(text));
    return annotate(sentences);
}

}  // namespace rudder::syntax
