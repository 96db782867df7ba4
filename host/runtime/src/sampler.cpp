#include "sampler.hpp"

#include <ATen/ATen.h>

#include <rudder/nn/score_entropy.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace rudder {

namespace {

at::Device target_device(const at::Tensor& like) { return like.defined() ? like.device() : at::Device(at::kCPU); }

std::string shape_string(const at::Tensor& t) {
    std::ostringstream out;
    out << t.sizes();
    return out.str();
}

}  // namespace

at::Tensor randn_like_device(const std::vector<int64_t>& sizes, at::Generator& gen, const at::Tensor& like) {
    // Always drawn on the CPU so a seed gives the same numbers whatever the device.
    return at::randn(sizes, gen, at::TensorOptions().dtype(at::kFloat)).to(target_device(like));
}

at::Tensor rand_like_device(const std::vector<int64_t>& sizes, at::Generator& gen, const at::Tensor& like) {
    return at::rand(sizes, gen, at::TensorOptions().dtype(at::kFloat)).to(target_device(like));
}

// ---------------------------------------------------------------------------------------------------------------
// Continuous family

ContinuousSampler::ContinuousSampler(const GaussianSchedule& schedule, Kind kind, int64_t steps, double eta,
                                     double noise_scale)
    : schedule_(schedule), kind_(kind), eta_(eta), noise_scale_(noise_scale) {
    const int64_t T = schedule_.T();
    if (steps < 1 || steps > T) {
        throw std::invalid_argument("ContinuousSampler: steps must be in [1, T=" + std::to_string(T) + "], got " +
                                    std::to_string(steps));
    }
    if (!(eta >= 0.0)) throw std::invalid_argument("ContinuousSampler: eta must be >= 0, got " + std::to_string(eta));
    if (!(noise_scale >= 0.0)) {
        throw std::invalid_argument("ContinuousSampler: noise_scale must be >= 0, got " + std::to_string(noise_scale));
    }
    // timestep(i) = T - round(i (T-1) / (steps-1)), in integer arithmetic so it is exact. The spacing is >= 1
    // because steps <= T, so the rounded timesteps are strictly decreasing and end at 1.
    timesteps_.resize(static_cast<size_t>(steps));
    for (int64_t i = 0; i < steps; ++i) {
        const int64_t offset = steps == 1 ? 0 : (2 * i * (T - 1) + (steps - 1)) / (2 * (steps - 1));
        timesteps_[static_cast<size_t>(i)] = T - offset;
    }
}

double ContinuousSampler::t(int64_t i) const {
    return static_cast<double>(timestep(i)) / static_cast<double>(schedule_.T());
}

double ContinuousSampler::t_next(int64_t i) const {
    if (i < 0 || i >= steps()) {
        throw std::out_of_range("ContinuousSampler: step " + std::to_string(i) + " out of range [0, " +
                                std::to_string(steps()) + ")");
    }
    return i + 1 < steps() ? t(i + 1) : 0.0;
}

at::Tensor ContinuousSampler::init(const std::vector<int64_t>& sizes, at::Generator& gen,
                                   const at::Tensor& like) const {
    return randn_like_device(sizes, gen, like);
}

