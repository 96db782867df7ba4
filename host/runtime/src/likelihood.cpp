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
    return model.denoiser && model.denoiser->uniform_noise() ? "sedd_uniform" : "mdlm_absorbing";
}

namespace {

// SEDD's prior term for one position: KL(q(z_1 | x) || uniform) with q(z_1 | x) = alpha [z = x] + (1 - alpha) / V.
double uniform_prior_kl(double alpha, int64_t vocab_size) {
    const double V = static_cast<double>(vocab_size), stay = alpha + (1.0 - alpha) / V, move = (1.0 - alpha) / V;
    return stay * std::log(stay * V) + (V - 1.0) * (move > 0 ? move * std::log(move * V) : 0.0);
}

}  // namespace

LikelihoodReport discrete_nelbo(const Model& model, const std::vector<std::string>& texts, const LikelihoodOptions& options,
                                const std::function<void(int64_t, int64_t)>& progress) {
    if (model.family != Family::discrete || !model.denoiser || !model.tokenizer)
        throw std::invalid_argument("the likelihood bound is computed for discrete models; '" + model.name +
                                    "' is " + family_name(model.family));
    if (options.draws < 1 || options.batch_size < 1 || options.length < 0)
        throw std::invalid_argument("likelihood: draws and batch size must be at least 1, the length 0 or more");
    const Tokenizer& tokenizer = *model.tokenizer;
    const int64_t pad = tokenizer.pad_id(), mask = tokenizer.mask_id(), unk = tokenizer.unk_id();
    // Texts are scored as the padded sequences the model generates; a checkpoint trained on packed text has no pad.
    if (pad < 0)
        throw std::invalid_argument("the likelihood bound pads each text to the network's positions, and '" + model.name +
                                    "' has no padding token (a checkpoint trained on packed text); it is not computed for it");
    const GeometricSchedule* uniform = model.denoiser->uniform_noise();
    LikelihoodReport report;
    report.draws = options.draws;

    std::vector<std::vector<int64_t>> encoded;
    int64_t longest = 0;
    for (const auto& text : texts) {
        encoded.push_back(tokenizer.encode(text));
        longest = std::max<int64_t>(longest, static_cast<int64_t>(encoded.back().size()) + 1);
    }
    const int64_t network_length = model.denoiser->max_length();
    report.length = options.length > 0 ? options.length : network_length > 0 ? network_length : longest;
    if (network_length > 0 && report.length > network_length)
        throw std::invalid_argument("likelihood: length " + std::to_string(report.length) + " is more than the network's " +
                                    std::to_string(network_length) + " positions");
    const int64_t L = report.length, V = tokenizer.vocab_size();
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
        at::Tensor per_text = at::zeros({B}, at::kDouble);
        for (int64_t k = 0; k < options.draws; ++k) {
            // Stratified times: the draws cover (0, 1] evenly, each at a uniform point of its stratum.
            const double u = at::rand({1}, gen, at::kDouble).item<double>();
            const double t = std::max((static_cast<double>(k) + u) / static_cast<double>(options.draws), 1e-6);
            if (uniform) {
                const double sigma_bar = uniform->sigma_bar(t);
                const at::Tensor level = at::full({B * L}, sigma_bar, at::kDouble);
                const at::Tensor z = nn::sample_transition(nn::Graph::uniform, x, level.narrow(0, 0, B), V, mask, gen);
                const at::Tensor post = model.denoiser->denoise(z, t, {}).logits.to(at::kCPU).to(at::kDouble).reshape({B * L, V});
                const at::Tensor flat_z = z.reshape({B * L});
                const at::Tensor score = nn::uniform_score_of_clean(nn::uniform_rest_from_posterior(post, flat_z, level), flat_z, level);
                const at::Tensor entropy = nn::score_entropy(nn::Graph::uniform, score, flat_z, x.reshape({B * L}), level, mask);
                per_text += entropy.view({B, L}).sum(1) * uniform->sigma(t);
                continue;
            }
            const at::Tensor masked = at::rand({B, L}, gen, at::kFloat).lt(model.mask_schedule.mask_prob(t));
            if (!masked.any().item<bool>()) continue;
            const at::Tensor z = at::where(masked, at::full({}, mask, at::kLong), x);
            at::Tensor logits = model.denoiser->denoise(z, t, {}).logits.to(at::kCPU).to(at::kFloat);
            logits = logits.reshape({B, L, V});
            logits.select(2, mask).fill_(-std::numeric_limits<float>::infinity());  // SUBS: the mask is never the answer
            const at::Tensor log_p = at::log_softmax(logits, 2).gather(2, x.unsqueeze(2)).squeeze(2).to(at::kDouble);
            per_text -= (log_p * masked.to(at::kDouble)).sum(1) / t;
        }
        per_text /= static_cast<double>(options.draws);
        if (uniform) per_text += static_cast<double>(L) * uniform_prior_kl(uniform->alpha(1.0), V);
        report.texts += B;
        report.nelbo_sum += per_text.sum().item<double>();
        report.nelbo_sq_sum += per_text.pow(2).sum().item<double>();
        if (progress) progress(first + B, total);
    }
    return report;
}

}  // namespace rudder
