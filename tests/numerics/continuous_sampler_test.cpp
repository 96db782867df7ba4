#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampler.hpp"
#include "seeded_generator.hpp"

namespace rudder {
namespace {

TEST(ContinuousSampler, RespacingGivesDecreasingUniqueTimesteps) {
    const auto schedule = GaussianSchedule::make("sqrt", 1000);
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, 100);
    ASSERT_EQ(sampler.steps(), 100);
    EXPECT_EQ(sampler.timestep(0), 1000);
    EXPECT_EQ(sampler.timestep(99), 1);
    EXPECT_DOUBLE_EQ(sampler.t(0), 1.0);
    EXPECT_DOUBLE_EQ(sampler.t_next(98), sampler.t(99));
    EXPECT_DOUBLE_EQ(sampler.t_next(99), 0.0);

    // Every step count on a small schedule: exactly `steps` strictly decreasing timesteps from T to 1.
    const int64_t T = 37;
    const auto small = GaussianSchedule::make("cosine", T);
    for (int64_t steps = 1; steps <= T; ++steps) {
        const ContinuousSampler s(small, ContinuousSampler::Kind::ddpm, steps);
        ASSERT_EQ(s.steps(), steps);
        EXPECT_EQ(s.timestep(0), T);
        if (steps > 1) {
            EXPECT_EQ(s.timestep(steps - 1), 1);
        }
        for (int64_t i = 1; i < steps; ++i) EXPECT_LT(s.timestep(i), s.timestep(i - 1)) << steps << " steps";
        // Evenly spaced: each gap is within one of the ideal (T - 1) / (steps - 1).
        if (steps > 1) {
            const double ideal = double(T - 1) / double(steps - 1);
            for (int64_t i = 1; i < steps; ++i) {
                EXPECT_LE(std::abs(double(s.timestep(i - 1) - s.timestep(i)) - ideal), 1.0) << steps << " steps";
            }
        }
    }
    EXPECT_EQ(ContinuousSampler(small, ContinuousSampler::Kind::ddpm, T).timestep(T - 1), 1);
}

TEST(ContinuousSampler, BadStepCountsAreRejected) {
    const auto schedule = GaussianSchedule::make("sqrt", 50);
    for (int64_t steps : {int64_t{0}, int64_t{51}}) {
        try {
            ContinuousSampler(schedule, ContinuousSampler::Kind::ddim, steps);
            ADD_FAILURE() << "no throw for " << steps;
        } catch (const std::invalid_argument& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(std::to_string(steps)), std::string::npos) << what;
            EXPECT_NE(what.find("50"), std::string::npos) << what;
        }
    }
    EXPECT_THROW(ContinuousSampler(schedule, ContinuousSampler::Kind::ddim, 10, -1.0), std::invalid_argument);
    EXPECT_THROW(ContinuousSampler(schedule, ContinuousSampler::Kind::ddpm, 10, 0.0, -0.5), std::invalid_argument);
}

TEST(ContinuousSampler, DdimWithTrueX0RecoversItExactly) {
    const auto schedule = GaussianSchedule::make("sqrt", 1000);
    auto gen = make_gen(3);
    const at::Tensor x0 = at::randn({2, 5, 8}, gen, at::kFloat);
    for (int64_t steps : {1, 7, 100}) {
        const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, steps, 0.0);
        at::Tensor x = sampler.q_sample(x0, sampler.timestep(0), gen);
        for (int64_t i = 0; i < steps; ++i) {
            const auto r = sampler.step(x, x0, i, gen);
            EXPECT_EQ(r.sigma, 0.0);
            x = r.sample;
        }
        EXPECT_LT((x - x0).abs().max().item<double>(), 1e-5) << steps << " steps";
    }
}

TEST(ContinuousSampler, DdpmMatchesGaussianConditioning) {
    // q(x_k' | x_k, x0) computed independently as a product of two Gaussians in x_k':
    //   prior q(x_k' | x0) = N(sqrt(ab') x0, 1 - ab'), likelihood q(x_k | x_k') = N(sqrt(a) x_k', 1 - a), a = ab/ab'.
    const auto schedule = GaussianSchedule::make("sqrt", 20);
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddpm, 4);  // timesteps 20, 14, 7, 1
    ASSERT_EQ(sampler.timestep(1), 14);
    ASSERT_EQ(sampler.timestep(2), 7);
    const double ab = schedule.alpha_bar(14), ab_next = schedule.alpha_bar(7);
    const double a = ab / ab_next;
    const double precision = 1.0 / (1.0 - ab_next) + a / (1.0 - a);
    const double x0 = 0.7, x_k = -1.3;
    const double mean = (std::sqrt(ab_next) * x0 / (1.0 - ab_next) + std::sqrt(a) * x_k / (1.0 - a)) / precision;

    auto gen = make_gen(0);
    const auto r = sampler.step(at::full({1, 1, 1}, x_k), at::full({1, 1, 1}, x0), 1, gen);
    EXPECT_NEAR(r.mean.item<double>(), mean, 1e-6);
    EXPECT_NEAR(r.sigma * r.sigma, 1.0 / precision, 1e-12);

    // The last step lands on x0 with no noise.
    const auto last = sampler.step(at::full({1, 1, 1}, x_k), at::full({1, 1, 1}, x0), 3, gen);
    EXPECT_EQ(last.sigma, 0.0);
    EXPECT_NEAR(last.sample.item<double>(), x0, 1e-6);
}

