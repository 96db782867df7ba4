// The two diffusion families and their noise schedules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rudder {

// Continuous: Gaussian noise on token embeddings (Diffusion-LM, CDCD). Discrete: absorbing (masking) noise on
// tokens (SEDD, MDLM).
enum class Family { continuous, discrete };
const char* family_name(Family f);

// Gaussian (variance-preserving) schedule over T discrete training steps, as improved-diffusion/Diffusion-LM
// build it: beta_k = min(1 - f(k/T) / f((k-1)/T), max_beta) and alpha_bar_k = prod_{j<=k} (1 - beta_j).
// Step k in 0..T has diffusion time t = k / T; alpha_bar(0) = 1.
class GaussianSchedule {
public:
    // "sqrt": Diffusion-LM's f(t) = 1 - sqrt(t + s); "cosine": Nichol & Dhariwal; "linear": DDPM's betas.
    static GaussianSchedule make(const std::string& name, int64_t T, double s = 1e-4, double max_beta = 0.999);

    int64_t T() const { return static_cast<int64_t>(alpha_bar_.size()) - 1; }
    const std::string& name() const { return name_; }
    double alpha_bar(int64_t k) const { return alpha_bar_.at(static_cast<size_t>(k)); }
    // alpha_bar at a continuous time t in [0, 1], linearly interpolated between steps.
    double alpha_bar_at(double t) const;

private:
    std::string name_;
    std::vector<double> alpha_bar_;  // size T + 1
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

}  // namespace rudder
