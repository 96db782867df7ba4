#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <rudder/nn/schedule.hpp>

namespace rudder {
namespace {

constexpr double kPi = 3.14159265358979323846;

TEST(GaussianSchedule, SqrtMatchesProductOfBetas) {
    const int64_t T = 1000;
    const double s = 1e-4;
    const auto schedule = GaussianSchedule::make("sqrt", T, s);
    EXPECT_EQ(schedule.T(), T);
    EXPECT_EQ(schedule.name(), "sqrt");
    EXPECT_EQ(schedule.alpha_bar(0), 1.0);

    auto f = [s](double t) { return 1.0 - std::sqrt(t + s); };
    double product = 1.0;
    for (int64_t k = 1; k <= T; ++k) {
        const double beta = std::min(1.0 - f(double(k) / T) / f(double(k - 1) / T), 0.999);
        product *= 1.0 - beta;
        if (k == 1 || k == 10 || k == 250 || k == 999 || k == 1000) {
            EXPECT_NEAR(schedule.alpha_bar(k), product, 1e-12 * std::max(product, 1e-300)) << "k = " << k;
        }
        // Before the last step no beta is clipped, so the product telescopes to f(k/T) / f(0).
        if (k < T) {
            EXPECT_NEAR(schedule.alpha_bar(k), f(double(k) / T) / f(0.0), 1e-10) << "k = " << k;
        }
    }
    // f(1) < 0 makes the last beta exceed 1; the clip at max_beta keeps alpha_bar(T) positive and tiny.
    EXPECT_GT(schedule.alpha_bar(T), 0.0);
    EXPECT_LT(schedule.alpha_bar(T), 1e-6);
    EXPECT_NEAR(schedule.alpha_bar(T), schedule.alpha_bar(T - 1) * (1.0 - 0.999), 1e-15);
    EXPECT_THROW(schedule.alpha_bar(T + 1), std::out_of_range);
}

TEST(GaussianSchedule, EveryScheduleDecreasesFromOne) {
    for (const char* name : {"sqrt", "cosine", "linear"}) {
        for (int64_t T : {1, 10, 1000}) {
            const auto schedule = GaussianSchedule::make(name, T);
            EXPECT_EQ(schedule.alpha_bar(0), 1.0);
            for (int64_t k = 1; k <= T; ++k) {
                EXPECT_LT(schedule.alpha_bar(k), schedule.alpha_bar(k - 1)) << name << " T=" << T << " k=" << k;
                EXPECT_GT(schedule.alpha_bar(k), 0.0) << name << " T=" << T << " k=" << k;
            }
            // With a single step, DDPM's linear betas hold only the first (small) beta; skip the endpoint there.
            if (T > 1) {
                EXPECT_LT(schedule.alpha_bar(T), 1e-3) << name << " T=" << T;
            }
        }
    }
}

TEST(GaussianSchedule, CosineFollowsNicholDhariwal) {
    const int64_t T = 1000;
    const auto schedule = GaussianSchedule::make("cosine", T);
    auto f = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * kPi / 2.0), 2.0); };
    for (int64_t k : {1, 100, 500, 900}) {
        EXPECT_NEAR(schedule.alpha_bar(k), f(double(k) / T) / f(0.0), 1e-9) << "k = " << k;
    }
    EXPECT_NEAR(schedule.alpha_bar(500), 0.5, 0.03);  // the cosine schedule's midpoint is near 1/2
}

TEST(GaussianSchedule, LinearUsesDdpmBetas) {
    const auto schedule = GaussianSchedule::make("linear", 1000);
    EXPECT_NEAR(schedule.alpha_bar(1), 1.0 - 1e-4, 1e-15);
    EXPECT_NEAR(schedule.alpha_bar(2), (1.0 - 1e-4) * (1.0 - (1e-4 + (0.02 - 1e-4) / 999.0)), 1e-15);
    // sum of betas = 1000 * (1e-4 + 0.02) / 2 = 10.05, and log(1 - b) ~ -b - b^2/2.
    EXPECT_NEAR(std::log(schedule.alpha_bar(1000)), -10.05, 0.2);

    // Fewer steps keep the same total noise: betas are scaled by 1000 / T.
    const auto short_schedule = GaussianSchedule::make("linear", 100);
    EXPECT_NEAR(short_schedule.alpha_bar(1), 1.0 - 1e-3, 1e-15);
    EXPECT_LT(short_schedule.alpha_bar(100), 1e-4);
}

TEST(GaussianSchedule, AlphaBarAtInterpolates) {
    const auto schedule = GaussianSchedule::make("sqrt", 1000);
    EXPECT_DOUBLE_EQ(schedule.alpha_bar_at(0.0), 1.0);
    EXPECT_DOUBLE_EQ(schedule.alpha_bar_at(0.5), schedule.alpha_bar(500));
    EXPECT_DOUBLE_EQ(schedule.alpha_bar_at(1.0), schedule.alpha_bar(1000));
    EXPECT_NEAR(schedule.alpha_bar_at(0.0105), 0.5 * (schedule.alpha_bar(10) + schedule.alpha_bar(11)), 1e-12);
    EXPECT_THROW(schedule.alpha_bar_at(-0.1), std::invalid_argument);
    EXPECT_THROW(schedule.alpha_bar_at(1.5), std::invalid_argument);
    EXPECT_THROW(schedule.alpha_bar_at(std::nan("")), std::invalid_argument);
}