TEST(ContinuousSampler, DdimEtaOneHasPosteriorVariance) {
    // DDIM with eta = 1 has the same variance as DDPM's posterior (Song et al., eq. 16).
    const auto schedule = GaussianSchedule::make("cosine", 100);
    const ContinuousSampler ddim(schedule, ContinuousSampler::Kind::ddim, 10, 1.0);
    const ContinuousSampler ddpm(schedule, ContinuousSampler::Kind::ddpm, 10);
    auto gen = make_gen(0);
    const at::Tensor x = at::full({1}, 0.3), x0 = at::full({1}, -0.2);
    for (int64_t i = 0; i < 9; ++i) {
        EXPECT_NEAR(ddim.step(x, x0, i, gen).sigma, ddpm.step(x, x0, i, gen).sigma, 1e-12) << "step " << i;
    }
}

TEST(ContinuousSampler, NoiseScaleMultipliesOnlyTheAddedNoise) {
    // Same seed, same posterior: the sample's distance from the mean scales with noise_scale, and 0 gives the mean.
    const auto schedule = GaussianSchedule::make("sqrt", 100);
    const at::Tensor x = at::full({2, 3, 4}, 0.3), x0 = at::full({2, 3, 4}, -0.2);
    for (auto kind : {ContinuousSampler::Kind::ddpm, ContinuousSampler::Kind::ddim}) {
        const ContinuousSampler full(schedule, kind, 10, 1.0, 1.0), scaled(schedule, kind, 10, 1.0, 0.6),
            none(schedule, kind, 10, 1.0, 0.0);
        auto gen_a = make_gen(5), gen_b = make_gen(5), gen_c = make_gen(5);
        const auto a = full.step(x, x0, 2, gen_a), b = scaled.step(x, x0, 2, gen_b), c = none.step(x, x0, 2, gen_c);
        ASSERT_GT(a.sigma, 0.0);
        EXPECT_TRUE(at::allclose(a.mean, b.mean));
        EXPECT_DOUBLE_EQ(a.sigma, b.sigma);  // the posterior is the model's; only the draw is scaled
        EXPECT_TRUE(at::allclose(b.sample - b.mean, 0.6 * (a.sample - a.mean), 1e-5, 1e-6));
        EXPECT_FALSE(at::allclose(a.sample, a.mean));
        EXPECT_TRUE(at::equal(c.sample, c.mean));
    }
}

TEST(ContinuousSampler, SameSeedSameSamples) {
    const auto schedule = GaussianSchedule::make("sqrt", 100);
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddpm, 25);
    auto run = [&](uint64_t seed) {
        auto gen = make_gen(seed);
        at::Tensor x = sampler.init({3, 4, 6}, gen, at::Tensor());
        const at::Tensor x0 = at::zeros({3, 4, 6}) + 0.5;
        // The whole trajectory: the last step lands exactly on x0 whatever the seed.
        std::vector<at::Tensor> trajectory = {x};
        for (int64_t i = 0; i < sampler.steps(); ++i) {
            x = sampler.step(x, x0, i, gen).sample;
            trajectory.push_back(x);
        }
        return at::stack(trajectory);
    };
    const at::Tensor a = run(11), b = run(11), c = run(12);
    EXPECT_EQ(a.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(a, b));
    EXPECT_FALSE(at::equal(a, c));
}

TEST(ContinuousSampler, QSampleHasTheMarginalMoments) {
    const auto schedule = GaussianSchedule::make("sqrt", 1000);
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, 10);
    auto gen = make_gen(5);
    const at::Tensor x0 = at::full({200000}, 2.0f);
    const at::Tensor x = sampler.q_sample(x0, 300, gen);
    const double ab = schedule.alpha_bar(300);
    // 200k draws: the standard error of the mean is ~0.002, of the variance ~0.003.
    EXPECT_NEAR(x.mean().item<double>(), std::sqrt(ab) * 2.0, 0.01);
    EXPECT_NEAR(x.var().item<double>(), 1.0 - ab, 0.015);
    EXPECT_TRUE(at::equal(sampler.q_sample(x0.slice(0, 0, 5), 0, gen), x0.slice(0, 0, 5)));
    EXPECT_THROW(sampler.q_sample(x0, 1001, gen), std::invalid_argument);
}

TEST(ContinuousSampler, StepValidatesInputs) {
    const auto schedule = GaussianSchedule::make("sqrt", 100);
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, 10);
    auto gen = make_gen(0);
    const at::Tensor x = at::zeros({2, 3, 4});
    EXPECT_THROW(sampler.step(x, at::zeros({2, 3, 5}), 0, gen), std::invalid_argument);
    EXPECT_THROW(sampler.step(x, x, 10, gen), std::invalid_argument);
    EXPECT_THROW(sampler.step(x, at::zeros({2, 3, 4}, at::kLong), 0, gen), std::invalid_argument);
}

}  // namespace
}  // namespace rudder
