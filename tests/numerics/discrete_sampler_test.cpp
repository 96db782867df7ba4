#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>
#include <stdexcept>

#include "sampler.hpp"
#include "seeded_generator.hpp"

namespace rudder {
namespace {

constexpr int64_t kMaskToken = 2;

TEST(DiscreteSampler, TimesAndInit) {
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::analytic, 4);
    EXPECT_DOUBLE_EQ(sampler.t(0), 1.0);
    EXPECT_DOUBLE_EQ(sampler.t(1), 0.75);
    EXPECT_DOUBLE_EQ(sampler.t_next(1), 0.5);
    EXPECT_DOUBLE_EQ(sampler.t_next(3), 0.0);
    const at::Tensor x = sampler.init(3, 5, kMaskToken, at::Device(at::kCPU));
    EXPECT_EQ(x.scalar_type(), at::kLong);
    EXPECT_EQ(x.sizes(), (at::IntArrayRef{3, 5}));
    EXPECT_TRUE(x.eq(kMaskToken).all().item<bool>());
    EXPECT_THROW(DiscreteSampler(MaskSchedule(), DiscreteSampler::Kind::euler, 0), std::invalid_argument);
}

TEST(DiscreteSampler, AnalyticChainTelescopesToNothingMasked) {
    const MaskSchedule schedule(1e-3);
    for (int64_t steps : {1, 2, 10, 50, 1000}) {
        const DiscreteSampler sampler(schedule, DiscreteSampler::Kind::analytic, steps);
        double stay_masked = 1.0;
        for (int64_t i = 0; i + 1 < steps; ++i) {
            const double p = sampler.unmask_prob(i);
            ASSERT_GE(p, 0.0);
            ASSERT_LE(p, 1.0);
            stay_masked *= 1.0 - p;
            // prod_{j<=i} m(t_{j+1}) / m(t_j) = m(t_{i+1}) / m(1)
            EXPECT_NEAR(stay_masked, schedule.mask_prob(sampler.t_next(i)) / schedule.mask_prob(1.0), 1e-12)
                << steps << " steps, step " << i;
        }
        EXPECT_EQ(sampler.unmask_prob(steps - 1), 1.0);
        EXPECT_EQ(stay_masked * (1.0 - sampler.unmask_prob(steps - 1)), 0.0);
    }
}

DiscreteSampler remasking_sampler(int64_t steps, DiscreteSampler::Remasking::Strategy strategy, double eta,
                                  double from_t = 1.0, double to_t = 0.0) {
    DiscreteSampler::Remasking r;
    r.strategy = strategy;
    r.eta = eta;
    r.from_t = from_t;
    r.to_t = to_t;
    return DiscreteSampler(MaskSchedule(1e-3), DiscreteSampler::Kind::analytic, steps, 0,
                           DiscreteSampler::Order::probability, r);
}

TEST(DiscreteSampler, RemaskingProbabilitiesFollowTheStrategy) {
    using Strategy = DiscreteSampler::Remasking::Strategy;
    const MaskSchedule schedule(1e-3);
    const int64_t steps = 20;
    const DiscreteSampler cap = remasking_sampler(steps, Strategy::cap, 0.05);
    const DiscreteSampler rescale = remasking_sampler(steps, Strategy::rescale, 0.5);
    const DiscreteSampler window = remasking_sampler(steps, Strategy::cap, 0.05, 0.6, 0.3);
    const DiscreteSampler plain(schedule, DiscreteSampler::Kind::analytic, steps);
    EXPECT_TRUE(cap.remasks());
    EXPECT_FALSE(plain.remasks());
    for (int64_t i = 0; i < steps; ++i) {
        const double m_t = schedule.mask_prob(cap.t(i)), m_s = schedule.mask_prob(cap.t_next(i));
        const double sigma_max = std::min(1.0, m_s / (1.0 - m_t));
        EXPECT_NEAR(cap.remask_prob(i), std::min(0.05, sigma_max), 1e-12) << i;
        EXPECT_NEAR(rescale.remask_prob(i), 0.5 * sigma_max, 1e-12) << i;
        const bool inside = cap.t(i) <= 0.6 + 1e-12 && cap.t(i) >= 0.3 - 1e-12;
        EXPECT_EQ(window.remask_prob(i) > 0.0, inside) << i << " at t " << cap.t(i);
        EXPECT_EQ(plain.remask_prob(i), 0.0);
        // ReMDM's unmasking probability keeps the masked share on the schedule: m(t) (1 - p) + (1 - m(t)) sigma = m(s).
        for (const DiscreteSampler* sampler : {&cap, &rescale, &window}) {
            const double p = sampler->unmask_prob(i), sigma = sampler->remask_prob(i);
            ASSERT_GE(p, 0.0);
            ASSERT_LE(p, 1.0);
            EXPECT_NEAR(m_t * (1.0 - p) + (1.0 - m_t) * sigma, i + 1 == steps ? 0.0 : m_s, 1e-12) << i;
        }
    }
    // The last step remasks nothing and unmasks everything.
    EXPECT_EQ(cap.remask_prob(steps - 1), 0.0);
    EXPECT_EQ(rescale.unmask_prob(steps - 1), 1.0);
    DiscreteSampler::Remasking r;
    r.strategy = Strategy::cap;
    r.eta = 0.1;
    EXPECT_THROW(DiscreteSampler(schedule, DiscreteSampler::Kind::euler, 5, 0, DiscreteSampler::Order::probability, r),
                 std::invalid_argument);
    r.to_t = 0.5;
    r.from_t = 0.4;
    EXPECT_THROW(
        DiscreteSampler(schedule, DiscreteSampler::Kind::analytic, 5, 0, DiscreteSampler::Order::probability, r),
        std::invalid_argument);
}

// Run as a chain over many positions, remasking masks committed tokens again and the masked share still follows the
// schedule step by step (the expected share, from the probabilities, within five binomial deviations); the last
// step leaves nothing masked.
TEST(DiscreteSampler, RemaskingChainKeepsTheMaskedShare) {
    const int64_t B = 200, L = 100, V = 3, steps = 40;
    const DiscreteSampler sampler = remasking_sampler(steps, DiscreteSampler::Remasking::Strategy::cap, 0.1);
    auto gen = make_gen(11);
    const at::Tensor logp0 = at::zeros({B, L, V});
    at::Tensor x = sampler.init(B, L, kMaskToken, at::Device(at::kCPU));
    double expected = 1.0;
    int64_t remasked = 0;
    for (int64_t i = 0; i < steps; ++i) {
        const at::Tensor before = x.ne(kMaskToken);
        x = sampler.step(x, logp0, i, kMaskToken, gen);
        remasked += before.logical_and(x.eq(kMaskToken)).sum().item<int64_t>();
        expected = expected * (1.0 - sampler.unmask_prob(i)) + (1.0 - expected) * sampler.remask_prob(i);
        const double share = x.eq(kMaskToken).to(at::kDouble).mean().item<double>();
        const double deviation = std::sqrt(std::max(expected * (1.0 - expected), 1e-12) / (B * L));
        EXPECT_NEAR(share, expected, 5 * deviation + 1e-12) << "step " << i;
    }
    EXPECT_GT(remasked, B * L / 10) << "remasking masked almost nothing again";
    EXPECT_FALSE(x.eq(kMaskToken).any().item<bool>());
}

TEST(DiscreteSampler, EulerEqualsAnalyticOnTheLogLinearSchedule) {
    // For sigma_bar(t) = -log(1 - (1-eps) t): sigma(t) e^{-sbar} / (1 - e^{-sbar}) = (1-eps) / ((1-eps) t) = 1/t,
    // so Euler's first-order probability (t - s) / t equals the analytic (m(t) - m(s)) / m(t) exactly; the two
    // differ only by floating-point rounding (a few ulps of numbers <= 1), hence the 1e-12 tolerance.
    const MaskSchedule schedule(1e-3);
    for (int64_t steps : {3, 64, 1000}) {
        const DiscreteSampler euler(schedule, DiscreteSampler::Kind::euler, steps);
        const DiscreteSampler analytic(schedule, DiscreteSampler::Kind::analytic, steps);
        for (int64_t i = 0; i < steps; ++i) {
            EXPECT_NEAR(euler.unmask_prob(i), analytic.unmask_prob(i), 1e-12) << steps << " steps, step " << i;
        }
    }
    EXPECT_THROW(DiscreteSampler(schedule, DiscreteSampler::Kind::euler, 5).unmask_prob(5), std::invalid_argument);
}

TEST(DiscreteSampler, CommittedTokensStayAndMaskIsNeverEmitted) {
    const int64_t B = 16, L = 12, V = 9;
    auto gen = make_gen(7);
    for (auto kind : {DiscreteSampler::Kind::euler, DiscreteSampler::Kind::analytic}) {
        const DiscreteSampler sampler(MaskSchedule(), kind, 20);
        // Committed tokens in the even columns; the odd columns start masked.
        at::Tensor x = at::randint(3, V, {B, L}, gen, at::kLong);
        x.slice(1, 1, L, 2).fill_(kMaskToken);
        const at::Tensor committed = x.slice(1, 0, L, 2).clone();
        at::Tensor previous = x.clone();
        for (int64_t i = 0; i < sampler.steps(); ++i) {
            at::Tensor logp0 = at::log_softmax(at::randn({B, L, V}, gen), 2);
            logp0.select(2, kMaskToken).fill_(5.0);  // most of the mass on the mask token: must still never be drawn
            x = sampler.step(x, logp0, i, kMaskToken, gen);
            EXPECT_EQ(x.scalar_type(), at::kLong);
            EXPECT_TRUE(at::equal(x.slice(1, 0, L, 2), committed)) << "step " << i;
            // A position unmasked at an earlier step never changes again.
            const at::Tensor was_unmasked = previous.ne(kMaskToken);
            EXPECT_TRUE(at::equal(x.masked_select(was_unmasked), previous.masked_select(was_unmasked)));
            previous = x.clone();
        }
        EXPECT_FALSE(x.eq(kMaskToken).any().item<bool>()) << "the last step unmasks every position";
    }
}

TEST(DiscreteSampler, LastStepUnmasksEverything) {
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::analytic, 10);
    auto gen = make_gen(1);
    const at::Tensor x = sampler.init(4, 6, kMaskToken, at::Device(at::kCPU));
    const at::Tensor out = sampler.step(x, at::zeros({4, 6, 5}), 9, kMaskToken, gen);
    EXPECT_FALSE(out.eq(kMaskToken).any().item<bool>());
    // An early step with the same state leaves most positions masked (P(unmask) = 1/10 each).
    const at::Tensor early = sampler.step(x, at::zeros({4, 6, 5}), 0, kMaskToken, gen);
    EXPECT_GT(early.eq(kMaskToken).sum().item<int64_t>(), 12);
}

