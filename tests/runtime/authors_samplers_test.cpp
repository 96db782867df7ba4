// The authors' samplers' parts (authors_samplers.hpp) on numbers worked out by hand: LLaDA's blocks and commits per
// step, Dream's times and commit counts, the softmax over every network row, and, above temperature 0 where the
// tokens are drawn with other noise than the authors', the distributions: LLaDA's Gumbel-max at a temperature, Dream's
// top_p-then-top_k distribution, and Dream's alg_temp draw of positions without replacement.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <vector>

#include "authors_samplers.hpp"
#include "sampler.hpp"

namespace {

using rudder::DreamSampler;
using rudder::LladaSampler;

// A bool tensor (at::tensor takes no bools).
at::Tensor bools(std::vector<int64_t> values) { return at::tensor(values, at::kLong).to(at::kBool); }

// Frequencies of each of `V` outcomes over `draws`.
std::vector<double> frequencies(const at::Tensor& draws, int64_t V) {
    const at::Tensor counts = at::bincount(draws, {}, V).to(at::kDouble) / static_cast<double>(draws.numel());
    return std::vector<double>(counts.data_ptr<double>(), counts.data_ptr<double>() + V);
}

// Each frequency within 5 standard errors of its probability (n draws).
void expect_distribution(const std::vector<double>& seen, const std::vector<double>& expected, int64_t n) {
    ASSERT_EQ(seen.size(), expected.size());
    for (size_t v = 0; v < seen.size(); ++v) {
        const double p = expected[v], tolerance = 5.0 * std::sqrt(std::max(p * (1 - p), 1e-12) / n) + 1e-12;
        EXPECT_NEAR(seen[v], p, tolerance) << "outcome " << v;
    }
}

TEST(LladaSampler, SharesStepsAndCommitsOverTheBlocksAfterThePrompt) {
    LladaSampler llada(8, 4, LladaSampler::Remasking::low_confidence, 0.0);
    llada.start(5, 5 + 16);  // LLaDA: steps 8, gen_length 16, block_length 4 after a 5-token prompt
    for (int64_t i = 0; i < 8; ++i) {
        const auto [begin, end] = llada.block(i);
        EXPECT_EQ(begin, 5 + 4 * (i / 2)) << i;
        EXPECT_EQ(end, begin + 4) << i;
        EXPECT_EQ(llada.first_of_block(i), i % 2 == 0) << i;
        EXPECT_EQ(llada.step_in_block(i), i % 2) << i;
    }
    // get_num_transfer_tokens: the masked count over the block's steps, the remainder to the first.
    LladaSampler three(3, 0, LladaSampler::Remasking::low_confidence, 0.0);
    three.start(2, 12);
    const at::Tensor schedule = three.schedule(at::tensor({10, 9, 1}, at::kLong), 0);
    EXPECT_TRUE(at::equal(schedule, at::tensor({4, 3, 3, 3, 3, 3, 1, 0, 0}, at::kLong).view({3, 3})));
    // Steps the blocks do not divide: the first blocks take one more (LLaDA asserts instead); a short last block.
    LladaSampler uneven(5, 4, LladaSampler::Remasking::low_confidence, 0.0);
    uneven.start(0, 10);  // blocks [0, 4) [4, 8) [8, 10): 2, 2 and 1 steps
    EXPECT_EQ(uneven.block(1).first, 0);
    EXPECT_EQ(uneven.block(2).first, 4);
    EXPECT_EQ(uneven.block(4), std::make_pair(int64_t{8}, int64_t{10}));
    EXPECT_TRUE(at::equal(uneven.schedule(at::tensor({2}, at::kLong), 4), at::tensor({2}, at::kLong).view({1, 1})));
    EXPECT_TRUE(at::equal(uneven.schedule(at::tensor({3}, at::kLong), 2), at::tensor({2, 1}, at::kLong).view({1, 2})));
    LladaSampler short_of_steps(2, 4, LladaSampler::Remasking::low_confidence, 0.0);
    EXPECT_THROW(short_of_steps.start(3, 3 + 12), std::invalid_argument);  // 3 blocks, 2 steps
    EXPECT_THROW(short_of_steps.start(8, 8), std::invalid_argument);       // nothing after the prompt
}

// Fast-dLLM's rules: threshold commits the most confident and every other reaching it; factor the n most confident
// while the n-th (from 0) reaches 1 - factor / (n + 2), and all of them when only the last misses (its loop's end).
TEST(LladaSampler, ParallelDecodingCountsAsFastDllm) {
    using Rule = rudder::ParallelDecoding::Rule;
    const float no = -INFINITY;
    const at::Tensor drawn = bools({1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0}).view({3, 4});
    const at::Tensor confidence =
        at::tensor({0.95f, 0.5f, 0.92f, no, 0.2f, 0.1f, 0.3f, 0.05f, no, no, no, no}).view({3, 4});
    LladaSampler threshold(8, 0, LladaSampler::Remasking::low_confidence, 0.0, {Rule::threshold, 0.9});
    EXPECT_TRUE(at::equal(threshold.parallel_count(drawn, confidence), at::tensor({2, 1, 0}, at::kLong)));
    LladaSampler factor(8, 0, LladaSampler::Remasking::low_confidence, 0.0, {Rule::factor, 1.0});
    const at::Tensor four = at::ones({2, 4}, at::kBool);
    // thresholds 0.667, 0.75, 0.8 for the 2nd, 3rd and 4th: 0.7 misses the 3rd's; 0.1 misses only the last's.
    const at::Tensor sorted = at::tensor({0.9f, 0.8f, 0.7f, 0.1f, 0.9f, 0.8f, 0.76f, 0.1f}).view({2, 4});
    EXPECT_TRUE(at::equal(factor.parallel_count(four, sorted), at::tensor({2, 4}, at::kLong)));
    EXPECT_TRUE(at::equal(factor.parallel_count(four.narrow(1, 0, 1), sorted.narrow(1, 3, 1)),
                          at::tensor({1, 1}, at::kLong)));  // one masked: committed whatever its confidence
}

TEST(LladaSampler, TemperatureZeroIsTheFirstArgMaxAndConfidenceTheUntemperedProbability) {
    const at::Tensor full = at::log_softmax(at::tensor({1.0f, 3.0f, 3.0f, 0.5f, 2.0f, 2.5f}).view({2, 3}), 1);
    LladaSampler greedy(4, 0, LladaSampler::Remasking::low_confidence, 0.0);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
    const at::Tensor tokens = greedy.draw(full, gen);
    EXPECT_TRUE(at::equal(tokens, at::tensor({1, 2}, at::kLong)));  // the tie goes to the lower id
    const at::Tensor confidence = greedy.confidence(full, tokens, at::tensor({0, 1}, at::kLong), 1, 2, gen);
    EXPECT_NEAR(confidence[0].item<float>(), std::exp(3.0) / (std::exp(1.0) + 2 * std::exp(3.0)), 1e-6);
}

TEST(LladaSampler, AboveTemperatureZeroDrawsFromTheTemperedFullDistribution) {
    const int64_t n = 40000;
    const at::Tensor logits = at::tensor({0.0f, 1.0f, 2.0f, -1.0f});
    const at::Tensor full = at::log_softmax(logits, 0).expand({n, 4}).contiguous();
    LladaSampler tempered(4, 0, LladaSampler::Remasking::low_confidence, 0.5);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const at::Tensor expected = at::softmax(logits.to(at::kDouble) / 0.5, 0);
    expect_distribution(frequencies(tempered.draw(full, gen), 4),
                        std::vector<double>(expected.data_ptr<double>(), expected.data_ptr<double>() + 4), n);
}

TEST(FullRows, TheMaskAndThePaddingJoinTheSoftmax) {
    // Vocabulary of 3 (the mask at 1), one padding row: raw logits 0.5, -, 1.5 and the mask 0.2, the padding -0.3.
    const at::Tensor kept = at::log_softmax(at::tensor({0.5f, -INFINITY, 1.5f}).view({1, 3}), 1);
    const double lse = std::log(std::exp(0.5) + std::exp(1.5));
    const at::Tensor outside = at::tensor({0.2f, -0.3f}).view({1, 2}) - static_cast<float>(lse);
    const at::Tensor full = rudder::full_rows(kept, outside, 1);
    const at::Tensor expected = at::log_softmax(at::tensor({0.5f, 0.2f, 1.5f, -0.3f}).view({1, 4}), 1);
    EXPECT_LT((full - expected).abs().max().item<float>(), 1e-6);
}

TEST(DreamSampler, TimesAndCommitCountsAreDreamsFloat32Numbers) {
    DreamSampler dream(4, 1e-3, DreamSampler::Alg::entropy, 0.0, 0.0, 0, 1.0);
    const at::Tensor times = at::linspace(1.0, 1e-3, 5, at::TensorOptions().dtype(at::kFloat));
    for (int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(dream.t(i), times[i].item<float>());
        EXPECT_EQ(dream.t_next(i), times[i + 1].item<float>());
    }
    // int(m (1 - s / t)): 1 - 0.75025 / 1 = 0.24975 of 16 is 3.996 -> 3; all at the last step.
    const at::Tensor masked = at::tensor({16, 7}, at::kLong);
    EXPECT_TRUE(at::equal(dream.commits(masked, 0), at::tensor({3, 1}, at::kLong)));
    EXPECT_TRUE(at::equal(dream.commits(masked, 3), masked));
}

TEST(DreamSampler, ShapesWithTopPThenTopKAndDrawsFromThat) {
    // probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two (the first holds 0.5 <= 0.7, the first two
    // hold 0.8 > 0.7, so the third goes); top_k 1 then leaves the first alone. top_k 3 alone keeps three.
    const at::Tensor p = at::tensor({0.5, 0.3, 0.15, 0.05}, at::kDouble);
    const at::Tensor full = p.log().to(at::kFloat).view({1, 4});
    const auto kept = [&](double top_p, int64_t top_k) {
        return DreamSampler(4, 1e-3, DreamSampler::Alg::maskgit_plus, 0.0, 1.0, top_k, top_p)
            .shaped(full)
            .isfinite()
            .view({-1});
    };
    EXPECT_TRUE(at::equal(kept(0.7, 0), bools({1, 1, 0, 0})));
    EXPECT_TRUE(at::equal(kept(0.7, 1), bools({1, 0, 0, 0})));
    EXPECT_TRUE(at::equal(kept(1.0, 3), bools({1, 1, 1, 0})));

    const int64_t n = 40000;
    DreamSampler dream(4, 1e-3, DreamSampler::Alg::maskgit_plus, 0.0, 1.0, 0, 0.7);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const at::Tensor shaped = dream.shaped(full.expand({n, 4}).contiguous());
    expect_distribution(frequencies(dream.draw(shaped, gen), 4), {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0}, n);
    // maskgit_plus: the drawn token's probability under that distribution.
    const at::Tensor one = shaped.narrow(0, 0, 1);
    EXPECT_NEAR(dream.confidence(one, at::tensor({1}, at::kLong))[0].item<float>(), 0.3 / 0.8, 1e-6);
}

TEST(DreamSampler, ConfidencesAreTheAlgsQuantities) {
    const at::Tensor p = at::tensor({0.6, 0.3, 0.1}, at::kDouble);
    const at::Tensor shaped = p.log().to(at::kFloat).view({1, 3});
    const at::Tensor token = at::tensor({0}, at::kLong);
    const auto conf = [&](DreamSampler::Alg alg) {
        return DreamSampler(2, 1e-3, alg, 0.0, 0.0, 0, 1.0).confidence(shaped, token)[0].item<double>();
    };
    EXPECT_NEAR(conf(DreamSampler::Alg::maskgit_plus), 0.6, 1e-6);
    EXPECT_NEAR(conf(DreamSampler::Alg::topk_margin), 0.3, 1e-6);
    const double negative_entropy =
        0.6 * std::log(0.6 + 1e-10) + 0.3 * std::log(0.3 + 1e-10) + 0.1 * std::log(0.1 + 1e-10);
    EXPECT_NEAR(conf(DreamSampler::Alg::entropy), negative_entropy, 1e-6);
}

TEST(DreamSampler, AlgTempDrawsPositionsWithoutReplacementBySoftmaxOfConfidence) {
    // Three positions, weights softmax(c / 0.5) of c = (0, -0.5, -1): w = (1, e^-1, e^-2) / Z. Two drawn without
    // replacement: position k is left out with probability P(the two others first) = sum over orders.
    const std::vector<double> w = {1.0, std::exp(-1.0), std::exp(-2.0)};
    const double z = w[0] + w[1] + w[2];
    std::vector<double> left_out(3);
    for (int k = 0; k < 3; ++k) {
        const int a = (k + 1) % 3, b = (k + 2) % 3;
        left_out[k] = w[a] / z * w[b] / (z - w[a]) + w[b] / z * w[a] / (z - w[b]);
    }
    const int64_t n = 30000;
    DreamSampler dream(4, 1e-3, DreamSampler::Alg::maskgit_plus, 0.5, 0.0, 0, 1.0);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
    const at::Tensor drawn = at::ones({n, 3}, at::kBool);
    const at::Tensor confidence = at::tensor({0.0f, -0.5f, -1.0f}).expand({n, 3}).contiguous();
    const at::Tensor kept = dream.keep(drawn, confidence, at::full({n}, 2, at::kLong), gen);
    EXPECT_TRUE(at::equal(kept.sum(1), at::full({n}, 2, at::kLong)));
    const at::Tensor out = kept.logical_not().to(at::kLong).argmax(1);  // the one left out
    expect_distribution(frequencies(out, 3), left_out, n);
}

TEST(DreamSampler, OriginDrawsAUniformPerMaskedPositionInOrder) {
    DreamSampler dream(4, 1e-3, DreamSampler::Alg::origin, 0.0, 0.0, 0, 1.0);
    const at::Tensor masked = bools({0, 1, 1, 0, 1, 1}).view({1, 6});
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5), same = at::make_generator<at::CPUGeneratorImpl>(5);
    const at::Tensor chosen = dream.choose(masked, 1, gen);
    const at::Tensor u = at::rand({4}, same, at::TensorOptions().dtype(at::kFloat));
    const at::Tensor p = 1 - at::linspace(1.0, 1e-3, 5, at::TensorOptions().dtype(at::kFloat))[2] /
                                 at::linspace(1.0, 1e-3, 5, at::TensorOptions().dtype(at::kFloat))[1];
    at::Tensor expected = at::zeros({6}, at::kBool);
    expected.index_put_({at::tensor({1, 2, 4, 5}, at::kLong)}, u.lt(p));
    EXPECT_TRUE(at::equal(chosen.view({-1}), expected));
    EXPECT_TRUE(at::equal(dream.choose(masked, 3, gen), masked));  // the last step takes every one
}

}  // namespace