ContinuousSampler::Result ContinuousSampler::step(const at::Tensor& x_t, const at::Tensor& x0_hat, int64_t i,
                                                  at::Generator& gen) const {
    if (i < 0 || i >= steps()) {
        throw std::invalid_argument("ContinuousSampler::step: step " + std::to_string(i) + " out of range [0, " +
                                    std::to_string(steps()) + ")");
    }
    if (!x_t.defined() || !x0_hat.defined() || !x_t.is_floating_point() || !x0_hat.is_floating_point()) {
        throw std::invalid_argument("ContinuousSampler::step: x_t and x0_hat must be defined floating-point tensors");
    }
    if (!x_t.sizes().equals(x0_hat.sizes())) {
        throw std::invalid_argument("ContinuousSampler::step: x_t " + shape_string(x_t) + " and x0_hat " +
                                    shape_string(x0_hat) + " differ in shape");
    }

    const int64_t k = timestep(i);
    const int64_t k_next = i + 1 < steps() ? timestep(i + 1) : 0;
    const double ab = schedule_.alpha_bar(k);
    const double ab_next = schedule_.alpha_bar(k_next);

    Result r;
    if (kind_ == Kind::ddpm) {
        // q(x_{k'} | x_k, x0) for the respaced pair: beta is the effective one-step beta from k' to k.
        const double beta = 1.0 - ab / ab_next;
        const double c0 = std::sqrt(ab_next) * beta / (1.0 - ab);
        const double ck = std::sqrt(1.0 - beta) * (1.0 - ab_next) / (1.0 - ab);
        r.mean = c0 * x0_hat + ck * x_t;
        r.sigma = k_next == 0 ? 0.0 : std::sqrt(std::max(beta * (1.0 - ab_next) / (1.0 - ab), 0.0));
    } else {
        const at::Tensor eps = (x_t - std::sqrt(ab) * x0_hat) / std::sqrt(1.0 - ab);
        r.sigma = eta_ * std::sqrt((1.0 - ab_next) / (1.0 - ab)) * std::sqrt(std::max(1.0 - ab / ab_next, 0.0));
        const double dir = std::sqrt(std::max(1.0 - ab_next - r.sigma * r.sigma, 0.0));
        r.mean = std::sqrt(ab_next) * x0_hat + dir * eps;
    }
    if (r.sigma > 0.0 && noise_scale_ > 0.0) {
        r.sample =
            r.mean + noise_scale_ * r.sigma * randn_like_device(x_t.sizes().vec(), gen, x_t).to(r.mean.scalar_type());
    } else {
        r.sample = r.mean;
    }
    return r;
}

at::Tensor ContinuousSampler::q_sample(const at::Tensor& x0, int64_t k, at::Generator& gen) const {
    if (k < 0 || k > schedule_.T()) {
        throw std::invalid_argument("ContinuousSampler::q_sample: timestep " + std::to_string(k) +
                                    " out of range [0, " + std::to_string(schedule_.T()) + "]");
    }
    if (!x0.defined() || !x0.is_floating_point()) {
        throw std::invalid_argument("ContinuousSampler::q_sample: x0 must be a defined floating-point tensor");
    }
    const double ab = schedule_.alpha_bar(k);
    const at::Tensor noise = randn_like_device(x0.sizes().vec(), gen, x0).to(x0.scalar_type());
    return std::sqrt(ab) * x0 + std::sqrt(1.0 - ab) * noise;
}

// ---------------------------------------------------------------------------------------------------------------
// Discrete family

DiscreteSampler::DiscreteSampler(const MaskSchedule& schedule, Kind kind, int64_t steps, int64_t block_length,
                                 Order order, Remasking remasking)
    : schedule_(schedule), kind_(kind), steps_(steps), block_length_(block_length), order_(order),
      remasking_(remasking) {
    if (steps < 1) throw std::invalid_argument("DiscreteSampler: steps must be >= 1, got " + std::to_string(steps));
    if (block_length < 0)
        throw std::invalid_argument("DiscreteSampler: block_length must be >= 0, got " + std::to_string(block_length));
    if (remasks()) {
        if (kind != Kind::analytic)
            throw std::invalid_argument("DiscreteSampler: remasking takes the analytic sampler");
        if (!(remasking.eta >= 0.0 && remasking.eta <= 1.0))
            throw std::invalid_argument("DiscreteSampler: remasking eta must be in [0, 1], got " +
                                        std::to_string(remasking.eta));
        if (!(remasking.to_t >= 0.0 && remasking.to_t <= remasking.from_t && remasking.from_t <= 1.0))
            throw std::invalid_argument("DiscreteSampler: the remasking window needs 0 <= to_t <= from_t <= 1");
    }
}

namespace {
// Positions per block of the confidence sampler (the last block may be shorter).
int64_t block_size(int64_t length, int64_t block_length) {
    return block_length > 0 ? std::min(block_length, length) : length;
}
}  // namespace

int64_t DiscreteSampler::block_count(int64_t length, int64_t block_length) {
    const int64_t b = block_size(length, block_length);
    return (length + b - 1) / b;
}

