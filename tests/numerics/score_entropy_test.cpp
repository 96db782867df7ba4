// SEDD's forward processes and its denoising score entropy (nn/score_entropy.hpp), against the matrix exponential
// of the rate matrices, draws, a hand-worked example and the loss's minimum.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <rudder/nn/score_entropy.hpp>

namespace rudder::nn {
namespace {

constexpr int64_t kVocab = 5;
constexpr int64_t kAbsorbingState = 4;

// The rate matrix in the column convention (Q[y, x]: rate from x to y), as the header defines it.
at::Tensor rate_matrix(Graph graph) {
    at::Tensor q = at::zeros({kVocab, kVocab}, at::kDouble);
    if (graph == Graph::uniform)
        return at::full({kVocab, kVocab}, 1.0 / kVocab, at::kDouble) - at::eye(kVocab, at::kDouble);
    for (int64_t x = 0; x < kVocab; ++x) {
        if (x == kAbsorbingState) continue;
        q[kAbsorbingState][x] = 1.0;
        q[x][x] = -1.0;
    }
    return q;
}

TEST(ScoreEntropy, ForwardMarginalsAreTheMatrixExponentialOfTheRates) {
    for (Graph graph : {Graph::absorb, Graph::uniform}) {
        for (double sigma_bar : {0.05, 0.7, 3.0}) {
            const at::Tensor exact = at::linalg_matrix_exp(sigma_bar * rate_matrix(graph));  // [y, x0]
            const at::Tensor x0 = at::arange(kVocab - 1, at::kLong);                         // clean tokens
            const at::Tensor p =
                transition_probs(graph, x0, at::full({kVocab - 1}, sigma_bar, at::kDouble), kVocab, kAbsorbingState);
            EXPECT_TRUE(at::allclose(p, exact.t().index_select(0, x0), 1e-12, 1e-12))
                << graph_name(graph) << " sigma_bar " << sigma_bar << "\n"
                << p << "\n"
                << exact.t();
            EXPECT_TRUE(at::allclose(p.sum(1), at::ones({kVocab - 1}, at::kDouble)));
        }
    }
}

TEST(ScoreEntropy, DrawsFollowTheMarginals) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const int64_t n = 200000;
    for (Graph graph : {Graph::absorb, Graph::uniform}) {
        const at::Tensor x0 = at::full({1, n}, 1, at::kLong);
        const at::Tensor x_t =
            sample_transition(graph, x0, at::full({1}, 0.9, at::kDouble), kVocab, kAbsorbingState, gen);
        const at::Tensor freq = at::bincount(x_t.reshape({-1}), {}, kVocab).to(at::kDouble) / static_cast<double>(n);
        const at::Tensor p = transition_probs(graph, at::full({1}, 1, at::kLong), at::full({1}, 0.9, at::kDouble),
                                              kVocab, kAbsorbingState)[0];
        // Five standard errors of a share of 200,000 draws.
        const at::Tensor tolerance = 5.0 * (p * (1.0 - p) / static_cast<double>(n)).sqrt() + 1e-12;
        EXPECT_TRUE((freq - p).abs().le(tolerance).all().item<bool>()) << graph_name(graph) << "\n"
                                                                       << freq << "\n"
                                                                       << p;
    }
}

// Worked by hand with V = 3 and sigma_bar = ln 2 (alpha = 1/2).
TEST(ScoreEntropy, ValueAndGradientMatchAHandWorkedExample) {
    const at::Tensor sigma_bar = at::full({1}, std::log(2.0), at::kDouble);
    // Uniform, x0 = 0, x_t = 1: p(x_t | x0) = (1/2)/3 = 1/6; r_0 = (1/2 + 1/6) / (1/6) = 4, r_2 = 1. Scores s = (2, .,
    // 1/2):
    //   y = 0: 2 - 4 ln 2 + 4 (ln 4 - 1) = -2 + 4 ln 2;   y = 2: 1/2 - ln(1/2) + (0 - 1) = -1/2 + ln 2
    //   loss = (-5/2 + 5 ln 2) / 3;   d/d log s_y = (s_y - r_y) / 3 = -2/3, 0 (x_t itself is never read), -1/6.
    at::Tensor log_score =
        at::tensor({std::log(2.0), 5.0, std::log(0.5)}, at::kDouble).view({1, 3}).requires_grad_(true);
    at::Tensor loss = score_entropy(Graph::uniform, log_score, at::full({1}, 1, at::kLong), at::full({1}, 0, at::kLong),
                                    sigma_bar, /*mask_id=*/2);
    EXPECT_NEAR(loss.item<double>(), (-2.5 + 5.0 * std::log(2.0)) / 3.0, 1e-12);
    loss.sum().backward();
    EXPECT_TRUE(at::allclose(log_score.grad(), at::tensor({-2.0 / 3.0, 0.0, -1.0 / 6.0}, at::kDouble).view({1, 3}),
                             1e-12, 1e-12))
        << log_score.grad();

    // Absorbing, mask 2, x0 = 0, x_t = mask: r_0 = alpha / (1 - alpha) = 1, other r = 0. Scores s = (2, 3, .):
    //   loss = (2 + 3) - 1 * ln 2 + K(1) = 4 - ln 2;   d/d log s_y = s_y - r_y = 1, 3, 0.
    // An unmasked x_t has no rate flowing in: 0.
    log_score = at::tensor({std::log(2.0), std::log(3.0), 7.0, std::log(2.0), std::log(3.0), 7.0}, at::kDouble)
                    .view({2, 3})
                    .requires_grad_(true);
    loss = score_entropy(Graph::absorb, log_score, at::tensor({2, 0}, at::kLong), at::tensor({0, 0}, at::kLong),
                         at::full({2}, std::log(2.0), at::kDouble), 2);
    EXPECT_NEAR(loss[0].item<double>(), 4.0 - std::log(2.0), 1e-12);
    EXPECT_EQ(loss[1].item<double>(), 0.0);
    loss.sum().backward();
    EXPECT_TRUE(at::allclose(log_score.grad(), at::tensor({1.0, 3.0, 0.0, 0.0, 0.0, 0.0}, at::kDouble).view({2, 3}),
                             1e-12, 1e-12))
        << log_score.grad();
}

// Score entropy is a Bregman divergence between the true ratios and the scores: 0 at r, positive elsewhere.
TEST(ScoreEntropy, IsZeroExactlyAtTheTrueRatiosAndPositiveElsewhere) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    for (Graph graph : {Graph::absorb, Graph::uniform}) {
        const at::Tensor x0 = at::randint(kVocab - 1, {64}, gen, at::kLong);
        const at::Tensor sigma_bar = at::rand({64}, gen, at::kDouble) * 3.0 + 0.05;
        const at::Tensor x_t =
            sample_transition(graph, x0.view({64, 1}), sigma_bar, kVocab, kAbsorbingState, gen).view({64});
        const at::Tensor p = transition_probs(graph, x0, sigma_bar, kVocab, kAbsorbingState);
        const at::Tensor ratio = p / p.gather(1, x_t.unsqueeze(1));  // r_y; y = x_t gives 1
        // log r, with the never-read entries (r = 0: unreachable tokens) at an arbitrary finite value.
        const at::Tensor truth = at::where(ratio.gt(0), ratio.log(), at::full_like(ratio, -30.0));
        EXPECT_LT(score_entropy(graph, truth, x_t, x0, sigma_bar, kAbsorbingState).abs().max().item<double>(), 1e-9)
            << graph_name(graph);
        const at::Tensor off = truth + 0.3 * at::randn(truth.sizes(), gen, at::kDouble);
        const at::Tensor loss = score_entropy(graph, off, x_t, x0, sigma_bar, kAbsorbingState);
        EXPECT_TRUE(loss.ge(0).all().item<bool>()) << graph_name(graph);
        const at::Tensor moved = graph == Graph::absorb ? x_t.eq(kAbsorbingState) : at::ones_like(x_t, at::kBool);
        EXPECT_TRUE(loss.masked_select(moved).gt(0).all().item<bool>()) << graph_name(graph);
    }
    EXPECT_THROW(score_entropy(Graph::uniform, at::zeros({1, 3}), at::zeros({1}, at::kLong), at::zeros({1}, at::kLong),
                               at::zeros({1}, at::kDouble), 2),
                 std::invalid_argument);
    EXPECT_THROW(parse_graph("absorbing"), std::invalid_argument);
    EXPECT_EQ(parse_graph("uniform"), Graph::uniform);
}