TEST(GaussianSchedule, BadArgumentsAreRejected) {
    try {
        GaussianSchedule::make("quadratic", 100);
        ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        for (const char* part : {"quadratic", "sqrt", "cosine", "linear"}) {
            EXPECT_NE(what.find(part), std::string::npos) << what;
        }
    }
    EXPECT_THROW(GaussianSchedule::make("sqrt", 0), std::invalid_argument);
    EXPECT_THROW(GaussianSchedule::make("sqrt", -5), std::invalid_argument);
    EXPECT_THROW(GaussianSchedule::make("sqrt", 10, 1e-4, 0.0), std::invalid_argument);
}

TEST(TimeWarp, UniformWarpIsLogUniformInSigmaAndLevelInvertsTheCdf) {
    const TimeWarp w = TimeWarp::uniform(1.0, 300.0, 10);
    EXPECT_EQ(w.bins(), 10);
    for (double u : {0.0, 0.05, 0.5, 0.93, 1.0}) EXPECT_NEAR(w.level(u), u, 1e-12) << u;
    EXPECT_NEAR(w.sigma(0.0), 1.0, 1e-12);
    EXPECT_NEAR(w.sigma(1.0), 300.0, 1e-9);
    EXPECT_NEAR(w.sigma(0.5), std::sqrt(300.0), 1e-9);  // log-uniform: the geometric mean halfway

    // A warp with all its mass in the second of two bins: every u lands there, and F(F^-1(u)) = u.
    const TimeWarp skewed(1.0, 100.0, {0.0, 0.2, 1.0});
    EXPECT_NEAR(skewed.level(0.1), 0.25, 1e-12);
    EXPECT_NEAR(skewed.level(0.2), 0.5, 1e-12);
    EXPECT_NEAR(skewed.level(0.6), 0.75, 1e-12);
    const TimeWarp flat(1.0, 100.0, {0.0, 0.0, 1.0});  // a bin of no mass is skipped
    EXPECT_NEAR(flat.level(0.0), 0.5, 1e-12);
    EXPECT_NEAR(flat.level(0.5), 0.75, 1e-12);
}

TEST(TimeWarp, BadWarpsAreRefused) {
    EXPECT_THROW(TimeWarp(0.0, 300.0, {0.0, 1.0}), std::invalid_argument);
    EXPECT_THROW(TimeWarp(5.0, 2.0, {0.0, 1.0}), std::invalid_argument);
    EXPECT_THROW(TimeWarp(1.0, 300.0, {0.0}), std::invalid_argument);
    EXPECT_THROW(TimeWarp(1.0, 300.0, {0.1, 1.0}), std::invalid_argument);
    EXPECT_THROW(TimeWarp(1.0, 300.0, {0.0, 0.6, 0.4, 1.0}), std::invalid_argument);
    EXPECT_THROW(TimeWarp(1.0, 300.0, {0.0, 0.5, 0.9}), std::invalid_argument);
    EXPECT_THROW(TimeWarp::uniform(1.0, 300.0, 0), std::invalid_argument);
    EXPECT_THROW(TimeWarp::uniform(1.0, 300.0, 4).level(1.5), std::invalid_argument);
}