DiscreteSampler::Block DiscreteSampler::block_of(int64_t i, int64_t length) const {
    const int64_t n = blocks(length);
    if (steps_ < n) {
        throw std::invalid_argument("confidence sampler: " + std::to_string(steps_) + " steps for " +
                                    std::to_string(n) + " blocks; each block needs a step");
    }
    if (i < 0 || i >= steps_) {
        throw std::invalid_argument("DiscreteSampler: step " + std::to_string(i) + " out of range [0, " +
                                    std::to_string(steps_) + ")");
    }
    // The steps are shared evenly, the first steps_ % n blocks taking one more.
    const int64_t base = steps_ / n, extra = steps_ % n, b = block_size(length, block_length_);
    int64_t first = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t count = base + (k < extra ? 1 : 0);
        if (i < first + count) return Block{k * b, std::min(length, (k + 1) * b), first + count - i};
        first += count;
    }
    throw std::logic_error("DiscreteSampler::block_of: no block for step " + std::to_string(i));
}

at::Tensor keep_highest(const at::Tensor& drawn, const at::Tensor& score, const at::Tensor& count) {
    const int64_t B = drawn.size(0), L = drawn.size(1);
    const at::Tensor ranked =
        score.to(at::kFloat).masked_fill(drawn.logical_not(), -std::numeric_limits<float>::infinity());
    // Highest first; a stable sort keeps equal ones in position order.
    const at::Tensor order = std::get<1>(ranked.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
    const at::Tensor rank = at::empty_like(order).scatter_(1, order, at::arange(L, order.options()).expand({B, L}));
    return rank.lt(count.to(rank.device()).unsqueeze(1)).logical_and_(drawn);
}

at::Tensor DiscreteSampler::keep_most_confident(const at::Tensor& drawn, const at::Tensor& confidence,
                                                int64_t steps_left) {
    if (steps_left < 1) throw std::invalid_argument("keep_most_confident: steps_left must be >= 1");
    return keep_highest(drawn, confidence, drawn.sum(1).add_(steps_left - 1).div_(steps_left, "floor"));  // ceil(m/r)
}

at::Tensor DiscreteSampler::kept_rows(const at::Tensor& positions, const at::Tensor& scores, const at::Tensor& tokens,
                                      int64_t batch, int64_t length, int64_t i) const {
    const int64_t n = batch * length;
    const at::Tensor drawn = at::zeros({n}, positions.options().dtype(at::kBool)).index_fill_(0, positions, true);
    const at::Tensor conf =
        at::zeros({n}, scores.options().dtype(at::kFloat)).index_copy_(0, positions, confidence(scores, tokens));
    const at::Tensor kept =
        keep_most_confident(drawn.view({batch, length}), conf.view({batch, length}), block_of(i, length).steps_left);
    return kept.view({-1}).index_select(0, positions).nonzero().squeeze(1);
}

at::Tensor DiscreteSampler::confidence(const at::Tensor& scores, const at::Tensor& tokens) const {
    const at::Tensor logp = at::log_softmax(scores.to(at::kFloat), 1);
    switch (order_) {
        case Order::probability: return logp.gather(1, tokens.unsqueeze(1)).squeeze(1).exp();
        case Order::margin: {
            if (logp.size(1) < 2) return logp.exp().squeeze(1);
            const at::Tensor top = std::get<0>(logp.topk(2, 1)).exp();
            return top.select(1, 0) - top.select(1, 1);
        }
        case Order::entropy: {
            const at::Tensor p = logp.exp();  // 0 * -inf is NaN: tokens that cannot be drawn add nothing
            return at::where(p.gt(0), p * logp, at::zeros_like(p)).sum(1);  // minus the entropy
        }
    }
    throw std::logic_error("DiscreteSampler::confidence: unknown order");
}

void DiscreteSampler::truncate(at::Tensor& scores, int64_t top_k, double top_p) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int64_t V = scores.size(1);
    if (top_k > 0 && top_k < V) {
        // Ties with the k-th score stay (as in Hugging Face's top-k filter).
        const at::Tensor kth = std::get<0>(scores.topk(top_k, 1)).narrow(1, top_k - 1, 1);
        scores.masked_fill_(scores.lt(kth), neg_inf);
    }
    if (top_p < 1.0) {
        const auto [sorted, index] = scores.sort(1, /*descending=*/true);
        const at::Tensor p = at::softmax(sorted.to(at::kDouble), 1);
        // A token stays while the tokens above it hold less than top_p: the smallest set reaching top_p.
        const at::Tensor dropped_sorted = (p.cumsum(1) - p).ge(top_p);
        scores.masked_fill_(at::zeros_like(dropped_sorted).scatter_(1, index, dropped_sorted), neg_inf);
    }
}