at::Tensor uniform_kernel(double sigma_bar) {  // [from, to]: exp(sigma_bar Q) transposed, symmetric anyway
    return at::linalg_matrix_exp(sigma_bar * rate_matrix(Graph::uniform));
}

// A position's own noisy token is evidence: the posterior given all of x_t is Bayes over the kernel, and back.
TEST(ScoreEntropy, UniformPosteriorAddsTheOwnTokensEvidenceAndBack) {
    const at::Tensor p0 = at::tensor({0.5, 0.3, 0.15, 0.05, 0.0}, at::kDouble);
    for (double sigma_bar : {0.01, 0.7, 3.0}) {
        const at::Tensor kernel = uniform_kernel(sigma_bar);  // kernel[b, y] = p(x_t = b | x0 = y)
        for (int64_t b = 0; b < kVocab; ++b) {
            const at::Tensor bayes = p0 * kernel[b] / (p0 * kernel[b]).sum();
            const at::Tensor x_t = at::full({1}, b, at::kLong), level = at::full({1}, sigma_bar, at::kDouble);
            const at::Tensor post = uniform_posterior_from_rest(p0.log().unsqueeze(0), x_t, level);
            EXPECT_TRUE(at::allclose(post[0].exp(), bayes, 1e-10, 1e-12)) << sigma_bar << ", x_t " << b;
            EXPECT_TRUE(at::allclose(uniform_rest_from_posterior(post, x_t, level)[0].exp(), p0, 1e-10, 1e-12));
        }
    }
    EXPECT_THROW(
        uniform_posterior_from_rest(p0.log().unsqueeze(0), at::zeros({1}, at::kLong), at::zeros({1}, at::kDouble)),
        std::invalid_argument);
}

