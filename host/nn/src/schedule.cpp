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

GaussianSchedule GaussianSchedule::make_cdcd(const TimeWarp& warp, int64_t T) {
    if (T < 1) throw std::invalid_argument("GaussianSchedule: T must be >= 1, got " + std::to_string(T));
    GaussianSchedule schedule;
    schedule.name_ = "cdcd";
    schedule.alpha_bar_.resize(static_cast<size_t>(T) + 1);
    schedule.alpha_bar_[0] = 1.0;
    for (int64_t k = 1; k <= T; ++k) {
        const double sigma = warp.sigma(static_cast<double>(k) / static_cast<double>(T));
        schedule.alpha_bar_[static_cast<size_t>(k)] = 1.0 / (1.0 + sigma * sigma);
    }
    schedule.warp_ = std::make_shared<const TimeWarp>(warp);
    return schedule;
}

GaussianSchedule GaussianSchedule::make_cdcd(double sigma_min, double sigma_max, const std::vector<double>& warp,
                                             int64_t bins, int64_t T) {
    return make_cdcd(
        warp.empty() ? TimeWarp::uniform(sigma_min, sigma_max, bins) : TimeWarp(sigma_min, sigma_max, warp), T);
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

TimeWarp::TimeWarp(double sigma_min, double sigma_max, std::vector<double> cdf)
    : sigma_min_(sigma_min), sigma_max_(sigma_max), cdf_(std::move(cdf)) {
    if (!(sigma_min > 0.0 && sigma_max > sigma_min && std::isfinite(sigma_max)))
        throw std::invalid_argument("TimeWarp: need 0 < sigma_min < sigma_max, got " + std::to_string(sigma_min) +
                                    " and " + std::to_string(sigma_max));
    if (cdf_.size() < 2) throw std::invalid_argument("TimeWarp: the CDF needs at least 2 values (one bin)");
    if (std::abs(cdf_.front()) > 1e-9 || std::abs(cdf_.back() - 1.0) > 1e-9)
        throw std::invalid_argument("TimeWarp: the CDF must run from 0 to 1");
    for (size_t j = 1; j < cdf_.size(); ++j)
        if (!(cdf_[j] >= cdf_[j - 1]))
            throw std::invalid_argument("TimeWarp: the CDF decreases at value " + std::to_string(j));
    cdf_.front() = 0.0;
    cdf_.back() = 1.0;
}

TimeWarp TimeWarp::uniform(double sigma_min, double sigma_max, int64_t bins) {
    if (bins < 1) throw std::invalid_argument("TimeWarp: bins must be >= 1, got " + std::to_string(bins));
    std::vector<double> cdf(static_cast<size_t>(bins) + 1);
    for (int64_t j = 0; j <= bins; ++j)
        cdf[static_cast<size_t>(j)] = static_cast<double>(j) / static_cast<double>(bins);
    return TimeWarp(sigma_min, sigma_max, std::move(cdf));
}

double TimeWarp::level(double u) const {
    if (!(u >= 0.0 && u <= 1.0))
        throw std::invalid_argument("TimeWarp::level: u must be in [0, 1], got " + std::to_string(u));
    // The first bin whose upper edge reaches u (passes it, for u = 0): a bin of zero mass is never chosen.
    const auto upper =
        u > 0.0 ? std::lower_bound(cdf_.begin() + 1, cdf_.end(), u) : std::upper_bound(cdf_.begin() + 1, cdf_.end(), u);
    const auto j = static_cast<size_t>(
                       std::min<std::ptrdiff_t>(upper - cdf_.begin(), static_cast<std::ptrdiff_t>(cdf_.size()) - 1)) -
                   1;
    const double width = cdf_[j + 1] - cdf_[j];
    const double frac = width > 0.0 ? std::clamp((u - cdf_[j]) / width, 0.0, 1.0) : 0.0;
    return (static_cast<double>(j) + frac) / static_cast<double>(bins());
}

double TimeWarp::sigma_of_level(double level) const {
    return std::exp(std::log(sigma_min_) + level * (std::log(sigma_max_) - std::log(sigma_min_)));
}

std::vector<double> fit_time_warp(const std::vector<double>& mean_loss, const std::vector<double>& seen, double floor) {
    const size_t K = mean_loss.size();
    if (K == 0 || seen.size() != K)
        throw std::invalid_argument("fit_time_warp: need as many bins of loss as of weight, at least one");
    if (!(floor >= 0.0 && floor <= 1.0)) throw std::invalid_argument("fit_time_warp: floor must be in [0, 1]");
    std::vector<double> cdf(K + 1);
    const bool all_seen = std::all_of(seen.begin(), seen.end(), [](double w) { return w > 0.0; });
    if (!all_seen || K == 1) {
        for (size_t j = 0; j <= K; ++j) cdf[j] = static_cast<double>(j) / static_cast<double>(K);
        return cdf;
    }
    // Pool adjacent violators: blocks of bins with their weighted mean, merged while a block is below the one before.
    struct Block {
        double sum, weight;
        size_t count;
    };
    std::vector<Block> blocks;
    for (size_t j = 0; j < K; ++j) {
        blocks.push_back({mean_loss[j] * seen[j], seen[j], 1});
        while (blocks.size() > 1) {
            const Block& b = blocks.back();
            const Block& a = blocks[blocks.size() - 2];
            if (a.sum / a.weight <= b.sum / b.weight) break;
            const Block merged{a.sum + b.sum, a.weight + b.weight, a.count + b.count};
            blocks.pop_back();
            blocks.back() = merged;
        }
    }
    std::vector<double> fit;
    fit.reserve(K);
    for (const Block& b : blocks) fit.insert(fit.end(), b.count, b.sum / b.weight);
    // The fit runs linearly between bin centres, flat beyond the outer ones: its rise over bin j is half of each
    // neighbouring centre-to-centre step.
    std::vector<double> rise(K, 0.0);
    for (size_t j = 0; j + 1 < K; ++j) {
        const double step = fit[j + 1] - fit[j];
        rise[j] += step / 2.0;
        rise[j + 1] += step / 2.0;
    }
    double total = 0.0;
    for (double r : rise) total += r;
    for (size_t j = 0; j < K; ++j) {
        const double share = total > 0.0 ? rise[j] / total : 1.0 / static_cast<double>(K);
        cdf[j + 1] = cdf[j] + (1.0 - floor) * share + floor / static_cast<double>(K);
    }
    for (double& c : cdf) c /= cdf[K];
    return cdf;
}

double MaskSchedule::sigma_bar(double t) const { return -std::log1p(-mask_prob(t)); }

double MaskSchedule::sigma(double t) const { return (1.0 - eps_) / (1.0 - mask_prob(t)); }

UniformNoiseSchedule::UniformNoiseSchedule(double sigma_min, double sigma_max)
    : sigma_min_(sigma_min), sigma_max_(sigma_max) {
    if (!(sigma_min > 0) || !(sigma_max > sigma_min))
        throw std::invalid_argument("geometric noise needs 0 < sigma_min < sigma_max (got " +
                                    std::to_string(sigma_min) + ", " + std::to_string(sigma_max) + ")");
}

UniformNoiseSchedule UniformNoiseSchedule::log_linear(double eps) {
    if (!(eps > 0) || !(eps < 1))
        throw std::invalid_argument("log-linear noise needs 0 < eps < 1 (got " + std::to_string(eps) + ")");
    UniformNoiseSchedule s;
    s.sigma_min_ = s.sigma_max_ = 0.0;
    s.eps_ = eps;
    return s;
}

double UniformNoiseSchedule::sigma_bar(double t) const {
    if (!geometric()) return MaskSchedule(eps_).sigma_bar(t);  // the masking schedule's total noise
    return std::exp((1.0 - t) * std::log(sigma_min_) + t * std::log(sigma_max_));
}

double UniformNoiseSchedule::sigma(double t) const {
    if (!geometric()) return MaskSchedule(eps_).sigma(t);
    return sigma_bar(t) * std::log(sigma_max_ / sigma_min_);
}

}  // namespace rudder
