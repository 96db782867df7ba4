#include <rudder/nn/score_entropy.hpp>

#include <ATen/ATen.h>

#include <stdexcept>

namespace rudder::nn {

const char* graph_name(Graph g) { return g == Graph::absorb ? "absorb" : "uniform"; }

Graph parse_graph(const std::string& name) {
    if (name == "absorb") return Graph::absorb;
    if (name == "uniform") return Graph::uniform;
    throw std::invalid_argument("unknown transition graph '" + name + "'; expected \"absorb\" or \"uniform\"");
}

at::Tensor uniform_own_token_gain(const at::Tensor& sigma_bar, int64_t vocab_size) {
    return at::log1p(static_cast<double>(vocab_size) / at::expm1(sigma_bar.to(at::kDouble)));
}

namespace {

void check_rows(const at::Tensor& tokens, const at::Tensor& sigma_bar, const char* what) {
    if (!tokens.defined() || tokens.scalar_type() != at::kLong)
        throw std::invalid_argument(std::string(what) + ": tokens must be int64");
    if (!sigma_bar.defined() || sigma_bar.dim() != 1 || sigma_bar.size(0) != tokens.size(0))
        throw std::invalid_argument(std::string(what) + ": sigma_bar must be [N] with N = the tokens' rows");
}

// K(a) = a (log a - 1), with K(0) = 0.
at::Tensor k_term(const at::Tensor& a) { return at::xlogy(a, a) - a; }

// The checks every uniform-graph function of a clean-token distribution shares: log-probabilities [N, V] at tokens
// x_t [N], total noise sigma_bar [N] > 0.
void check_clean(const at::Tensor& logp, const at::Tensor& x_t, const at::Tensor& sigma_bar, const char* what) {
    check_rows(x_t, sigma_bar, what);
    if (!logp.defined() || logp.dim() != 2 || logp.size(0) != x_t.size(0))
        throw std::invalid_argument(std::string(what) + ": the log-probabilities must be [N, V] with N = x_t's rows");
    if (!(sigma_bar.gt(0).all().item<bool>()))
        throw std::invalid_argument(std::string(what) + ": sigma_bar must be > 0");
}

at::Tensor shift_own_token(const at::Tensor& logp, const at::Tensor& x_t, const at::Tensor& sigma_bar, double sign,
                           const char* what) {
    check_clean(logp, x_t, sigma_bar, what);
    const int64_t V = logp.size(1);
    const at::Tensor gain = (sign * uniform_own_token_gain(sigma_bar, V)).to(logp.device()).to(logp.scalar_type());
    return at::log_softmax(logp.scatter_add(1, x_t.unsqueeze(1), gain.unsqueeze(1)), 1);
}

}  // namespace

at::Tensor transition_probs(Graph graph, const at::Tensor& x0, const at::Tensor& sigma_bar, int64_t vocab_size,
                            int64_t mask_id) {
    check_rows(x0, sigma_bar, "transition_probs");
    const at::Tensor alpha = at::exp(-sigma_bar.to(at::kDouble)).unsqueeze(1);  // [N, 1]
    const at::Tensor index = x0.unsqueeze(1);
    const auto options = at::TensorOptions().dtype(at::kDouble).device(x0.device());
    if (graph == Graph::uniform) {
        at::Tensor p = ((1.0 - alpha) / static_cast<double>(vocab_size)).expand({x0.size(0), vocab_size}).contiguous();
        return p.scatter_add_(1, index, alpha.to(x0.device()));
    }
    at::Tensor p = at::zeros({x0.size(0), vocab_size}, options);
    p.scatter_add_(1, index, alpha.to(x0.device()));
    return p.scatter_add_(1, at::full_like(index, mask_id), (1.0 - alpha).to(x0.device()));
}

at::Tensor sample_transition(Graph graph, const at::Tensor& x0, const at::Tensor& sigma_bar, int64_t vocab_size,
                             int64_t mask_id, at::Generator& gen) {
    if (!x0.defined() || x0.dim() != 2 || x0.scalar_type() != at::kLong)
        throw std::invalid_argument("sample_transition: x0 must be int64 [B, L]");
    if (!sigma_bar.defined() || sigma_bar.dim() != 1 || sigma_bar.size(0) != x0.size(0))
        throw std::invalid_argument("sample_transition: sigma_bar must be [B]");
    const int64_t B = x0.size(0), L = x0.size(1);
    const at::Tensor alpha = at::exp(-sigma_bar.to(at::kDouble)).unsqueeze(1);
    const at::Tensor moved = at::rand({B, L}, gen, at::kDouble).ge(alpha).to(x0.device());
    if (graph == Graph::absorb) return x0.masked_fill(moved, mask_id);
    // A move is a uniform draw over every token, x0 included: exp(sigma_bar Q) = alpha I + (1 - alpha) 1 1^T / V.
    const at::Tensor draw = at::randint(vocab_size, {B, L}, gen, at::kLong).to(x0.device());
    return at::where(moved, draw, x0);
}

at::Tensor score_entropy(Graph graph, const at::Tensor& log_score, const at::Tensor& x_t, const at::Tensor& x0,
                         const at::Tensor& sigma_bar, int64_t mask_id) {
    check_rows(x_t, sigma_bar, "score_entropy");
    if (!log_score.defined() || log_score.dim() != 2 || log_score.size(0) != x_t.size(0) || !x0.defined() ||
        x0.sizes() != x_t.sizes())
        throw std::invalid_argument("score_entropy: log_score must be [N, V] and x_t, x0 [N]");
    if (!(sigma_bar.gt(0).all().item<bool>())) throw std::invalid_argument("score_entropy: sigma_bar must be > 0");
    const int64_t V = log_score.size(1);
    const auto dtype = log_score.scalar_type();
    const at::Tensor alpha = at::exp(-sigma_bar.to(at::kDouble)).to(log_score.device());
    const at::Tensor at_xt = log_score.gather(1, x_t.unsqueeze(1)).squeeze(1);
    const at::Tensor at_x0 = log_score.gather(1, x0.unsqueeze(1)).squeeze(1);
    // sum over y != x_t of s_y.
    const at::Tensor score_sum = log_score.exp().sum(1) - at_xt.exp();

    if (graph == Graph::absorb) {
        // Only the mask has rates flowing in (1 from every token); r_y = alpha [y = x0] / (1 - alpha).
        const at::Tensor r = (alpha / (1.0 - alpha)).to(dtype);
        const at::Tensor entropy = score_sum - r * at_x0 + k_term(r);
        return at::where(x_t.eq(mask_id), entropy, at::zeros_like(entropy));
    }
    // Uniform: rate 1/V into x_t from every y; p(y | x0) = alpha [y = x0] + (1 - alpha) / V.
    const at::Tensor spread = (1.0 - alpha) / static_cast<double>(V);
    const at::Tensor same = x_t.eq(x0);
    const at::Tensor p_xt = at::where(same, alpha + spread, spread);
    const at::Tensor r_other = (spread / p_xt).to(dtype);            // r_y for y != x0
    const at::Tensor r_clean = ((alpha + spread) / p_xt).to(dtype);  // r_y at y = x0 (read when x0 != x_t)
    const at::Tensor log_sum = log_score.sum(1) - at_xt;             // sum over y != x_t of log s_y
    const at::Tensor moved = same.logical_not().to(dtype);
    const at::Tensor weighted_log = r_other * log_sum + moved * (r_clean - r_other) * at_x0;
    const at::Tensor k_sum = (static_cast<double>(V - 1) - moved) * k_term(r_other) + moved * k_term(r_clean);
    return (score_sum - weighted_log + k_sum) / static_cast<double>(V);
}

at::Tensor uniform_posterior_from_rest(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar) {
    return shift_own_token(log_p0, x_t, sigma_bar, 1.0, "uniform_posterior_from_rest");
}

at::Tensor uniform_rest_from_posterior(const at::Tensor& log_post, const at::Tensor& x_t, const at::Tensor& sigma_bar) {
    return shift_own_token(log_post, x_t, sigma_bar, -1.0, "uniform_rest_from_posterior");
}

at::Tensor uniform_score_of_clean(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar) {
    check_clean(log_p0, x_t, sigma_bar, "uniform_score_of_clean");
    const double V = static_cast<double>(log_p0.size(1));
    // a = alpha V / (1 - alpha) = V / expm1(sigma_bar), in float64 before it meets the probabilities.
    const at::Tensor a =
        (V / at::expm1(sigma_bar.to(at::kDouble))).to(log_p0.device()).to(log_p0.scalar_type()).unsqueeze(1);
    const at::Tensor log_pt = at::log1p(a * log_p0.exp());  // log p_t(y) + a constant per row
    return log_pt - log_pt.gather(1, x_t.unsqueeze(1));
}

namespace {

void check_step(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar_t,
                const at::Tensor& sigma_bar_s, const char* what) {
    check_rows(x_t, sigma_bar_t, what);
    check_rows(x_t, sigma_bar_s, what);
    if (!log_p0.defined() || log_p0.dim() != 2 || log_p0.size(0) != x_t.size(0))
        throw std::invalid_argument(std::string(what) + ": log_p0 must be [N, V] with N = x_t's rows");
    if (!(sigma_bar_s.ge(0).all().item<bool>()) || !(sigma_bar_t.ge(sigma_bar_s).all().item<bool>()))
        throw std::invalid_argument(std::string(what) + ": needs sigma_bar_t >= sigma_bar_s >= 0");
}

at::Tensor normalised(at::Tensor p) {
    p = p.clamp_min(0.0);
    return p / p.sum(1, true);
}

}  // namespace

at::Tensor uniform_tweedie_probs(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar_t,
                                 const at::Tensor& sigma_bar_s) {
    check_step(log_p0, x_t, sigma_bar_t, sigma_bar_s, "uniform_tweedie_probs");
    const at::Tensor p0 = log_p0.to(at::kDouble).exp();
    const double V = static_cast<double>(p0.size(1));
    const auto device = p0.device();
    const at::Tensor alpha_s = at::exp(-sigma_bar_s.to(at::kDouble)).to(device).unsqueeze(1);  // [N, 1]
    const at::Tensor beta = at::exp(sigma_bar_s.to(at::kDouble) - sigma_bar_t.to(at::kDouble)).to(device).unsqueeze(1);
    const at::Tensor prior_s = alpha_s * p0 + (1.0 - alpha_s) / V;  // p_s(y)
    const at::Tensor kernel =
        ((1.0 - beta) / V).expand_as(p0).clone().scatter_add_(1, x_t.unsqueeze(1), beta);  // p(x_t | y)
    return normalised(prior_s * kernel);
}

at::Tensor uniform_euler_probs(const at::Tensor& log_p0, const at::Tensor& x_t, const at::Tensor& sigma_bar_t,
                               const at::Tensor& sigma_bar_s) {
    check_step(log_p0, x_t, sigma_bar_t, sigma_bar_s, "uniform_euler_probs");
    const at::Tensor s = uniform_score_of_clean(log_p0.to(at::kDouble), x_t, sigma_bar_t).exp();  // sigma_bar_t > 0
    const double V = static_cast<double>(s.size(1));
    const at::Tensor d = (sigma_bar_t.to(at::kDouble) - sigma_bar_s.to(at::kDouble)).to(s.device()).unsqueeze(1);
    at::Tensor leave = (d / V) * s;
    leave = leave.scatter(1, x_t.unsqueeze(1), 0.0);
    const at::Tensor stay = (1.0 - leave.sum(1, true)).clamp_min(0.0);
    return normalised(leave.scatter(1, x_t.unsqueeze(1), stay));
}

}  // namespace rudder::nn