TEST(DiscreteSampler, DrawsFollowTheSoftmax) {
    // One step that unmasks everything: the token frequencies estimate softmax(logp0) with mask removed.
    const int64_t N = 20000;
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::analytic, 1);
    auto gen = make_gen(2);
    const at::Tensor logits = at::tensor({-1.0f, 0.5f, 3.0f, 1.0f, 0.0f});  // index 2 is the mask
    const at::Tensor logp0 = logits.view({1, 1, 5}).expand({1, N, 5}).contiguous();
    const at::Tensor out =
        sampler.step(sampler.init(1, N, kMaskToken, at::Device(at::kCPU)), logp0, 0, kMaskToken, gen);
    at::Tensor expected = logits.clone();
    expected[kMaskToken] = -INFINITY;
    expected = at::softmax(expected, 0);
    const at::Tensor counts = at::bincount(out.view({N}), {}, 5).to(at::kDouble) / double(N);
    EXPECT_EQ(counts[kMaskToken].item<double>(), 0.0);
    // The standard error of each frequency is at most 0.5 / sqrt(20000) = 0.0035; allow ~4 of them.
    EXPECT_LT((counts - expected.to(at::kDouble)).abs().max().item<double>(), 0.015);
}

TEST(DiscreteSampler, SameSeedSameTokens) {
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::analytic, 30);
    auto run = [&](uint64_t seed) {
        auto gen = make_gen(seed);
        auto logits_gen = make_gen(100);  // the same model outputs in every run
        at::Tensor x = sampler.init(8, 10, kMaskToken, at::Device(at::kCPU));
        for (int64_t i = 0; i < sampler.steps(); ++i) {
            x = sampler.step(x, at::log_softmax(at::randn({8, 10, 50}, logits_gen), 2), i, kMaskToken, gen);
        }
        return x;
    };
    const at::Tensor a = run(4), b = run(4), c = run(5);
    EXPECT_TRUE(at::equal(a, b));
    EXPECT_FALSE(at::equal(a, c));
}

