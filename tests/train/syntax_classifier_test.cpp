// The noisy syntax classifier on micro models: `train-controller`'s kind trains one for each family from annotated
// text, writes a model directory that records its denoiser's noise, and the guidance facade
// (rudder/syntax/classifier.hpp) gives log p(target | x) whose gradient matches finite differences and which prefers
// the true target.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>

#include <rudder/nn/safetensors.hpp>
#include <rudder/plugins/loader.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/syntax/classifier.hpp>
#include <rudder/text/tokenizer.hpp>
#include <rudder/train/trainer.hpp>

#include "train_support.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;
using test::ScratchDir;

class TextClassifierTraining : public ::testing::Test {
protected:
    void SetUp() override { test::write_micro_csv(dir_.path() / "train.csv", test::micro_records()); }

    // A micro denoiser of `family`, trained for a few steps; "uniform" is the discrete family with uniform noise,
    // "cdcd" the continuous family trained as CDCD.
    std::filesystem::path train_denoiser(const std::string& family) {
        json j = test::micro_teacher_config(dir_.path(), 12);
        j["kind"] = family == "uniform" ? "discrete" : family == "cdcd" ? "continuous" : family;
        j["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
        if (family == "uniform") {
            j["network"]["objective"] = "score_entropy";
            j["network"]["graph"] = "uniform";
        }
        if (family == "continuous" || family == "cdcd") j["network"]["embed_dim"] = 8;
        if (family == "cdcd") {
            j["network"]["objective"] = "cdcd";
            j["network"]["schedule"] = {
                {"name", "cdcd"}, {"T", 50}, {"sigma_min", 0.2}, {"sigma_max", 20.0}, {"warp_bins", 10}};
        }
        j["max_condition_length"] = 24;
        j["out"] = (dir_.path() / ("denoiser-" + family)).string();
        train::train(train::parse_train_config(j, dir_.path()));
        return j["out"].get<std::string>();
    }

    // The micro texts "annotated" with a learnable pattern: tags by position parity, and a tree whose first two
    // words are an NP and the rest a VP.
    std::filesystem::path write_annotations(const std::filesystem::path& denoiser) {
        const WordTokenizer vocabulary = WordTokenizer::load((denoiser / "vocab.txt").string());
        const auto file = dir_.path() / "annotated.jsonl";
        std::ofstream out(file);
        for (const auto& r : test::micro_records()) {
            const auto ids = vocabulary.encode(r.ref);
            std::vector<std::string> words, tags;
            for (int64_t id : ids) words.push_back(vocabulary.token(id));
            for (size_t i = 0; i < words.size(); ++i) tags.push_back(i % 2 == 0 ? "NN" : "VBZ");
            std::string tree = "(S (NP";
            for (size_t i = 0; i < words.size(); ++i) {
                if (i == 2) tree += ") (VP";
                tree += " (" + tags[i] + " " + words[i] + ")";
            }
            tree += "))";
            out << json({{"text", r.ref}, {"words", words}, {"pos", tags}, {"tree", tree}}).dump() << "\n";
        }
        return file;
    }

    json classifier_config(const std::filesystem::path& denoiser, const std::filesystem::path& data,
                           const std::string& out) {
        json j = test::micro_teacher_config(dir_.path(), 40);
        j.erase("tokenizer");
        j["kind"] = "syntax_classifier";
        j["denoiser"] = denoiser.string();
        j["data"] = {{"train", data.string()}};
        j["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}, {"span_hidden", 8}};
        j["out"] = (dir_.path() / out).string();
        return j;
    }

    ScratchDir dir_;
};

TEST_F(TextClassifierTraining, TrainsForEachFamilyAndGuidesWithExactGradients) {
    // "uniform": a discrete classifier trained on its denoiser's uniform noise (each token redrawn), which it records.
    for (const std::string variant : {"continuous", "discrete", "uniform"}) {
        SCOPED_TRACE(variant);
        const std::string family = variant == "uniform" ? "discrete" : variant;
        const auto denoiser = train_denoiser(variant);
        const auto data = write_annotations(denoiser);
        const json config = classifier_config(denoiser, data, "classifier-" + variant);
        const auto result = train::train(train::parse_train_config(config, dir_.path()));
        ASSERT_TRUE(result.finished);

        const std::filesystem::path dir = config["out"].get<std::string>();
        std::ifstream in(dir / "config.json");
        const json written = json::parse(in);
        EXPECT_EQ(written["type"], "syntax_classifier");
        EXPECT_EQ(written["families"], json::array({family}));
        EXPECT_EQ(written["network"].value("graph", "absorb"), variant == "uniform" ? "uniform" : "absorb");
        EXPECT_EQ(written["network"]["tags"], json::array({"NN", "VBZ"}));
        EXPECT_EQ(written["network"]["labels"], json::array({"S", "NP", "VP"}));  // the top S is a span too

        auto classifier = syntax::TextClassifier::load(dir);
        EXPECT_EQ(classifier->continuous(), family == "continuous");
        EXPECT_EQ(classifier->tag_class("VBZ"), 2);
        EXPECT_EQ(classifier->tag_class("JJ"), -1);
        EXPECT_EQ(classifier->label_classes("VP"), std::vector<int64_t>({3}));

        const int64_t B = 2, L = 16, n = 6;
        // The true pattern against its opposite: NN VBZ NN ... for n words, then "no word"; spans NP over 0..1.
        auto target_of = [&](bool truth) {
            syntax::ClassifierTarget t;
            for (int64_t i = 0; i < L; ++i)
                t.tags.push_back(
                    {i >= n ? 0
                            : ((i % 2 == 0) == truth ? classifier->tag_class("NN") : classifier->tag_class("VBZ"))});
            t.spans.push_back({0, 2, truth ? classifier->label_classes("NP") : classifier->label_classes("VP")});
            return t;
        };
        std::vector<float> lp_true(B), lp_false(B);
        if (family == "continuous") {
            // Its noise is the denoiser's embedding table, kept exactly.
            const SafeTensors d = load_safetensors(denoiser / "model.safetensors");
            const at::Tensor table = d.find("embedding")->contiguous();
            EXPECT_EQ(classifier->embedding_distance(table.data_ptr<float>(), table.size(0), table.size(1)), 0.0);

            // Clean-ish latents of real texts at a small t: the classifier should prefer the true tags.
            const WordTokenizer vocabulary = WordTokenizer::load((denoiser / "vocab.txt").string());
            at::Tensor tokens = at::full({B, L}, vocabulary.pad_id(), at::kLong);
            for (int64_t b = 0; b < B; ++b) {
                const auto ids = vocabulary.encode(test::micro_records()[static_cast<size_t>(b)].ref);
                for (int64_t i = 0; i < n; ++i) tokens[b][i] = ids[static_cast<size_t>(i)];
            }
            at::Tensor latent = at::embedding(table, tokens).contiguous();
            std::vector<float> grad(static_cast<size_t>(B * L * 8));
            classifier->guide(latent.data_ptr<float>(), B, L, 0.05, target_of(true), grad.data(), lp_true.data());
            classifier->guide(latent.data_ptr<float>(), B, L, 0.05, target_of(false), nullptr, lp_false.data());

            // Central differences along a few coordinates agree with the gradient.
            std::mt19937 rng(3);
            for (int k = 0; k < 6; ++k) {
                const int64_t index = static_cast<int64_t>(rng() % static_cast<uint32_t>(B * L * 8));
                const double h = 1e-2;
                std::vector<float> up(B), down(B);
                at::Tensor x = latent.clone();
                x.view({-1})[index] += h;
                classifier->guide(x.data_ptr<float>(), B, L, 0.05, target_of(true), nullptr, up.data());
                x.view({-1})[index] -= 2 * h;
                classifier->guide(x.data_ptr<float>(), B, L, 0.05, target_of(true), nullptr, down.data());
                const int64_t row = index / (L * 8);
                const double numeric = (up[static_cast<size_t>(row)] - down[static_cast<size_t>(row)]) / (2 * h);
                EXPECT_NEAR(grad[static_cast<size_t>(index)], numeric, 2e-2 + 0.05 * std::abs(numeric))
                    << "coordinate " << index;
            }
        } else {
            at::Tensor tokens = at::full({B, L}, 0, at::kLong);  // pad everywhere ...
            const WordTokenizer vocabulary = WordTokenizer::load((denoiser / "vocab.txt").string());
            for (int64_t b = 0; b < B; ++b) {
                const auto ids = vocabulary.encode(test::micro_records()[static_cast<size_t>(b)].ref);
                for (int64_t i = 0; i < n; ++i) tokens[b][i] = ids[static_cast<size_t>(i)];
            }
            tokens[0][1] = vocabulary.mask_id();  // ... and a masked word
            std::vector<float> grad(static_cast<size_t>(B * L * classifier->vocab_size()));
            classifier->guide(tokens.data_ptr<int64_t>(), B, L, 0.1, target_of(true), grad.data(), lp_true.data());
            classifier->guide(tokens.data_ptr<int64_t>(), B, L, 0.1, target_of(false), nullptr, lp_false.data());
            float largest = 0;
            for (float g : grad) {
                ASSERT_TRUE(std::isfinite(g));
                largest = std::max(largest, std::abs(g));
            }
            EXPECT_GT(largest, 0.0f) << "the one-hot gradient is all zero";

            // Exact candidate scoring (the syntax controllers' "scoring": "exact") batches every substitution of a
            // position: the masked word set to each token of the vocabulary, scored in one call, is each scored alone.
            const int64_t V = classifier->vocab_size();
            at::Tensor substituted = tokens[0].unsqueeze(0).repeat({V, 1});
            substituted.select(1, 1).copy_(at::arange(V, at::kLong));
            std::vector<float> batched(static_cast<size_t>(V));
            classifier->guide(substituted.data_ptr<int64_t>(), V, L, 0.1, target_of(true), nullptr, batched.data());
            for (int64_t v = 0; v < V; ++v) {
                float alone = 0;
                classifier->guide(substituted[v].data_ptr<int64_t>(), 1, L, 0.1, target_of(true), nullptr, &alone);
                EXPECT_NEAR(batched[static_cast<size_t>(v)], alone, 1e-5f) << "token " << v;
            }
            EXPECT_GT(
                *std::max_element(batched.begin(), batched.end()) - *std::min_element(batched.begin(), batched.end()),
                1e-3f)
                << "every substitution scores the same";
        }
        for (int64_t b = 0; b < B; ++b) {
            EXPECT_LT(lp_true[static_cast<size_t>(b)], 0.0f);
            EXPECT_GT(lp_true[static_cast<size_t>(b)], lp_false[static_cast<size_t>(b)]) << "row " << b;
        }

        // A target that allows every class has probability one.
        syntax::ClassifierTarget everything;
        everything.tags.assign(L, {0, 1, 2});
        std::vector<float> lp_all(B);
        std::vector<int64_t> pads(B * L, 0);
        at::Tensor zeros = at::zeros({B, L, 8});
        classifier->guide(family == "continuous" ? static_cast<const void*>(zeros.data_ptr<float>()) : pads.data(), B,
                          L, 0.5, everything, nullptr, lp_all.data());
        for (float v : lp_all) EXPECT_NEAR(v, 0.0f, 1e-4f);
    }
}

// The run services the syntax controllers call: the denoiser's vocabulary, and model names taken as paths.
class VocabularyServices final : public plugins::RunServices {
public:
    explicit VocabularyServices(const std::filesystem::path& denoiser)
        : dir_(denoiser), vocabulary_(WordTokenizer::load((denoiser / "vocab.txt").string())) {
        for (int64_t id = 0; id < vocabulary_.vocab_size(); ++id) words_.push_back(vocabulary_.token(id));
    }
    const WordTokenizer& vocabulary() const { return vocabulary_; }
    std::vector<int64_t> tokenize(const std::string& text) override { return vocabulary_.encode(text); }
    std::string detokenize(const int64_t* ids, int64_t n) override { return vocabulary_.decode(ids, n); }
    const std::string* token_text(int64_t id) override {
        return id >= 0 && id < static_cast<int64_t>(words_.size()) ? &words_[static_cast<size_t>(id)] : nullptr;
    }
    at::Tensor denoise(const plugins::StepInputs&, const std::vector<std::string>&) override {
        throw std::logic_error("no conditioning here");
    }
    std::string model_dir() override { return dir_.string(); }
    std::string find_model(const std::string& name) override { return name; }

private:
    std::filesystem::path dir_;
    WordTokenizer vocabulary_;
    std::vector<std::string> words_;
};

// The pos controller of the syntax plugin, for a discrete run of B sequences of L positions over V tokens.
plugins::ControllerType pos_type() {
    for (auto& t : plugins::load_library(std::filesystem::path(RUDDER_TEST_SYNTAX_PLUGIN)))
        if (t.id() == "pos") return t;
    throw std::runtime_error("the syntax plugin has no pos controller");
}

plugins::RunShape discrete_shape(int64_t B, int64_t L, int64_t V, int64_t pad, int64_t mask, int64_t unk) {
    plugins::RunShape shape;
    shape.family = RUDDER_FAMILY_DISCRETE;
    shape.batch_size = B;
    shape.seq_len = L;
    shape.vocab_size = V;
    shape.pad_id = pad;
    shape.mask_id = mask;
    shape.unk_id = unk;
    shape.total_steps = 10;
    shape.candidates = static_cast<int32_t>(V);
    return shape;
}

// A PREDICT step from t 0.6 to 0.5 over `tokens` [B, L] whose rows are three masked positions, with made-up x0 scores
// over V tokens.
plugins::StepInputs predict_step(const at::Tensor& tokens, int64_t mask, int64_t V) {
    const int64_t B = tokens.size(0), L = tokens.size(1);
    plugins::StepInputs in;
    in.phase = RUDDER_PHASE_PREDICT;
    in.step = 4;
    in.total_steps = 10;
    in.t = 0.6;
    in.t_next = 0.5;
    in.tokens = tokens;
    in.masked = tokens.eq(mask).to(at::kByte);
    in.x0_logits = at::log_softmax(at::sin(at::arange(B * L * V, at::kFloat) * 0.37).view({B, L, V}), -1);
    in.rows = at::tensor(std::vector<int64_t>{1, 5, L + 3}, at::kLong);
    return in;
}

// Every token of V is a candidate at each row of `in`: its delta in `out` must be score(sequence, position, token)
// less the row's lowest, and the row must not be flat.
void expect_exact_deltas(const plugins::StepInputs& in, const plugins::StepOutputs& out, int64_t V,
                         const std::function<float(int64_t, int64_t, int64_t)>& score) {
    const int64_t L = in.tokens.size(1), n = in.rows.size(0);
    ASSERT_TRUE(out.candidate_delta.defined());
    ASSERT_EQ(out.candidate_delta.sizes(), (at::IntArrayRef{n, V}));
    const at::Tensor ids = std::get<1>(plugins::top_candidates(in.x0_logits.view({-1, V}).index_select(0, in.rows), V));
    for (int64_t r = 0; r < n; ++r) {
        const int64_t row = in.rows[r].item<int64_t>(), b = row / L, position = row % L;
        std::vector<float> by_token(static_cast<size_t>(V));
        for (int64_t v = 0; v < V; ++v) by_token[static_cast<size_t>(v)] = score(b, position, v);
        const float lowest = *std::min_element(by_token.begin(), by_token.end());
        for (int64_t j = 0; j < V; ++j) {
            const int64_t v = ids[r][j].item<int64_t>();
            EXPECT_NEAR(out.candidate_delta[r][j].item<float>(), by_token[static_cast<size_t>(v)] - lowest, 1e-4f)
                << "row " << row << ", token " << v;
        }
        EXPECT_GT(out.candidate_delta[r].max().item<float>(), 1e-3f) << "row " << row << " is flat";
    }
}

// The target "NN VBZ NN VBZ" and no word after, over `length` positions.
syntax::ClassifierTarget four_tags(const syntax::TextClassifier& classifier, int64_t length) {
    syntax::ClassifierTarget target;
    for (const char* tag : {"NN", "VBZ", "NN", "VBZ"}) target.tags.push_back({classifier.tag_class(tag)});
    target.tags.resize(static_cast<size_t>(length), {0});
    return target;
}

// Exact candidate scoring ("scoring": "exact") through the pos controller as a run loads it, with every token of the
// tiny vocabulary a candidate: each row's deltas are log p(target | x with the row's position set to that token), by
// brute force one substitution at a time with the classifier at t_next, less the row's lowest.
TEST_F(TextClassifierTraining, ExactCandidateScoringIsTheClassifierOnEverySubstitution) {
    const auto denoiser = train_denoiser("discrete");
    const json config = classifier_config(denoiser, write_annotations(denoiser), "classifier-discrete");
    ASSERT_TRUE(train::train(train::parse_train_config(config, dir_.path())).finished);
    const std::string classifier_dir = config["out"].get<std::string>();
    auto classifier = syntax::TextClassifier::load(classifier_dir);
    VocabularyServices services(denoiser);
    const WordTokenizer& vocabulary = services.vocabulary();

    const int64_t B = 2, L = 10, V = vocabulary.vocab_size();
    const json params = {{"tags", "NN VBZ NN VBZ"}, {"classifier", classifier_dir}, {"scoring", "exact"}, {"top_k", V}};
    plugins::ControllerInstance pos(pos_type(), params.dump(), "pos");
    pos.begin(discrete_shape(B, L, V, vocabulary.pad_id(), vocabulary.mask_id(), vocabulary.unk_id()), &services);

    // Half the words of two texts committed, the rest masked; three masked positions are the step's rows.
    at::Tensor tokens = at::full({B, L}, vocabulary.mask_id(), at::kLong);
    for (int64_t b = 0; b < B; ++b) {
        const auto ids = vocabulary.encode(test::micro_records()[static_cast<size_t>(b)].ref);
        for (int64_t i = 0; i < L && i < static_cast<int64_t>(ids.size()); i += 2)
            tokens[b][i] = ids[static_cast<size_t>(i)];
    }
    const plugins::StepInputs in = predict_step(tokens, vocabulary.mask_id(), V);
    const syntax::ClassifierTarget target = four_tags(*classifier, L);
    expect_exact_deltas(in, pos.step(in), V, [&](int64_t b, int64_t position, int64_t v) {
        at::Tensor one = tokens[b].clone().unsqueeze(0);
        one[0][position] = v;
        float lp = 0;
        classifier->guide(one.data_ptr<int64_t>(), 1, L, in.t_next, target, nullptr, &lp);
        return lp;
    });
}

// A run whose tokenizer is not the classifier's: a byte-level-BPE-like vocabulary over the micro words. Token 0 ends
// the text (its pad), token r in [1, words - 3] is " " + word r + 2 of the classifier's vocabulary, and the last is
// the mask: one kind of piece, as a byte-level BPE has.
class BpeLikeServices final : public plugins::RunServices {
public:
    explicit BpeLikeServices(const WordTokenizer& words) {
        pieces_ = std::make_shared<TokenPieces>();
        std::vector<std::string> text = {""};
        for (int64_t w = 3; w < words.vocab_size(); ++w) text.push_back(" " + words.token(w));
        text.push_back("");  // the mask
        tokens_ = text;
        tokens_.front() = "<|endoftext|>";
        tokens_.back() = "<mask>";
        pieces_->kind_after.assign(text.size(), 0);
        pieces_->text.push_back(std::move(text));
    }
    int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
    int64_t mask_id() const { return vocab_size() - 1; }
    std::vector<int64_t> tokenize(const std::string&) override { throw std::logic_error("not used"); }
    std::string detokenize(const int64_t*, int64_t) override { throw std::logic_error("not used"); }
    const std::string* token_text(int64_t id) override {
        return id >= 0 && id < vocab_size() ? &tokens_[static_cast<size_t>(id)] : nullptr;
    }
    at::Tensor denoise(const plugins::StepInputs&, const std::vector<std::string>&) override {
        throw std::logic_error("no conditioning here");
    }
    std::string model_dir() override { return ""; }
    std::string find_model(const std::string& name) override { return name; }
    std::shared_ptr<const TokenPieces> token_pieces() override { return pieces_; }

private:
    std::vector<std::string> tokens_;
    std::shared_ptr<TokenPieces> pieces_;
};

// "input": "text": a classifier of another vocabulary reads the run's sequences through their text
// (syntax::TextReader), and exact scoring is the classifier on each substitution read so, at the time its masked
// share gives.
TEST_F(TextClassifierTraining, AClassifierOfAnotherVocabularyReadsTheRunsText) {
    const auto denoiser = train_denoiser("discrete");
    const json config = classifier_config(denoiser, write_annotations(denoiser), "classifier-discrete");
    ASSERT_TRUE(train::train(train::parse_train_config(config, dir_.path())).finished);
    const std::string classifier_dir = config["out"].get<std::string>();
    auto classifier = syntax::TextClassifier::load(classifier_dir);
    const WordTokenizer vocabulary = WordTokenizer::load((std::filesystem::path(denoiser) / "vocab.txt").string());
    const int64_t Lc = classifier->max_length(), pad = vocabulary.pad_id(), mask = vocabulary.mask_id();
    ASSERT_TRUE(classifier->masks_tokens());
    ASSERT_EQ(classifier->mask_id(), mask);

    // The reader alone. With the classifier's own word pieces (three kinds: a word-level decoder puts the spaces),
    // a half-masked sequence with an end token reads as itself, padded to the classifier's length.
    {
        const TokenPieces own = *vocabulary.pieces();
        syntax::TextReader reader(classifier, own.text, own.kind_after, pad, mask);
        const auto ids = vocabulary.encode(test::micro_records()[0].ref);
        std::vector<int64_t> sequence(ids.begin(), ids.end());
        sequence[1] = mask;
        sequence[3] = mask;
        sequence.push_back(pad);
        sequence.push_back(mask);  // a masked position after the end reads as one too
        std::vector<int64_t> read(static_cast<size_t>(Lc));
        const double t = reader.read(sequence.data(), static_cast<int64_t>(sequence.size()), read.data());
        std::vector<int64_t> expected = sequence;
        expected.resize(static_cast<size_t>(Lc), pad);
        EXPECT_EQ(read, expected);
        EXPECT_DOUBLE_EQ(t, 3.0 / static_cast<double>(Lc));
    }
    // Pieces of a BPE: a word split in two reads as one word; a masked token followed by a piece that goes on its
    // word is one masked word; an end token is the pad; nothing masked reads at the smallest time trained on.
    {
        std::vector<int64_t> alphabetic;  // words of two letters or more: one to split, two around it
        for (int64_t w = 3; w < vocabulary.vocab_size() && alphabetic.size() < 3; ++w)
            if (vocabulary.token(w).size() >= 2 && std::isalpha(static_cast<unsigned char>(vocabulary.token(w)[0])))
                alphabetic.push_back(w);
        ASSERT_EQ(alphabetic.size(), 3u);
        const int64_t w1 = alphabetic[0], w2 = alphabetic[1], w3 = alphabetic[2];
        const std::string split = vocabulary.token(w3);
        std::vector<std::string> text = {
            "", " " + vocabulary.token(w1), " " + vocabulary.token(w2), " " + split.substr(0, 1), split.substr(1), ""};
        const int64_t end = 0, head = 3, tail = 4, bpe_mask = 5;
        syntax::TextReader reader(classifier, {text}, std::vector<int32_t>(text.size(), 0), end, bpe_mask);
        std::vector<int64_t> read(static_cast<size_t>(Lc));
        const std::vector<int64_t> clean = {1, head, tail, 2, end, end};
        EXPECT_DOUBLE_EQ(reader.read(clean.data(), 6, read.data()), 1e-3);
        std::vector<int64_t> expected = {w1, w3, w2, pad};
        expected.resize(static_cast<size_t>(Lc), pad);
        EXPECT_EQ(read, expected);
        const std::vector<int64_t> masked = {1, bpe_mask, tail, 2, bpe_mask, end};
        EXPECT_DOUBLE_EQ(reader.read(masked.data(), 6, read.data()), 2.0 / static_cast<double>(Lc));
        expected = {w1, mask, w2, mask, pad};
        expected.resize(static_cast<size_t>(Lc), pad);
        EXPECT_EQ(read, expected);
        // Past the classifier's length the sequence is cut.
        std::vector<int64_t> long_one(static_cast<size_t>(Lc + 5), 1);
        reader.read(long_one.data(), Lc + 5, read.data());
        EXPECT_EQ(read, std::vector<int64_t>(static_cast<size_t>(Lc), w1));
        // An id outside the run's vocabulary is refused, naming it.
        const std::vector<int64_t> bad = {1, 9};
        EXPECT_THROW(reader.read(bad.data(), 2, read.data()), std::invalid_argument);
    }

    // Through the pos controller as a run loads it, on the BPE-like run.
    BpeLikeServices services(vocabulary);
    const int64_t B = 2, L = 10, V = services.vocab_size();
    const plugins::RunShape shape = discrete_shape(B, L, V, 0, services.mask_id(), -1);
    const plugins::ControllerType type = pos_type();
    const json params = {{"tags", "NN VBZ NN VBZ"}, {"classifier", classifier_dir}, {"input", "text"}, {"top_k", V}};
    {
        // Its vocabulary is not the run's: refused, naming "input": "text", when the tokens are read.
        json as_tokens = params;
        as_tokens.erase("input");
        plugins::ControllerInstance refused(type, as_tokens.dump(), "pos");
        try {
            refused.begin(shape, &services);
            ADD_FAILURE() << "a classifier of another vocabulary read the run's tokens";
        } catch (const std::exception& e) {
            EXPECT_NE(std::string(e.what()).find("\"input\": \"text\""), std::string::npos) << e.what();
        }
        json gradient = params;
        gradient["scoring"] = "gradient";
        EXPECT_THROW(plugins::ControllerInstance(type, gradient.dump(), "pos"), std::exception);
    }
    plugins::ControllerInstance pos(type, params.dump(), "pos");
    pos.begin(shape, &services);

    // Run token r is word r + 2; the mask and the end map to the classifier's.
    auto word_of = [&](int64_t id) { return id == 0 ? pad : id == services.mask_id() ? mask : id + 2; };
    at::Tensor tokens = at::full({B, L}, services.mask_id(), at::kLong);
    for (int64_t b = 0; b < B; ++b) {
        const auto ids = vocabulary.encode(test::micro_records()[static_cast<size_t>(b)].ref);
        for (int64_t i = 0; i < L && i < static_cast<int64_t>(ids.size()); i += 2)
            tokens[b][i] = ids[static_cast<size_t>(i)] - 2;
    }
    const plugins::StepInputs in = predict_step(tokens, services.mask_id(), V);
    const syntax::ClassifierTarget target = four_tags(*classifier, Lc);  // at the classifier's length
    expect_exact_deltas(in, pos.step(in), V, [&](int64_t b, int64_t position, int64_t v) {
        std::vector<int64_t> words(static_cast<size_t>(Lc), pad);
        int64_t masked = 0;
        for (int64_t i = 0; i < L; ++i) {
            words[static_cast<size_t>(i)] = word_of(i == position ? v : tokens[b][i].item<int64_t>());
            masked += words[static_cast<size_t>(i)] == mask;
        }
        float lp = 0;
        classifier->guide(words.data(), 1, Lc, std::max(1e-3, static_cast<double>(masked) / static_cast<double>(Lc)),
                          target, nullptr, &lp);
        return lp;
    });
}

TEST_F(TextClassifierTraining, ACdcdDenoiserStoredAsFloat16GivesTheTableItsRunsDiffuse) {
    // The bundled denoisers are stored as float16, and a CDCD one diffuses its table's rows normalised: the
    // classifier must hold exactly the table a run of that model checks it against (the syntax controller allows
    // 1e-5).
    const std::filesystem::path denoiser = train_denoiser("cdcd");
    convert_floating_tensors(denoiser / "model.safetensors", "float16");

    const json config = classifier_config(denoiser, write_annotations(denoiser), "classifier-cdcd");
    ASSERT_TRUE(train::train(train::parse_train_config(config, dir_.path())).finished);
    const at::Tensor run_table = load_model(denoiser, Family::continuous).denoiser->embedding().contiguous();
    auto classifier = syntax::TextClassifier::load(config["out"].get<std::string>());
    EXPECT_LE(classifier->embedding_distance(run_table.data_ptr<float>(), run_table.size(0), run_table.size(1)), 1e-6);
    // ... which is the stored table normalised, not the stored table.
    EXPECT_NEAR(run_table.norm(2, -1).min().item<double>(), std::sqrt(8.0), 1e-4);
    const at::Tensor stored =
        load_safetensors(denoiser / "model.safetensors").find("embedding")->to(at::kFloat).contiguous();
    EXPECT_GT(classifier->embedding_distance(stored.data_ptr<float>(), stored.size(0), stored.size(1)), 1e-3);
}

TEST_F(TextClassifierTraining, ConfigErrorsNameTheDenoiserAndTheDataFormat) {
    json j = classifier_config(dir_.path() / "nowhere", dir_.path() / "train.csv", "c");
    j["tokenizer"] = {{"min_count", 2}};
    try {
        train::parse_train_config(j, dir_.path());
        FAIL() << "expected a ConfigError";
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("/denoiser"), std::string::npos) << what;
        EXPECT_NE(what.find("not a trained denoiser directory"), std::string::npos) << what;
        EXPECT_NE(what.find("/data/train"), std::string::npos) << what;
        EXPECT_NE(what.find("rudder annotate"), std::string::npos) << what;
        EXPECT_NE(what.find("/tokenizer"), std::string::npos) << what;
    }
    // The denoiser key belongs to controller kinds only.
    json teacher = test::micro_teacher_config(dir_.path());
    teacher["denoiser"] = "x";
    EXPECT_THROW(train::parse_train_config(teacher, dir_.path()), ConfigError);
}

}  // namespace
}  // namespace rudder
