#include <rudder/nn/schedule.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

namespace rudder {

const char* family_name(Family f) {
    switch (f) {
        case Family::continuous: return "continuous";
        case Family::discrete: return "discrete";
    }
    return "unknown";
}

namespace {

constexpr double kPi = 3.14159265358979323846;

// Betas from a continuous alpha_bar function f, as improved-diffusion's betas_for_alpha_bar builds them.
std::vector<double> betas_from_alpha_bar(const std::function<double(double)>& f, int64_t T, double max_beta) {
    std::vector<double> betas(static_cast<size_t>(T));
    for (int64_t k = 1; k <= T; ++k) {
        const double t_prev = static_cast<double>(k - 1) / static_cast<double>(T);
        const double t_cur = static_cast<double>(k) / static_cast<double>(T);
        betas[static_cast<size_t>(k - 1)] = std::min(1.0 - f(t_cur) / f(t_prev), max_beta);
    }
    return betas;
}

}  // namespace

GaussianSchedule GaussianSchedule::make(const std::string& name, int64_t T, double s, double max_beta) {
    if (T < 1) throw std::invalid_argument("GaussianSchedule: T must be >= 1, got " + std::to_string(T));
    if (!(max_beta > 0.0 && max_beta <= 1.0)) {
        throw std::invalid_argument("GaussianSchedule: max_beta must be in (0, 1], got " + std::to_string(max_beta));
    }

    std::vector<double> betas;
    if (name == "sqrt") {
        if (!(s > 0.0 && s < 1.0)) {
            throw std::invalid_argument("GaussianSchedule 'sqrt': s must be in (0, 1), got " + std::to_string(s));
        }
        betas = betas_from_alpha_bar([s](double t) { return 1.0 - std::sqrt(t + s); }, T, max_beta);
    } else if (name == "cosine") {
        // Nichol & Dhariwal's fixed offset 0.008; `s` is the sqrt schedule's parameter and is not used here.
        betas = betas_from_alpha_bar(
            [](double t) {
                const double c = std::cos((t + 0.008) / 1.008 * kPi / 2.0);
                return c * c;
            },
            T, max_beta);
    } else if (name == "linear") {
        // DDPM's range for 1000 steps, rescaled so other T keep the same total noise.
        const double scale = 1000.0 / static_cast<double>(T);
        const double start = scale * 1e-4, end = scale * 0.02;
        betas.resize(static_cast<size_t>(T));
        for (int64_t k = 0; k < T; ++k) {
            const double frac = T == 1 ? 0.0 : static_cast<double>(k) / static_cast<double>(T - 1);
            betas[static_cast<size_t>(k)] = std::min(start + (end - start) * frac, max_beta);
        }
    } else {
        throw std::invalid_argument("unknown Gaussian schedule '" + name + "'; valid names: sqrt, cosine, linear");
    }

    GaussianSchedule schedule;
    schedule.name_ = name;
    schedule.alpha_bar_.resize(static_cast<size_t>(T) + 1);
    schedule.alpha_bar_[0] = 1.0;
    for (size_t k = 1; k <= static_cast<size_t>(T); ++k) {
        schedule.alpha_bar_[k] = schedule.alpha_bar_[k - 1] * (1.0 - betas[k - 1]);
    }
    return schedule;
}

double GaussianSchedule::alpha_bar_at(double t) const {
    if (!(t >= 0.0 && t <= 1.0)) {
        throw std::invalid_argument("GaussianSchedule::alpha_bar_at: t must be in [0, 1], got " + std::to_string(t));
    }
    const double x = t * static_cast<double>(T());
    const auto k = std::min(static_cast<int64_t>(std::floor(x)), T());
    if (k == T()) return alpha_bar(k);
    const double frac = x - static_cast<double>(k);
    return (1.0 - frac) * alpha_bar(k) + frac * alpha_bar(k + 1);
}

double MaskSchedule::sigma_bar(double t) const { return -std::log1p(-mask_prob(t)); }

double MaskSchedule::sigma(double t) const { return (1.0 - eps_) / (1.0 - mask_prob(t)); }

}  // namespace rudder