TEST(DiscreteSampler, StepValidatesInputs) {
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::analytic, 5);
    auto gen = make_gen(0);
    const at::Tensor x = sampler.init(2, 3, kMaskToken, at::Device(at::kCPU));
    EXPECT_THROW(sampler.step(x.to(at::kFloat), at::zeros({2, 3, 4}), 0, kMaskToken, gen), std::invalid_argument);
    EXPECT_THROW(sampler.step(x, at::zeros({2, 4, 4}), 0, kMaskToken, gen), std::invalid_argument);
    EXPECT_THROW(sampler.step(x, at::zeros({2, 3, 2}), 0, kMaskToken, gen), std::invalid_argument);
    EXPECT_THROW(sampler.step(x, at::zeros({2, 3, 4}), 5, kMaskToken, gen), std::invalid_argument);
}

TEST(DiscreteSampler, FirstHittingUnmasksOnePositionPerSequenceAtEachStep) {
    const int64_t B = 6, L = 9;
    const DiscreteSampler sampler(MaskSchedule(1e-3), DiscreteSampler::Kind::first_hitting, L);
    EXPECT_DOUBLE_EQ(sampler.t(0), 1.0);
    EXPECT_DOUBLE_EQ(sampler.t_next(L - 1), 0.0);
    for (int64_t i = 0; i + 1 < L; ++i) EXPECT_GT(sampler.t(i), sampler.t(i + 1));
    EXPECT_THROW(sampler.unmask_prob(0), std::logic_error);
    auto gen = make_gen(3);
    at::Tensor x = sampler.init(B, L, kMaskToken, at::Device(at::kCPU));
    x.index_put_({0, 4}, 7);  // sequence 0 starts with one position committed
    at::Tensor chosen_count = at::zeros({L}, at::kLong);
    for (int64_t i = 0; i < L; ++i) {
        const at::Tensor masked = x.eq(kMaskToken);
        const at::Tensor chosen = sampler.choose(masked, i, gen);
        EXPECT_TRUE(chosen.logical_and(masked.logical_not()).any().item<bool>() == false) << "step " << i;
        EXPECT_TRUE(at::equal(chosen.sum(1), masked.any(1).to(at::kLong))) << "one per sequence with any masked";
        chosen_count += chosen.sum(0);
        x = at::where(chosen, at::full_like(x, 5), x);
    }
    EXPECT_FALSE(x.eq(kMaskToken).any().item<bool>());
    EXPECT_EQ(chosen_count.sum().item<int64_t>(), B * L - 1);
}

