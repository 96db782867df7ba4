#include <rudder/runtime/likelihood.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <rudder/nn/score_entropy.hpp>

namespace rudder {

double LikelihoodReport::perplexity_bound() const { return std::exp(nats_per_token()); }

double LikelihoodReport::standard_error_per_token() const {
    if (texts < 2 || tokens == 0) return 0.0;
    const double n = static_cast<double>(texts), mean = nelbo_sum / n;
    const double variance = std::max(0.0, (nelbo_sq_sum - n * mean * mean) / (n - 1.0));
    return std::sqrt(variance / n) * n / static_cast<double>(tokens);
}

std::string nelbo_kind(const Model& model) {
    if (model.family == Family::continuous) return "ddpm_vlb";
    return model.denoiser && model.denoiser->traits().uniform_noise ? "sedd_uniform" : "mdlm_absorbing";
}

namespace {

// A time stratified over (0, 1]: the draws cover it evenly, each at a uniform point of its stratum.
double stratified_time(int64_t draw, int64_t draws, at::Generator& gen) {
    const double u = at::rand({1}, gen, at::kDouble).item<double>();
    return std::max((static_cast<double>(draw) + u) / static_cast<double>(draws), 1e-6);
}

// SEDD's prior term for one position: KL(q(z_1 | x) || uniform) with q(z_1 | x) = alpha [z = x] + (1 - alpha) / V.
double uniform_prior_kl(double alpha, int64_t vocab_size) {
    const double V = static_cast<double>(vocab_size), stay = alpha + (1.0 - alpha) / V, move = (1.0 - alpha) / V;
    return stay * std::log(stay * V) + (V - 1.0) * (move > 0 ? move * std::log(move * V) : 0.0);
}

// Each bound below returns, for a batch of padded texts x [B, L], every text's estimate in nats [B] (float64).

at::Tensor absorbing_bound(const Model& model, const at::Tensor& x, int64_t draws, at::Generator& gen) {
    const int64_t B = x.size(0), L = x.size(1), V = model.tokenizer->vocab_size(), mask = model.tokenizer->mask_id();
    at::Tensor per_text = at::zeros({B}, at::kDouble);
    for (int64_t k = 0; k < draws; ++k) {
        const double t = stratified_time(k, draws, gen);
        const at::Tensor masked = at::rand({B, L}, gen, at::kFloat).lt(model.mask_schedule.mask_prob(t));
        if (!masked.any().item<bool>()) continue;
        const at::Tensor z = at::where(masked, at::full({}, mask, at::kLong), x);
        at::Tensor logits = model.denoiser->denoise(z, t, {}).logits.to(at::kCPU).to(at::kFloat).reshape({B, L, V});
        logits.select(2, mask).fill_(-std::numeric_limits<float>::infinity());  // SUBS: the mask is never the answer
        const at::Tensor log_p = at::log_softmax(logits, 2).gather(2, x.unsqueeze(2)).squeeze(2).to(at::kDouble);
        per_text -= (log_p * masked.to(at::kDouble)).sum(1) / t;
    }
    return per_text / static_cast<double>(draws);
}

at::Tensor uniform_bound(const Model& model, const UniformNoiseSchedule& noise, const at::Tensor& x, int64_t draws,
                         at::Generator& gen) {
    const int64_t B = x.size(0), L = x.size(1), V = model.tokenizer->vocab_size(), mask = model.tokenizer->mask_id();
    at::Tensor per_text = at::zeros({B}, at::kDouble);
    for (int64_t k = 0; k < draws; ++k) {
        const double t = stratified_time(k, draws, gen), sigma_bar = noise.sigma_bar(t);
        const at::Tensor level = at::full({B * L}, sigma_bar, at::kDouble);
        const at::Tensor z = nn::sample_transition(nn::Graph::uniform, x, level.narrow(0, 0, B), V, mask, gen);
        const at::Tensor post =
            model.denoiser->denoise(z, t, {}).logits.to(at::kCPU).to(at::kDouble).reshape({B * L, V});
        const at::Tensor flat_z = z.reshape({B * L});
        const at::Tensor score =
            nn::uniform_score_of_clean(nn::uniform_rest_from_posterior(post, flat_z, level), flat_z, level);
        const at::Tensor entropy =
            nn::score_entropy(nn::Graph::uniform, score, flat_z, x.reshape({B * L}), level, mask);
        per_text += entropy.view({B, L}).sum(1) * noise.sigma(t);
    }
    return per_text / static_cast<double>(draws) + static_cast<double>(L) * uniform_prior_kl(noise.alpha(1.0), V);
}

// The T-step Gaussian chain's bound (rudder/runtime/likelihood.hpp).
at::Tensor gaussian_bound(const Model& model, const at::Tensor& x, int64_t draws, at::Generator& gen) {
    const GaussianSchedule& schedule = model.schedule;
    const int64_t B = x.size(0), L = x.size(1), V = model.tokenizer->vocab_size(), T = schedule.T();
    const at::Tensor E = model.denoiser->embedding().to(at::kCPU).to(at::kDouble);
    const at::Tensor clean = at::embedding(E, x);  // [B, L, D]
    const at::Device device = model.denoiser->embedding().device();
    const auto noised = [&](int64_t k) {
        const double ab = schedule.alpha_bar(k);
        return (std::sqrt(ab) * clean + std::sqrt(1.0 - ab) * at::randn(clean.sizes(), gen, at::kDouble))
            .to(at::kFloat)
            .to(device);
    };
    const auto snr = [&](int64_t k) { return schedule.alpha_bar(k) / (1.0 - schedule.alpha_bar(k)); };
    const auto time = [T](int64_t k) { return static_cast<double>(k) / static_cast<double>(T); };

    // Decoding: -log p(w | z_1), the network's clean-token distribution one step from the data.
    const at::Tensor logits = model.denoiser->denoise(noised(1), time(1), {}).logits.to(at::kCPU).to(at::kDouble);
    at::Tensor per_text = -at::log_softmax(logits.reshape({B, L, V}), 2).gather(2, x.unsqueeze(2)).squeeze(2).sum(1);

    // Diffusion: sum over k = 2..T of KL(q(z_{k-1} | z_k, x) || p(z_{k-1} | z_k)) = (SNR(k-1) - SNR(k)) / 2 |x -
    // x0(z_k)|^2. The weight spans orders of magnitude while the error per dimension is about min(1, c / SNR), so k is
    // drawn with probability proportional to its step in log(1 + SNR) = -log(1 - ab) (like VDM's uniform log SNR where
    // the signal is strong, without spending draws where it is gone), stratified, and each term divided by it.
    if (T >= 2) {
        std::vector<double> log_snr_step(static_cast<size_t>(T + 1), 0.0);  // [k]: log(1 + SNR(k-1)) - log(1 + SNR(k))
        double total = 0.0;
        for (int64_t k = 2; k <= T; ++k)
            total += log_snr_step[static_cast<size_t>(k)] = std::log1p(snr(k - 1)) - std::log1p(snr(k));
        at::Tensor diffusion = at::zeros({B}, at::kDouble);
        for (int64_t d = 0; d < draws; ++d) {
            const double u =
                (static_cast<double>(d) + at::rand({1}, gen, at::kDouble).item<double>()) / static_cast<double>(draws);
            int64_t k = 2;
            for (double below = log_snr_step[2]; k < T && below < u * total;
                 below += log_snr_step[static_cast<size_t>(++k)]) {
            }
            const double p_k = log_snr_step[static_cast<size_t>(k)] / total;
            const at::Tensor x0 = model.denoiser->denoise(noised(k), time(k), {}).x0.to(at::kCPU).to(at::kDouble);
            diffusion += (snr(k - 1) - snr(k)) / (2.0 * p_k) * (clean - x0).pow(2).sum({1, 2});
        }
        per_text += diffusion / static_cast<double>(draws);
    }

    // Prior: KL(q(z_T | x) || N(0, I)) in closed form, per dimension (ab x^2 + (1 - ab) - 1 - log(1 - ab)) / 2.
    const double ab = schedule.alpha_bar(T);
    const double per_dim = -ab - std::log1p(-ab);
    per_text += (ab * clean.pow(2).sum({1, 2}) + per_dim * static_cast<double>(L * E.size(1))) / 2.0;
    return per_text;
}

}  // namespace

LikelihoodReport nelbo(const Model& model, const std::vector<std::string>& texts, const LikelihoodOptions& options,
                       const std::function<void(int64_t, int64_t)>& progress) {
    if (!model.denoiser || !model.tokenizer)
        throw std::invalid_argument("the likelihood bound needs a denoiser and a tokenizer; '" + model.name +
                                    "' has none");
    if (options.draws < 1 || options.batch_size < 1 || options.length < 0)
        throw std::invalid_argument("likelihood: draws and batch size must be at least 1, the length 0 or more");
    if (model.family == Family::continuous && !model.denoiser->embedding().defined())
        throw std::invalid_argument("the continuous bound needs the model's embedding table; '" + model.name +
                                    "' has none");
    const Tokenizer& tokenizer = *model.tokenizer;
    const int64_t pad = tokenizer.pad_id(), unk = tokenizer.unk_id();
    // Texts are scored as the padded sequences the model generates; a checkpoint trained on packed text saw none.
    if (pad < 0)
        throw std::invalid_argument("the likelihood bound pads each text to the network's positions, and '" +
                                    model.name + "' has no padding token; it is not computed for it");
    if (!model.training_layout.empty())
        throw std::invalid_argument("the likelihood bound pads each text to the network's positions, and '" +
                                    model.name + "' was trained on " + model.training_layout +
                                    "; it is not computed for it");
    const std::optional<UniformNoiseSchedule>& uniform = model.denoiser->traits().uniform_noise;
    LikelihoodReport report;
    report.draws = options.draws;

    std::vector<std::vector<int64_t>> encoded;
    int64_t longest = 0;
    for (const auto& text : texts) {
        encoded.push_back(tokenizer.encode(text));
        longest = std::max<int64_t>(longest, static_cast<int64_t>(encoded.back().size()) + 1);
    }
    const int64_t network_length = model.denoiser->traits().max_length;
    report.length = options.length > 0 ? options.length : network_length > 0 ? network_length : longest;
    if (network_length > 0 && report.length > network_length)
        throw std::invalid_argument("likelihood: length " + std::to_string(report.length) +
                                    " is more than the network's " + std::to_string(network_length) + " positions");
    const int64_t L = report.length;
    // A text and its end: the padded sequence the model generates (one end token counted, as the teacher does).
    std::vector<int64_t> kept;
    for (size_t i = 0; i < encoded.size(); ++i) {
        const auto n = static_cast<int64_t>(encoded[i].size());
        if (n + 1 > L) {
            ++report.skipped_too_long;
            continue;
        }
        kept.push_back(static_cast<int64_t>(i));
        report.tokens += n + 1;
        report.unknown_tokens += std::count(encoded[i].begin(), encoded[i].end(), unk);
    }

    c10::InferenceMode no_autograd;  // the network's outputs are inference tensors; everything here is one too
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
    const auto total = static_cast<int64_t>(kept.size());
    for (int64_t first = 0; first < total; first += options.batch_size) {
        const int64_t B = std::min(options.batch_size, total - first);
        at::Tensor x = at::full({B, L}, pad, at::kLong);
        for (int64_t b = 0; b < B; ++b) {
            const auto& ids = encoded[static_cast<size_t>(kept[static_cast<size_t>(first + b)])];
            if (!ids.empty()) x[b].narrow(0, 0, static_cast<int64_t>(ids.size())).copy_(at::tensor(ids, at::kLong));
        }
        const at::Tensor per_text = model.family == Family::continuous ? gaussian_bound(model, x, options.draws, gen)
                                    : uniform ? uniform_bound(model, *uniform, x, options.draws, gen)
                                              : absorbing_bound(model, x, options.draws, gen);
        report.texts += B;
        report.nelbo_sum += per_text.sum().item<double>();
        report.nelbo_sq_sum += per_text.pow(2).sum().item<double>();
        if (progress) progress(first + B, total);
    }
    return report;
}

}  // namespace rudder