double DiscreteSampler::t(int64_t i) const {
    const double share = 1.0 - static_cast<double>(i) / static_cast<double>(steps_);
    if (kind_ != Kind::first_hitting) return share;
    return std::min(1.0, share / schedule_.mask_prob(1.0));  // m(t) = (1 - eps) t
}

double DiscreteSampler::t_next(int64_t i) const { return i + 1 >= steps_ ? 0.0 : t(i + 1); }

at::Tensor DiscreteSampler::init(int64_t batch, int64_t len, int64_t mask_id, const at::Device& device) const {
    if (batch < 1 || len < 1) {
        throw std::invalid_argument("DiscreteSampler::init: batch and length must be >= 1, got " +
                                    std::to_string(batch) + " x " + std::to_string(len));
    }
    return at::full({batch, len}, mask_id, at::TensorOptions().dtype(at::kLong).device(device));
}

double DiscreteSampler::unmask_prob(int64_t i) const {
    if (i < 0 || i >= steps_) {
        throw std::invalid_argument("DiscreteSampler: step " + std::to_string(i) + " out of range [0, " +
                                    std::to_string(steps_) + ")");
    }
    if (kind_ == Kind::first_hitting || kind_ == Kind::confidence)
        throw std::logic_error(
            "DiscreteSampler: first_hitting and confidence choose positions, not each with a probability");
    if (i + 1 == steps_) return 1.0;
    const double t_cur = t(i), s = t_next(i);
    if (kind_ == Kind::analytic) {
        const double m_t = schedule_.mask_prob(t_cur);
        // ReMDM: (a(s) - (1 - sigma) a(t)) / (1 - a(t)) with a = 1 - m; sigma = 0 is the plain posterior.
        return std::min(1.0, (m_t - schedule_.mask_prob(s) + remask_prob(i) * (1.0 - m_t)) / m_t);
    }
    const double sbar = schedule_.sigma_bar(t_cur);
    const double p = (t_cur - s) * schedule_.sigma(t_cur) * std::exp(-sbar) / -std::expm1(-sbar);
    return std::clamp(p, 0.0, 1.0);
}

double DiscreteSampler::remask_prob(int64_t i) const {
    if (!remasks()) return 0.0;
    if (i < 0 || i >= steps_) {
        throw std::invalid_argument("DiscreteSampler: step " + std::to_string(i) + " out of range [0, " +
                                    std::to_string(steps_) + ")");
    }
    const double t_cur = t(i), s = t_next(i);
    if (t_cur > remasking_.from_t || t_cur < remasking_.to_t) return 0.0;
    // The most a step may remask: every token remasked beyond it would leave more masked at s than m(s).
    const double committed = 1.0 - schedule_.mask_prob(t_cur);
    const double sigma_max = committed > 0.0 ? std::min(1.0, schedule_.mask_prob(s) / committed) : 0.0;
    return remasking_.strategy == Remasking::Strategy::cap ? std::min(remasking_.eta, sigma_max)
                                                           : remasking_.eta * sigma_max;
}

at::Tensor DiscreteSampler::remask(const at::Tensor& committed, int64_t i, at::Generator& gen) const {
    if (!committed.defined() || committed.scalar_type() != at::kBool || committed.dim() != 2) {
        throw std::invalid_argument("DiscreteSampler::remask: committed must be bool [B, L], got " +
                                    (committed.defined() ? shape_string(committed) : std::string("undefined")));
    }
    const double sigma = remask_prob(i);
    if (sigma <= 0.0) return at::zeros_like(committed);
    const at::Tensor u = rand_like_device({committed.size(0), committed.size(1)}, gen, committed);
    return committed.logical_and(u.lt(sigma));
}