TEST(DiscreteSampler, FirstHittingChoosesUniformlyAmongTheMaskedPositions) {
    const int64_t B = 30000, L = 5;
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::first_hitting, L);
    auto gen = make_gen(11);
    at::Tensor masked = at::ones({B, L}, at::kBool);
    masked.select(1, 1).fill_(false);  // four masked positions: each chosen a quarter of the time
    const at::Tensor share = sampler.choose(masked, 0, gen).sum(0).to(at::kDouble) / double(B);
    EXPECT_EQ(share[1].item<double>(), 0.0);
    for (int64_t i : {0, 2, 3, 4}) EXPECT_NEAR(share[i].item<double>(), 0.25, 0.01) << i;  // ~4 standard errors
}

// With blocks (BD3-LM's order): each step picks within the block of the sequence's leftmost masked position, so
// blocks fill left to right, each uniformly inside; a position committed ahead of time is skipped, not waited for.
TEST(DiscreteSampler, FirstHittingInBlocksFillsThemLeftToRight) {
    const int64_t B = 4000, L = 10, block = 4;  // blocks [0, 4), [4, 8), [8, 10)
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::first_hitting, L, block);
    auto gen = make_gen(12);
    at::Tensor x = sampler.init(B, L, kMaskToken, at::Device(at::kCPU));
    x.select(1, 5).fill_(7);  // committed in the second block from the start (a span word)
    at::Tensor first_pick = at::zeros({L}, at::kLong);
    for (int64_t i = 0; i < L; ++i) {
        const at::Tensor masked = x.eq(kMaskToken);
        const at::Tensor chosen = sampler.choose(masked, i, gen);
        // Every chosen position lies in the block of the leftmost masked one.
        const at::Tensor leftmost_block = masked.to(at::kByte).argmax(1).div(block, "floor");
        const at::Tensor chosen_block = chosen.to(at::kByte).argmax(1).div(block, "floor");
        const at::Tensor has = chosen.any(1);
        EXPECT_TRUE(at::equal(has, masked.any(1))) << "step " << i;
        EXPECT_TRUE(at::equal(leftmost_block.masked_select(has), chosen_block.masked_select(has))) << "step " << i;
        if (i == 0) first_pick = chosen.sum(0);
        x = at::where(chosen, at::full_like(x, 5), x);
    }
    EXPECT_FALSE(x.eq(kMaskToken).any().item<bool>());
    for (int64_t p = 0; p < block; ++p)
        EXPECT_NEAR(first_pick[p].item<double>() / B, 0.25, 0.03) << p;  // uniform inside
    EXPECT_EQ(first_pick.narrow(0, block, L - block).sum().item<int64_t>(), 0);
}

