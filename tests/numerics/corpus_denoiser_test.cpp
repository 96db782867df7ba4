#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/runtime/denoiser.hpp>

namespace rudder {
namespace {

constexpr int64_t kPad = 0, kMask = 2, kVocab = 10, kLen = 5;

// Four sentences of up to 5 tokens (ids 3..9), one of them shorter so padding matters.
const std::vector<std::vector<int64_t>> kCorpus = {
    {3, 4, 5, 6, 7},
    {3, 4, 8, 6},
    {9, 4, 5, 6, 7},
    {3, 8, 8, 9, 7},
};

std::vector<int64_t> padded_sentence(size_t n) {
    std::vector<int64_t> s = kCorpus[n];
    s.resize(kLen, kPad);
    return s;
}

CorpusDenoiser make_denoiser(Family family, double mismatch = 1e-6) {
    CorpusDenoiser::Options options;
    options.family = family;
    options.vocab_size = kVocab;
    options.embed_dim = 16;
    options.embed_seed = 42;
    options.mismatch = mismatch;
    return CorpusDenoiser(kCorpus, options, GaussianSchedule::make("sqrt", 1000));
}

// Brute-force per-position marginals [L][V] from sentence weights.
std::vector<std::vector<double>> marginals_from(const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    std::vector<std::vector<double>> m(kLen, std::vector<double>(kVocab, 0.0));
    for (size_t n = 0; n < kCorpus.size(); ++n) {
        const auto s = padded_sentence(n);
        for (int64_t i = 0; i < kLen; ++i) m[i][s[i]] += weights[n] / total;
    }
    return m;
}

TEST(CorpusDenoiser, FamilyNames) {
    EXPECT_STREQ(family_name(Family::continuous), "continuous");
    EXPECT_STREQ(family_name(Family::discrete), "discrete");
}

TEST(CorpusDenoiser, DiscretePosteriorMatchesBruteForce) {
    const double mismatch = 1e-3;  // large enough that disagreeing sentences keep visible mass
    auto denoiser = make_denoiser(Family::discrete, mismatch);
    EXPECT_EQ(denoiser.family(), Family::discrete);
    EXPECT_EQ(denoiser.embed_dim(), 0);
    EXPECT_FALSE(denoiser.embedding().defined());
    EXPECT_FALSE(denoiser.traits().conditional);
    EXPECT_EQ(denoiser.corpus_size(), 4);

    const std::vector<std::vector<int64_t>> states = {
        {3, kMask, kMask, 6, kMask},         // agrees with sentences 0 and 1 (1 has a 6 at position 3)
        {kMask, 4, kMask, kMask, 7},         // sentences 0 and 2
        {9, 8, kMask, kMask, kMask},         // no sentence agrees everywhere
        {kMask, kMask, kMask, kMask, kPad},  // only the short sentence has a pad at the end
    };
    std::vector<int64_t> flat;
    for (const auto& s : states) flat.insert(flat.end(), s.begin(), s.end());
    const at::Tensor x = at::tensor(flat, at::kLong).view({4, kLen});
    const auto out = denoiser.denoise(x, 0.5, {});
    ASSERT_EQ(out.logits.scalar_type(), at::kFloat);
    ASSERT_EQ(out.logits.sizes(), (at::IntArrayRef{4, kLen, kVocab}));
    EXPECT_FALSE(out.x0.defined());
    EXPECT_TRUE(at::isfinite(out.logits).all().item<bool>());
    const at::Tensor probs = out.logits.exp().to(at::kDouble);

    for (size_t b = 0; b < states.size(); ++b) {
        std::vector<double> weights;
        for (size_t n = 0; n < kCorpus.size(); ++n) {
            const auto s = padded_sentence(n);
            double w = 1.0;
            for (int64_t i = 0; i < kLen; ++i) {
                if (states[b][i] != kMask && states[b][i] != s[i]) w *= mismatch;
            }
            weights.push_back(w);
        }
        const auto m = marginals_from(weights);
        for (int64_t i = 0; i < kLen; ++i) {
            for (int64_t v = 0; v < kVocab; ++v) {
                double expected;
                if (states[b][i] == kMask) {
                    expected = v == kMask ? std::exp(-30.0) : std::max(m[i][v], std::exp(-30.0));
                } else {
                    expected = v == states[b][i] ? 1.0 : std::exp(-30.0);  // committed: one-hot
                }
                EXPECT_NEAR(probs[b][i][v].item<double>(), expected, 1e-5 * expected + 1e-13)
                    << "row " << b << " position " << i << " token " << v;
            }
        }
    }
}

TEST(CorpusDenoiser, AllMaskedGivesCorpusFrequencies) {
    auto denoiser = make_denoiser(Family::discrete);
    const at::Tensor x = at::full({2, kLen}, kMask, at::kLong);
    const at::Tensor probs = denoiser.denoise(x, 1.0, {"ignored", "conditions"}).logits.exp();
    const auto m = marginals_from(std::vector<double>(kCorpus.size(), 1.0));
    for (int64_t b = 0; b < 2; ++b) {
        for (int64_t i = 0; i < kLen; ++i) {
            for (int64_t v = 0; v < kVocab; ++v) {
                EXPECT_NEAR(probs[b][i][v].item<double>(), m[i][v], 1e-6) << i << " " << v;
            }
        }
    }
    EXPECT_NEAR(probs[0][0][3].item<double>(), 0.75, 1e-6);  // three of the four sentences start with 3
}

TEST(CorpusDenoiser, ShorterLengthsLeaveLongSentencesOut) {
    auto denoiser = make_denoiser(Family::discrete);
    // Only sentence 1 (4 tokens) fits in 4 positions.
    const at::Tensor probs = denoiser.denoise(at::full({1, 4}, kMask, at::kLong), 0.5, {}).logits.exp();
    EXPECT_NEAR(probs[0][2][8].item<double>(), 1.0, 1e-6);
    try {
        denoiser.denoise(at::full({1, 3}, kMask, at::kLong), 0.5, {});
        ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("fits in length 3"), std::string::npos) << e.what();
    }
    // Back at the full length, all four sentences count again.
    const at::Tensor full = denoiser.denoise(at::full({1, kLen}, kMask, at::kLong), 0.5, {}).logits.exp();
    EXPECT_NEAR(full[0][4][kPad].item<double>(), 0.25, 1e-6);
}

TEST(CorpusDenoiser, ContinuousConcentratesAtSmallTAndSpreadsAtOne) {
    auto denoiser = make_denoiser(Family::continuous);
    const GaussianSchedule schedule = GaussianSchedule::make("sqrt", 1000);
    const at::Tensor E = denoiser.embedding();
    ASSERT_EQ(E.sizes(), (at::IntArrayRef{kVocab, 16}));
    EXPECT_NEAR((E.norm(2, {1}) - 1.0).abs().max().item<double>(), 0.0, 1e-5);
    EXPECT_EQ(denoiser.embed_dim(), 16);

    std::vector<at::Tensor> sentence_embeddings;  // E[s] for every padded sentence, [L, D]
    for (size_t n = 0; n < kCorpus.size(); ++n) {
        sentence_embeddings.push_back(E.index_select(0, at::tensor(padded_sentence(n), at::kLong)));
    }

    for (double t : {0.001, 0.05, 0.3, 1.0}) {
        const double ab = schedule.alpha_bar_at(t);
        // One row per sentence, each exactly at its noiseless point sqrt(ab) E[s].
        const at::Tensor x = std::sqrt(ab) * at::stack(sentence_embeddings);
        const auto out = denoiser.denoise(x, t, {});
        ASSERT_EQ(out.logits.sizes(), (at::IntArrayRef{4, kLen, kVocab}));
        ASSERT_EQ(out.x0.sizes(), (at::IntArrayRef{4, kLen, 16}));
        EXPECT_TRUE(at::isfinite(out.logits).all().item<bool>()) << "t = " << t;
        const at::Tensor probs = out.logits.exp().to(at::kDouble);
        // x0 is the posterior mean embedding, i.e. the marginals times E (the e^-30 floor is negligible).
        EXPECT_LT((out.x0 - at::matmul(out.logits.exp(), E)).abs().max().item<double>(), 1e-5) << "t = " << t;

        for (size_t b = 0; b < kCorpus.size(); ++b) {
            // Brute force: log-weights -|x - sqrt(ab) E[s]|^2 / (2 (1 - ab)) with the full squared distance.
            std::vector<double> log_w;
            double max_log_w = -INFINITY;
            for (size_t n = 0; n < kCorpus.size(); ++n) {
                const double d2 =
                    (x[b] - std::sqrt(ab) * sentence_embeddings[n]).to(at::kDouble).pow(2).sum().item<double>();
                log_w.push_back(-d2 / (2.0 * (1.0 - ab)));
                max_log_w = std::max(max_log_w, log_w.back());
            }
            std::vector<double> weights;
            double total = 0;
            for (double lw : log_w) total += std::exp(lw - max_log_w);
            for (double lw : log_w) weights.push_back(std::exp(lw - max_log_w) / total);
            const auto m = marginals_from(weights);
            for (int64_t i = 0; i < kLen; ++i) {
                for (int64_t v = 0; v < kVocab; ++v) {
                    const double expected = v == kMask ? std::exp(-30.0) : std::max(m[i][v], std::exp(-30.0));
                    EXPECT_NEAR(probs[b][i][v].item<double>(), expected, 1e-4 * std::max(expected, 1e-3))
                        << "t = " << t << " row " << b << " position " << i << " token " << v;
                }
            }
            if (t == 0.001) {
                EXPECT_GT(weights[b], 0.99) << "row " << b;
                EXPECT_LT((out.x0[b] - sentence_embeddings[b]).abs().max().item<double>(), 0.02) << "row " << b;
            }
            if (t == 1.0) {
                // alpha_bar(1) ~ 5e-7: the data barely moves x, so the posterior is close to the uniform prior.
                for (double w : weights) EXPECT_NEAR(w, 0.25, 0.01) << "row " << b;
            }
        }
    }
}

TEST(CorpusDenoiser, ValidatesInputs) {
    auto discrete = make_denoiser(Family::discrete);
    const at::Tensor tokens = at::full({1, kLen}, kMask, at::kLong);
    EXPECT_THROW(discrete.denoise(tokens, 0.0, {}), std::invalid_argument);
    EXPECT_THROW(discrete.denoise(tokens, 1.5, {}), std::invalid_argument);
    EXPECT_THROW(discrete.denoise(tokens.to(at::kFloat), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(discrete.denoise(tokens.view({kLen}), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(discrete.denoise(at::full({1, kLen}, kVocab, at::kLong), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(discrete.denoise(tokens, 0.5, {"a", "b"}), std::invalid_argument);

    auto continuous = make_denoiser(Family::continuous);
    EXPECT_THROW(continuous.denoise(at::zeros({1, kLen, 8}), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(continuous.denoise(at::zeros({1, kLen, 16}, at::kDouble), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(continuous.denoise(tokens, 0.5, {}), std::invalid_argument);

    CorpusDenoiser::Options options;
    options.vocab_size = kVocab;
    const auto schedule = GaussianSchedule::make("sqrt", 10);
    EXPECT_THROW(CorpusDenoiser({{3, kMask}}, options, schedule), std::invalid_argument);
    EXPECT_THROW(CorpusDenoiser({{3, kVocab}}, options, schedule), std::invalid_argument);
    EXPECT_THROW(CorpusDenoiser({}, options, schedule), std::invalid_argument);
    options.mismatch = 0.0;
    EXPECT_THROW(CorpusDenoiser({{3}}, options, schedule), std::invalid_argument);
}

}  // namespace
}  // namespace rudder