at::Tensor DiscreteSampler::choose(const at::Tensor& masked, int64_t i, at::Generator& gen) const {
    if (!masked.defined() || masked.scalar_type() != at::kBool || masked.dim() != 2) {
        throw std::invalid_argument("DiscreteSampler::choose: masked must be bool [B, L], got " +
                                    (masked.defined() ? shape_string(masked) : std::string("undefined")));
    }
    if (i < 0 || i >= steps_) {
        throw std::invalid_argument("DiscreteSampler: step " + std::to_string(i) + " out of range [0, " +
                                    std::to_string(steps_) + ")");
    }
    if (kind_ == Kind::confidence) {
        const Block block = block_of(i, masked.size(1));
        at::Tensor in_block = at::zeros_like(masked);
        in_block.narrow(1, block.begin, block.end - block.begin)
            .copy_(masked.narrow(1, block.begin, block.end - block.begin));
        return in_block;
    }
    const at::Tensor u = rand_like_device({masked.size(0), masked.size(1)}, gen, masked);
    if (kind_ != Kind::first_hitting) return masked.logical_and(u.lt(unmask_prob(i)));
    at::Tensor open = masked;
    if (block_length_ > 0) {
        // Block by block, left to right: only the block holding a sequence's leftmost masked position is open (argmax
        // gives the first of equal values).
        const at::Tensor first = masked.to(at::kByte).argmax(1, true);
        const at::Tensor begin = first.div(block_length_, "floor").mul_(block_length_);
        const at::Tensor position = at::arange(masked.size(1), first.options()).unsqueeze(0);
        open = masked.logical_and(position.ge(begin)).logical_and_(position.lt(begin + block_length_));
    }
    // The largest of the open positions' uniforms is a uniform choice among them.
    const at::Tensor pick = u.masked_fill(open.logical_not(), -1.0f).argmax(1, true);
    return at::zeros_like(masked).scatter_(1, pick, true).logical_and_(open);
}

at::Tensor DiscreteSampler::arg_max(const at::Tensor& scores) {
    if (scores.size(0) == 0) return at::empty({0}, scores.options().dtype(at::kLong));
    const at::Tensor bad = std::get<0>(scores.max(1)).isfinite().logical_not().nonzero();
    if (bad.size(0) > 0) throw NothingToSample(bad[0][0].item<int64_t>());
    return scores.argmax(1);
}

at::Tensor DiscreteSampler::draw(const at::Tensor& scores, at::Generator& gen) {
    if (!scores.defined() || !scores.is_floating_point() || scores.dim() != 2) {
        throw std::invalid_argument("DiscreteSampler::draw: scores must be floating-point [n, V], got " +
                                    (scores.defined() ? shape_string(scores) : std::string("undefined")));
    }
    if (scores.size(0) == 0) return at::empty({0}, scores.options().dtype(at::kLong));
    // Gumbel-max: argmax(score + G), G = -log(-log(u)), is a draw from softmax(score). The floor keeps G finite.
    const at::Tensor uniform =
        at::rand(scores.sizes(), gen, at::TensorOptions().dtype(at::kDouble)).clamp_min_(1e-300).to(scores.device());
    const auto [best, index] = (scores.to(at::kDouble) - uniform.log().neg_().log_()).max(1);
    // max passes NaN through and picks some -inf where all are: either leaves the chosen score non-finite.
    const at::Tensor stuck = best.isfinite().logical_not();
    if (stuck.any().item<bool>()) throw NothingToSample(stuck.nonzero()[0][0].item<int64_t>());
    return index;
}

