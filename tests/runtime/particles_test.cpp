// Particles' resampling and choice, and the combination restricted to whole sequences, on tensors set by hand.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "particles.hpp"

namespace {

rudder::Reward rewards(const at::Tensor& values) {
    rudder::Reward r;
    r.log_prob = values;
    return r;
}
rudder::Reward rewards(const std::vector<float>& values) { return rewards(at::tensor(values)); }

TEST(Particles, ResamplingDrawsEachParticleInProportionToTheExponentOfItsRewardGain) {
    const int64_t samples = 3000;
    rudder::Particles swarm(samples, 2, 1.0);
    EXPECT_FALSE(swarm.scored());
    EXPECT_TRUE(swarm.leaders().equal(at::arange(samples, at::kLong).mul(2)));  // before any reward: the first
    std::vector<float> r;
    for (int64_t s = 0; s < samples; ++s) r.insert(r.end(), {0.0f, static_cast<float>(std::log(3.0))});
    swarm.score(rewards(r), 0);
    EXPECT_TRUE(swarm.leaders().equal(at::arange(samples, at::kLong).mul(2).add(1)));
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const at::Tensor rows = swarm.resample(gen);
    ASSERT_EQ(rows.size(0), samples * 2);
    // Each row continues a particle of its own sample; the second one three times as often (3:1).
    EXPECT_TRUE(rows.div(2, "floor").equal(at::arange(samples * 2, at::kLong).div(2, "floor")));
    const double second = rows.remainder(2).to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(second, 0.75, 0.02);
    // The rewards moved with their particles, and the next gain is counted from them: each row now gains log 3 at
    // the first particle of a sample and nothing at the second, on top of the reward it carried over, so the first
    // is drawn three times as often whichever particles the rows continued.
    const at::Tensor carried = rows.remainder(2).to(at::kFloat).mul(std::log(3.0));
    const at::Tensor gain = at::arange(samples * 2, at::kLong).remainder(2).eq(0).to(at::kFloat).mul(std::log(3.0));
    const at::Tensor next = carried.add(gain);
    swarm.score(rewards(next), 1);
    const double first = 1.0 - swarm.resample(gen).remainder(2).to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(first, 0.75, 0.02);
}

TEST(Particles, AllTheSameRewardGainDrawsUniformly) {
    rudder::Particles swarm(2000, 4, 5.0);
    swarm.score(rewards(std::vector<float>(8000, -3.0f)), 0);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const at::Tensor counts = at::bincount(swarm.resample(gen).remainder(4));
    for (int64_t j = 0; j < 4; ++j) EXPECT_NEAR(counts[j].item<int64_t>() / 8000.0, 0.25, 0.02);
}

TEST(Particles, ACombinationIsTakenASequenceAtATime) {
    const int64_t B = 3, L = 2, V = 4;
    rudder::Combined c;
    c.rows = at::arange(B * L, at::kLong);
    c.fixed = at::tensor(std::vector<int64_t>{-1, 1, 2, -1, 3, 3}).view({B, L});
    c.forbidden = at::arange(B * L * V, at::kLong).remainder(3).eq(0).view({B * L, V});
    c.logit_delta = at::arange(B * L * V, at::kFloat).view({B * L, V});
    const at::Tensor pick = at::tensor(std::vector<int64_t>{2, 0, 2});
    const rudder::Combined out = rudder::select_sequences(c, pick, B, L);
    EXPECT_TRUE(out.rows.equal(at::arange(3 * L, at::kLong)));
    EXPECT_TRUE(out.fixed.equal(at::tensor(std::vector<int64_t>{3, 3, -1, 1, 3, 3}).view({3, L})));
    EXPECT_TRUE(out.forbidden.view({3, L, V})[1].equal(c.forbidden.view({B, L, V})[0]));
    EXPECT_TRUE(out.logit_delta.view({3, L, V})[2].equal(c.logit_delta.view({B, L, V})[2]));
    EXPECT_FALSE(out.candidate_ids.defined());
    // Rows over some positions only cannot be taken whole.
    c.rows = at::arange(B * L - 1, at::kLong);
    EXPECT_THROW(rudder::select_sequences(c, pick, B, L), std::logic_error);
}

}  // namespace
