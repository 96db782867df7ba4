// The two diffusion families and their noise schedules.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rudder {

// Continuous: Gaussian noise on token embeddings (Diffusion-LM, CDCD). Discrete: absorbing (masking) noise on
// tokens (SEDD, MDLM).
enum class Family { continuous, discrete };
const char* family_name(Family f);

// CDCD's time warp (Dieleman et al. 2022, section 3.4): where in the noise range the steps go. A noise level is
// written as its normalised log, level = (log sigma - log sigma_min) / (log sigma_max - log sigma_min) in [0, 1];
// the warp is a monotone piecewise-linear CDF F over levels with `bins` equal bins, and warped time u in [0, 1]
// has level F^-1(u). Training draws u uniformly (so levels come with density F'), and so do the samplers' steps.
class TimeWarp {
public:
    // `cdf`: bins + 1 values at the bin edges, nondecreasing from 0 to 1 (checked; std::invalid_argument).
    TimeWarp(double sigma_min, double sigma_max, std::vector<double> cdf);
    // The warp before anything is learned: levels uniform, i.e. sigma log-uniform.
    static TimeWarp uniform(double sigma_min, double sigma_max, int64_t bins);

    double sigma_min() const { return sigma_min_; }
    double sigma_max() const { return sigma_max_; }
    int64_t bins() const { return static_cast<int64_t>(cdf_.size()) - 1; }
    const std::vector<double>& cdf() const { return cdf_; }
    // F^-1(u) for u in [0, 1]: the level at warped time u.
    double level(double u) const;
    double sigma_of_level(double level) const;
    double sigma(double u) const { return sigma_of_level(level(u)); }

private:
    double sigma_min_, sigma_max_;
    std::vector<double> cdf_;
};

// The warp CDCD learns: fit a monotone function to the cross-entropy loss against the noise level and take its
// normalised increments as the density of levels, so training spends its steps where the loss still changes.
// `mean_loss` holds, per bin, the running mean loss seen at levels in that bin; `seen`, how much was seen there.
// The fit is the least-squares nondecreasing fit (pool adjacent violators, weighted by `seen`) of the bin means,
// linear between bin centres; each bin keeps at least `floor` / bins of the mass so no level goes unvisited (and
// its loss stale). Bins never seen leave the warp uniform. Returns the bins + 1 CDF values.
std::vector<double> fit_time_warp(const std::vector<double>& mean_loss, const std::vector<double>& seen, double floor);

// Gaussian (variance-preserving) schedule over T discrete training steps, as improved-diffusion/Diffusion-LM
// build it: beta_k = min(1 - f(k/T) / f((k-1)/T), max_beta) and alpha_bar_k = prod_{j<=k} (1 - beta_j).
// Step k in 0..T has diffusion time t = k / T; alpha_bar(0) = 1.
class GaussianSchedule {
public:
    // "sqrt": Diffusion-LM's f(t) = 1 - sqrt(t + s); "cosine": Nichol & Dhariwal; "linear": DDPM's betas.
    static GaussianSchedule make(const std::string& name, int64_t T, double s = 1e-4, double max_beta = 0.999);

    // CDCD's variance-exploding noise x0 + sigma * eps, sigma = warp.sigma(k / T) for k >= 1, as the
    // variance-preserving form the samplers run (embeddings of unit scale per dimension): divided by
    // sqrt(1 + sigma^2), it is sqrt(ab) x0 + sqrt(1 - ab) eps with ab = 1 / (1 + sigma^2). Step 0 is clean data
    // (ab = 1): the last reverse step goes from sigma_min to the clean estimate. Named "cdcd".
    static GaussianSchedule make_cdcd(const TimeWarp& warp, int64_t T);
    // make_cdcd over `warp` (a CDF of bins + 1 values), or over the uniform warp of `bins` bins when it is empty.
    static GaussianSchedule make_cdcd(double sigma_min, double sigma_max, const std::vector<double>& warp, int64_t bins,
                                      int64_t T);

    int64_t T() const { return static_cast<int64_t>(alpha_bar_.size()) - 1; }
    const std::string& name() const { return name_; }
    double alpha_bar(int64_t k) const { return alpha_bar_.at(static_cast<size_t>(k)); }
    // alpha_bar at a continuous time t in [0, 1], linearly interpolated between steps.
    double alpha_bar_at(double t) const;
    // The warp of a "cdcd" schedule; nullptr for the others.
    const TimeWarp* warp() const { return warp_.get(); }

private:
    std::string name_;
    std::vector<double> alpha_bar_;  // size T + 1
    std::shared_ptr<const TimeWarp> warp_;
};

// Absorbing-state (masking) schedule, log-linear as in SEDD/MDLM: total noise sigma_bar(t) = -log(1 - (1-eps) t),
// so a token is masked at time t with probability 1 - exp(-sigma_bar(t)) = (1 - eps) t.
class MaskSchedule {
public:
    explicit MaskSchedule(double eps = 1e-3) : eps_(eps) {}
    double mask_prob(double t) const { return (1.0 - eps_) * t; }
    double sigma_bar(double t) const;  // total noise
    double sigma(double t) const;      // noise rate d sigma_bar / dt
    double eps() const { return eps_; }

private:
    double eps_;
};

// The total noise of a uniform-graph diffusion (any token may be redrawn as any other): a token has kept its value at
// time t with probability alpha(t) = exp(-sigma_bar(t)). Geometric, SEDD's: sigma_bar(t) = sigma_min^(1-t) sigma_max^t.
// Log-linear, UDLM's and DUO's: alpha(t) = 1 - (1 - eps) t, i.e. sigma_bar(t) = -log(1 - (1 - eps) t).
class UniformNoiseSchedule {
public:
    // Geometric (std::invalid_argument unless 0 < sigma_min < sigma_max).
    UniformNoiseSchedule(double sigma_min = 1e-4, double sigma_max = 20.0);
    // Log-linear (std::invalid_argument unless 0 < eps < 1).
    static UniformNoiseSchedule log_linear(double eps = 1e-3);

    double sigma_bar(double t) const;  // total noise
    double sigma(double t) const;      // noise rate d sigma_bar / dt
    double alpha(double t) const { return std::exp(-sigma_bar(t)); }
    bool geometric() const { return eps_ == 0.0; }
    double sigma_min() const { return sigma_min_; }  // geometric only
    double sigma_max() const { return sigma_max_; }  // geometric only
    double eps() const { return eps_; }              // log-linear only

private:
    double sigma_min_ = 0.0, sigma_max_ = 0.0, eps_ = 0.0;
};

}  // namespace rudder