at::Tensor DiscreteSampler::step(const at::Tensor& tokens, const at::Tensor& logp0, int64_t i, int64_t mask_id,
                                 at::Generator& gen) const {
    if (!tokens.defined() || tokens.scalar_type() != at::kLong || tokens.dim() != 2) {
        throw std::invalid_argument("DiscreteSampler::step: tokens must be int64 [B, L], got " +
                                    (tokens.defined() ? shape_string(tokens) : std::string("undefined")));
    }
    const int64_t B = tokens.size(0), L = tokens.size(1);
    if (!logp0.defined() || !logp0.is_floating_point() || logp0.dim() != 3 || logp0.size(0) != B ||
        logp0.size(1) != L) {
        throw std::invalid_argument("DiscreteSampler::step: logp0 must be floating-point [B=" + std::to_string(B) +
                                    ", L=" + std::to_string(L) + ", V], got " +
                                    (logp0.defined() ? shape_string(logp0) : std::string("undefined")));
    }
    const int64_t V = logp0.size(2);
    if (mask_id < 0 || mask_id >= V) {
        throw std::invalid_argument("DiscreteSampler::step: mask_id " + std::to_string(mask_id) +
                                    " outside the vocabulary [0, " + std::to_string(V) + ")");
    }
    const at::Tensor masked = tokens.eq(mask_id);
    at::Tensor positions = choose(masked, i, gen).view({-1}).nonzero().squeeze(1);
    const at::Tensor remasked = remask(masked.logical_not(), i, gen);
    at::Tensor scores = logp0.reshape({B * L, V}).index_select(0, positions);
    scores.select(1, mask_id).fill_(-std::numeric_limits<float>::infinity());
    at::Tensor drawn = draw(scores, gen);
    if (kind_ == Kind::confidence) {
        const at::Tensor rows = kept_rows(positions, scores, drawn, B, L, i);
        positions = positions.index_select(0, rows);
        drawn = drawn.index_select(0, rows);
    }
    at::Tensor next = tokens.clone();
    next.view({-1}).index_copy_(0, positions, drawn);
    return next.masked_fill_(remasked, mask_id);
}

// ---------------------------------------------------------------------------------------------------------------
// Discrete family, uniform noise

UniformSampler::UniformSampler(const UniformNoiseSchedule& schedule, Kind kind, int64_t steps)
    : schedule_(schedule), kind_(kind), steps_(steps) {
    if (steps < 1) throw std::invalid_argument("UniformSampler: steps must be >= 1, got " + std::to_string(steps));
}

double UniformSampler::t(int64_t i) const { return 1.0 - static_cast<double>(i) / static_cast<double>(steps_); }

double UniformSampler::t_next(int64_t i) const { return i + 1 >= steps_ ? 0.0 : t(i + 1); }

at::Tensor UniformSampler::init(int64_t batch, int64_t len, int64_t vocab_size, at::Generator& gen,
                                const at::Device& device) const {
    if (batch < 1 || len < 1 || vocab_size < 1) {
        throw std::invalid_argument("UniformSampler::init: batch, length and vocabulary must be >= 1, got " +
                                    std::to_string(batch) + " x " + std::to_string(len) + " over " +
                                    std::to_string(vocab_size));
    }
    return at::randint(vocab_size, {batch, len}, gen, at::TensorOptions().dtype(at::kLong)).to(device);
}

at::Tensor UniformSampler::step_log_probs(const at::Tensor& log_post, const at::Tensor& x_t, int64_t i,
                                          double temperature, int64_t top_k, double top_p) const {
    const int64_t n = x_t.size(0);
    const auto options = at::TensorOptions().dtype(at::kDouble).device(x_t.device());
    const at::Tensor from = at::full({n}, schedule_.sigma_bar(t(i)), options);
    const at::Tensor to = at::full({n}, i + 1 >= steps_ ? 0.0 : schedule_.sigma_bar(t_next(i)), options);
    at::Tensor rest = nn::uniform_rest_from_posterior(log_post, x_t, from);
    if (temperature == 0.0) {
        // The limit of a falling temperature: the prediction certain of its arg-max (the lowest id among equal maxima).
        const at::Tensor best = rest.argmax(-1, /*keepdim=*/true);
        rest = at::full_like(rest, -std::numeric_limits<double>::infinity()).scatter_(-1, best, 0.0);
    } else if (temperature != 1.0) {
        rest = rest / temperature;
    }
    if (top_k > 0 || top_p < 1.0) DiscreteSampler::truncate(rest, top_k, top_p);
    rest = at::log_softmax(rest, -1);
    const at::Tensor p = kind_ == Kind::analytic ? nn::uniform_tweedie_probs(rest, x_t, from, to)
                                                 : nn::uniform_euler_probs(rest, x_t, from, to);
    return p.log();
}

}  // namespace rudder