// The score a clean distribution implies is the ratio of the forward marginals, and stays exact where alpha is tiny.
TEST(ScoreEntropy, UniformScoreOfCleanIsTheRatioOfTheMarginals) {
    const at::Tensor p0 = at::tensor({0.5, 0.3, 0.15, 0.05, 0.0}, at::kDouble);
    for (double sigma_bar : {0.01, 0.7, 3.0}) {
        const at::Tensor pt = at::matmul(uniform_kernel(sigma_bar), p0);
        for (int64_t b = 0; b < kVocab; ++b) {
            const at::Tensor log_s = uniform_score_of_clean(p0.log().unsqueeze(0), at::full({1}, b, at::kLong),
                                                            at::full({1}, sigma_bar, at::kDouble))[0];
            EXPECT_TRUE(at::allclose(log_s, (pt / pt[b]).log(), 1e-10, 1e-12)) << sigma_bar << ", x_t " << b;
        }
    }
    // At sigma_bar 20 (alpha 2e-9) s_y - 1 = alpha V (p0(y) - p0(x_t)) to first order: float32 keeps it.
    const double alpha = std::exp(-20.0);
    const at::Tensor log_s = uniform_score_of_clean(p0.log().to(at::kFloat).unsqueeze(0), at::zeros({1}, at::kLong),
                                                    at::full({1}, 20.0, at::kDouble))[0]
                                 .to(at::kDouble);
    const at::Tensor first_order = alpha * kVocab * (p0 - p0[0]);
    EXPECT_TRUE(at::allclose(log_s, first_order, 1e-5, 1e-15)) << log_s << "\n" << first_order;
}