// The learned warp is a CDF (monotone, from 0 to 1, so its density integrates to one), puts its mass where the
// fitted loss rises, keeps the floor in every bin, and fits a loss that dips by pooling (it never decreases).
TEST(TimeWarp, FittedWarpIsMonotoneIntegratesToOneAndFollowsTheLossesRise) {
    const size_t K = 8;
    // Loss flat, then a steep rise in bins 3-4, flat again: a sigmoid in the level, as cross-entropy is.
    const std::vector<double> loss = {0.1, 0.1, 0.1, 1.0, 3.0, 4.0, 4.0, 4.0};
    const std::vector<double> seen(K, 10.0);
    const double floor = 0.05;
    const std::vector<double> cdf = fit_time_warp(loss, seen, floor);
    ASSERT_EQ(cdf.size(), K + 1);
    EXPECT_EQ(cdf.front(), 0.0);
    EXPECT_NEAR(cdf.back(), 1.0, 1e-15);
    double integral = 0.0;
    std::vector<double> density(K);
    for (size_t j = 0; j < K; ++j) {
        const double mass = cdf[j + 1] - cdf[j];
        EXPECT_GE(mass, floor / static_cast<double>(K) - 1e-15) << "bin " << j;
        density[j] = mass * static_cast<double>(K);  // per unit of level
        integral += density[j] / static_cast<double>(K);
    }
    EXPECT_NEAR(integral, 1.0, 1e-12);
    // Linear between bin centres, the fit rises (0.9 + 2.0) / 2 over bin 3, 2 / 2 + 1 / 2 over bin 4, ...
    const double total = 4.0 - 0.1;
    const std::vector<double> rise = {0, 0, 0.45, 1.45, 1.5, 0.5, 0, 0};
    for (size_t j = 0; j < K; ++j)
        EXPECT_NEAR(cdf[j + 1] - cdf[j], (1 - floor) * rise[j] / total + floor / K, 1e-12) << "bin " << j;
    EXPECT_GT(density[3], 2.5);  // 2.88: the steep bins get most of the levels
    EXPECT_LT(density[0], 0.1);
    TimeWarp(1.0, 300.0, cdf);  // a valid warp

    // A dip is pooled: bins 1 and 2 (0.5 then 0.3, equal weights) become 0.4 each, so no mass between them.
    const std::vector<double> dip = fit_time_warp({0.0, 0.5, 0.3, 1.0}, std::vector<double>(4, 1.0), 0.0);
    // The fit 0, 0.4, 0.4, 1 rises by 1 in all: 0.2 over bin 1 (half the step before it), 0.3 over bin 2.
    EXPECT_NEAR(dip[2] - dip[1], 0.2, 1e-12);
    EXPECT_NEAR(dip[3] - dip[2], 0.3, 1e-12);
    for (size_t j = 0; j + 1 < dip.size(); ++j) EXPECT_LE(dip[j], dip[j + 1]);

    // Until every bin has been seen the warp stays uniform; a flat loss gives the uniform warp too.
    std::vector<double> unseen(K, 1.0);
    unseen[5] = 0.0;
    const std::vector<double> waiting = fit_time_warp(loss, unseen, floor),
                              flat = fit_time_warp(std::vector<double>(K, 2.0), seen, floor);
    for (size_t j = 0; j <= K; ++j) {
        EXPECT_NEAR(waiting[j], static_cast<double>(j) / K, 1e-15);
        EXPECT_NEAR(flat[j], static_cast<double>(j) / K, 1e-15);
    }
    EXPECT_THROW(fit_time_warp({1.0, 2.0}, {1.0}, 0.0), std::invalid_argument);
    EXPECT_THROW(fit_time_warp({1.0, 2.0}, {1.0, 1.0}, 1.5), std::invalid_argument);
}

// CDCD's variance-exploding noise as the samplers' variance-preserving table: ab = 1 / (1 + sigma^2) at the warp's
// sigma, clean at step 0.
TEST(GaussianSchedule, CdcdIsTheWarpsSigmaInVariancePreservingForm) {
    const TimeWarp warp(1.0, 300.0, {0.0, 0.1, 0.9, 1.0});
    const GaussianSchedule s = GaussianSchedule::make_cdcd(warp, 50);
    EXPECT_EQ(s.name(), "cdcd");
    EXPECT_EQ(s.T(), 50);
    ASSERT_NE(s.warp(), nullptr);
    EXPECT_EQ(s.warp()->cdf(), warp.cdf());
    EXPECT_EQ(s.alpha_bar(0), 1.0);
    for (int64_t k = 1; k <= 50; ++k) {
        const double sigma = warp.sigma(static_cast<double>(k) / 50.0);
        EXPECT_NEAR(s.alpha_bar(k), 1.0 / (1.0 + sigma * sigma), 1e-15) << k;
        EXPECT_LT(s.alpha_bar(k), s.alpha_bar(k - 1)) << k;
    }
    EXPECT_NEAR(s.alpha_bar(50), 1.0 / (1.0 + 300.0 * 300.0), 1e-15);
    EXPECT_EQ(GaussianSchedule::make("sqrt", 10).warp(), nullptr);
    EXPECT_THROW(GaussianSchedule::make_cdcd(warp, 0), std::invalid_argument);
}

TEST(MaskSchedule, LogLinearNoise) {
    const MaskSchedule schedule(1e-3);
    EXPECT_DOUBLE_EQ(schedule.eps(), 1e-3);
    for (double t : {0.0, 0.1, 0.5, 0.9, 1.0}) {
        EXPECT_NEAR(schedule.mask_prob(t), (1.0 - 1e-3) * t, 1e-15);
        // A token is masked with probability 1 - exp(-sigma_bar).
        EXPECT_NEAR(1.0 - std::exp(-schedule.sigma_bar(t)), schedule.mask_prob(t), 1e-12) << "t = " << t;
    }
    EXPECT_EQ(schedule.sigma_bar(0.0), 0.0);
    EXPECT_NEAR(schedule.sigma_bar(1.0), -std::log(1e-3), 1e-9);
    // sigma is the derivative of sigma_bar: compare with a central difference.
    for (double t : {0.1, 0.5, 0.99}) {
        const double h = 1e-6;
        const double numeric = (schedule.sigma_bar(t + h) - schedule.sigma_bar(t - h)) / (2 * h);
        EXPECT_NEAR(schedule.sigma(t), numeric, 1e-5 * numeric) << "t = " << t;
    }
}

}  // namespace
}  // namespace rudder