TEST(DiscreteSampler, ConfidenceSharesTheStepsAmongBlocksLeftToRight) {
    // 10 positions in blocks of 4 (4, 4, 2), 7 steps: 3, 2, 2 of them.
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::confidence, 7, 4);
    EXPECT_EQ(sampler.blocks(10), 3);
    const std::vector<std::array<int64_t, 3>> expected = {{0, 4, 3}, {0, 4, 2},  {0, 4, 1}, {4, 8, 2},
                                                          {4, 8, 1}, {8, 10, 2}, {8, 10, 1}};
    for (int64_t i = 0; i < 7; ++i) {
        const auto block = sampler.block_of(i, 10);
        EXPECT_EQ((std::array<int64_t, 3>{block.begin, block.end, block.steps_left}), expected[i]) << "step " << i;
    }
    EXPECT_THROW(DiscreteSampler(MaskSchedule(), DiscreteSampler::Kind::confidence, 2, 4).block_of(0, 10),
                 std::invalid_argument);  // 2 steps for 3 blocks
    EXPECT_EQ(DiscreteSampler(MaskSchedule(), DiscreteSampler::Kind::confidence, 5).blocks(10), 1);
    EXPECT_THROW(sampler.unmask_prob(0), std::logic_error);
    // choose: the masked positions of the step's block only, whatever is masked elsewhere.
    auto gen = make_gen(0);
    at::Tensor masked = at::ones({2, 10}, at::kBool);
    masked.index_put_({1, 5}, false);
    const at::Tensor chosen = sampler.choose(masked, 3, gen);
    at::Tensor expected_chosen = at::zeros({2, 10}, at::kBool);
    expected_chosen.narrow(1, 4, 4).fill_(true);
    expected_chosen.index_put_({1, 5}, false);
    EXPECT_TRUE(at::equal(chosen, expected_chosen));
}

TEST(DiscreteSampler, ConfidenceKeepsTheMostConfidentShareOfTheDrawn) {
    // Sequence 0: 5 drawn, 2 steps left -> 3 kept, the most confident; ties go left. Sequence 1: 1 drawn, kept.
    at::Tensor drawn = at::zeros({2, 6}, at::kBool);
    drawn[0].narrow(0, 0, 5).fill_(true);
    drawn.index_put_({1, 3}, true);
    const at::Tensor confidence =
        at::tensor({0.1f, 0.9f, 0.5f, 0.5f, 0.2f, 1.0f, 0.f, 0.f, 0.f, 0.3f, 0.f, 0.f}).view({2, 6});
    const at::Tensor kept = DiscreteSampler::keep_most_confident(drawn, confidence, 2);
    const at::Tensor expected = at::tensor({0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0}).ne(0).view({2, 6});
    EXPECT_TRUE(at::equal(kept, expected)) << kept;  // position 5 is the most confident but was not drawn
    EXPECT_TRUE(at::equal(DiscreteSampler::keep_most_confident(drawn, confidence, 1), drawn));  // the last step
}

TEST(DiscreteSampler, ConfidenceOrders) {
    // Row 0: one sure token; row 1: two equally likely; row 2: spread over four.
    const at::Tensor p =
        at::tensor({0.97f, 0.01f, 0.01f, 0.01f, 0.5f, 0.5f, 0.f, 0.f, 0.25f, 0.25f, 0.25f, 0.25f}).view({3, 4});
    const at::Tensor scores = p.log();
    const at::Tensor tokens = at::tensor({0, 1, 2}, at::kLong);
    const auto with = [&](DiscreteSampler::Order order) {
        return DiscreteSampler(MaskSchedule(), DiscreteSampler::Kind::confidence, 4, 0, order)
            .confidence(scores, tokens);
    };
    EXPECT_TRUE(at::allclose(with(DiscreteSampler::Order::probability), at::tensor({0.97f, 0.5f, 0.25f})));
    EXPECT_TRUE(at::allclose(with(DiscreteSampler::Order::margin), at::tensor({0.96f, 0.f, 0.f}), 1e-5, 1e-6));
    const at::Tensor entropy = with(DiscreteSampler::Order::entropy);  // minus the entropy, finite with p = 0 tokens
    EXPECT_TRUE(entropy.isfinite().all().item<bool>());
    EXPECT_NEAR(entropy[1].item<float>(), -std::log(2.0), 1e-5);
    EXPECT_NEAR(entropy[2].item<float>(), -std::log(4.0), 1e-5);
    EXPECT_GT(entropy[0].item<float>(), entropy[1].item<float>());
}