// One position with a known clean distribution p0: Tweedie's step is the exact reverse transition p(x_s | x_t) =
// p_s(x_s) p(x_t | x_s) / p_t(x_t) (Bayes over the forward kernels) and equals SEDD's formula, [exp(-d Q) s]_y
// exp(d Q)[y, x_t] for the score p0 implies; Euler's is a first-order approximation whose error shrinks with the step.
TEST(ScoreEntropy, UniformTweedieStepIsExactForOnePositionAndEulerApproachesIt) {
    const at::Tensor p0 = at::tensor({0.5, 0.3, 0.15, 0.05, 0.0}, at::kDouble);
    const at::Tensor log_p0 = p0.log().unsqueeze(0);
    for (const auto& [sigma_t, sigma_s] :
         std::vector<std::pair<double, double>>{{2.0, 1.5}, {0.8, 0.2}, {0.3, 0.29}, {0.4, 0.0}}) {
        const at::Tensor pt = at::matmul(uniform_kernel(sigma_t), p0), ps = at::matmul(uniform_kernel(sigma_s), p0);
        const at::Tensor step = uniform_kernel(sigma_t - sigma_s);  // step[b, y] = p(x_t = b | x_s = y)
        for (int64_t b = 0; b < kVocab; ++b) {
            const at::Tensor exact = ps * step[b] / pt[b];
            const at::Tensor x_t = at::full({1}, b, at::kLong);
            const at::Tensor from = at::full({1}, sigma_t, at::kDouble), to = at::full({1}, sigma_s, at::kDouble);
            const at::Tensor tweedie = uniform_tweedie_probs(log_p0, x_t, from, to)[0];
            EXPECT_TRUE(at::allclose(tweedie, exact, 1e-10, 1e-12))
                << sigma_t << " -> " << sigma_s << ", x_t " << b << "\n"
                << tweedie << "\n"
                << exact;
            const at::Tensor score = uniform_score_of_clean(log_p0, x_t, from)[0].exp();
            const at::Tensor sedd = at::matmul(uniform_kernel(sigma_s - sigma_t), score) * step[b];
            EXPECT_TRUE(at::allclose(tweedie, sedd / sedd.sum(), 1e-10, 1e-12)) << sigma_t << " -> " << sigma_s;
            const double euler_error =
                (uniform_euler_probs(log_p0, x_t, from, to)[0] - exact).abs().max().item<double>();
            if (sigma_s > 0) {
                EXPECT_LT(euler_error, 2.0 * (sigma_t - sigma_s) * (sigma_t - sigma_s) + 1e-3)
                    << sigma_t << " -> " << sigma_s;
            }
        }
    }
    // Rows are distributions whatever the clean estimate; a step must go back in noise.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const at::Tensor noisy = at::log_softmax(at::randn({16, kVocab}, gen, at::kDouble) * 3.0, 1);
    const at::Tensor x_t = at::randint(kVocab, {16}, gen, at::kLong);
    const at::Tensor from = at::full({16}, 0.9, at::kDouble), to = at::full({16}, 0.4, at::kDouble);
    for (const at::Tensor& p :
         {uniform_tweedie_probs(noisy, x_t, from, to), uniform_euler_probs(noisy, x_t, from, to)}) {
        EXPECT_TRUE(p.ge(0).all().item<bool>());
        EXPECT_TRUE(at::allclose(p.sum(1), at::ones({16}, at::kDouble)));
    }
    EXPECT_THROW(uniform_tweedie_probs(noisy, x_t, to, from), std::invalid_argument);
    EXPECT_THROW(uniform_euler_probs(noisy, x_t, from, at::full({16}, -0.1, at::kDouble)), std::invalid_argument);
}

}  // namespace
}  // namespace rudder::nn