TEST(DiscreteSampler, ConfidenceStepsUnmaskEveryPositionBlockByBlock) {
    const int64_t B = 3, L = 10, V = 6;
    const DiscreteSampler sampler(MaskSchedule(), DiscreteSampler::Kind::confidence, 7, 4);
    auto gen = make_gen(5);
    at::Tensor logp = at::log_softmax(at::randn({B, L, V}), -1);
    logp.select(2, kMaskToken).fill_(-INFINITY);
    at::Tensor x = sampler.init(B, L, kMaskToken, at::Device(at::kCPU));
    for (int64_t i = 0; i < 7; ++i) {
        const auto block = sampler.block_of(i, L);
        const at::Tensor before = x.eq(kMaskToken);
        x = sampler.step(x, logp, i, kMaskToken, gen);
        const at::Tensor unmasked = before.logical_and(x.ne(kMaskToken));
        // Only the block's positions change, ceil(m / steps_left) of them per sequence.
        EXPECT_FALSE(unmasked.narrow(1, 0, block.begin).any().item<bool>()) << "step " << i;
        EXPECT_FALSE(unmasked.narrow(1, block.end, L - block.end).any().item<bool>()) << "step " << i;
        const at::Tensor m = before.narrow(1, block.begin, block.end - block.begin).sum(1);
        EXPECT_TRUE(at::equal(unmasked.sum(1), m.add(block.steps_left - 1).div(block.steps_left, "floor")))
            << "step " << i;
    }
    EXPECT_FALSE(x.eq(kMaskToken).any().item<bool>());
}

TEST(DiscreteSampler, TruncateKeepsTopKAndTheNucleus) {
    at::Tensor scores = at::tensor({0.5f, 0.2f, 0.15f, 0.1f, 0.05f}).log().view({1, 5}).repeat({2, 1});
    DiscreteSampler::truncate(scores, 2, 1.0);
    EXPECT_TRUE(scores.isfinite().equal(at::tensor({1, 1, 0, 0, 0}).ne(0).view({1, 5}).repeat({2, 1})));
    at::Tensor nucleus = at::tensor({0.5f, 0.2f, 0.15f, 0.1f, 0.05f}).log().view({1, 5});
    DiscreteSampler::truncate(nucleus, 0, 0.8);  // 0.5 + 0.2 < 0.8 <= 0.5 + 0.2 + 0.15
    EXPECT_TRUE(nucleus.isfinite().equal(at::tensor({1, 1, 1, 0, 0}).ne(0).view({1, 5})));
    at::Tensor tiny = at::tensor({0.5f, 0.2f, 0.3f}).log().view({1, 3});
    DiscreteSampler::truncate(tiny, 0, 0.01);  // the best token always stays
    EXPECT_TRUE(tiny.isfinite().equal(at::tensor({1, 0, 0}).ne(0).view({1, 3})));
}

TEST(DiscreteSampler, DrawNamesTheRowWithNothingToSample) {
    auto gen = make_gen(0);
    at::Tensor scores = at::zeros({3, 4});
    scores[1].fill_(-INFINITY);
    try {
        DiscreteSampler::draw(scores, gen);
        FAIL() << "a row with no finite score was drawn from";
    } catch (const NothingToSample& e) {
        EXPECT_EQ(e.row, 1);
    }
    scores[1].fill_(0.0f);
    scores.index_put_({2, 0}, NAN);
    EXPECT_THROW(DiscreteSampler::draw(scores, gen), NothingToSample);
    EXPECT_EQ(DiscreteSampler::draw(at::zeros({0, 4}), gen).size(0), 0);
}

}  // namespace
}  // namespace rudder
