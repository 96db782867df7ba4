#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <rudder/nn/score_entropy.hpp>
#include <rudder/runtime/denoiser.hpp>

namespace rudder {

namespace {

std::string shape_string(const at::Tensor& t) {
    std::ostringstream out;
    out << t.sizes();
    return out.str();
}

DenoiserTraits corpus_traits(const CorpusDenoiser::Options& options) {
    DenoiserTraits traits;
    traits.family = options.family;
    traits.vocab_size = options.vocab_size;
    traits.embed_dim = options.family == Family::continuous ? options.embed_dim : 0;
    traits.uses_evidence = true;
    traits.uniform_noise = options.uniform_noise;
    return traits;
}

}  // namespace

CorpusDenoiser::CorpusDenoiser(std::vector<std::vector<int64_t>> sentences, Options options, GaussianSchedule schedule)
    : Denoiser(corpus_traits(options)), sentences_(std::move(sentences)), options_(options),
      schedule_(std::move(schedule)), device_(at::kCPU) {
    const int64_t V = options_.vocab_size;
    if (V < 1) throw std::invalid_argument("CorpusDenoiser: vocab_size must be >= 1, got " + std::to_string(V));
    if (sentences_.empty()) throw std::invalid_argument("CorpusDenoiser: the corpus is empty");
    for (int64_t id : {options_.pad_id, options_.mask_id}) {
        if (id < 0 || id >= V) {
            throw std::invalid_argument("CorpusDenoiser: special id " + std::to_string(id) +
                                        " outside the vocabulary [0, " + std::to_string(V) + ")");
        }
    }
    if (!(options_.mismatch > 0.0 && options_.mismatch <= 1.0)) {
        throw std::invalid_argument("CorpusDenoiser: mismatch must be in (0, 1], got " +
                                    std::to_string(options_.mismatch));
    }
    if (!(options_.min_logprob < 0.0) || !std::isfinite(options_.min_logprob)) {
        throw std::invalid_argument("CorpusDenoiser: min_logprob must be finite and negative, got " +
                                    std::to_string(options_.min_logprob));
    }
    for (size_t n = 0; n < sentences_.size(); ++n) {
        for (int64_t id : sentences_[n]) {
            if (id < 0 || id >= V || id == options_.mask_id) {
                throw std::invalid_argument("CorpusDenoiser: sentence " + std::to_string(n) + " has token id " +
                                            std::to_string(id) + ", which is the mask or outside [0, " +
                                            std::to_string(V) + ")");
            }
        }
    }
    if (options_.family == Family::continuous) {
        if (options_.embed_dim < 1) {
            throw std::invalid_argument("CorpusDenoiser: embed_dim must be >= 1, got " +
                                        std::to_string(options_.embed_dim));
        }
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options_.embed_seed);
        at::Tensor table = at::randn({V, options_.embed_dim}, gen, at::TensorOptions().dtype(at::kFloat));
        // Unit rows make sum_i |E[s_i]|^2 = L the same for every sentence, so it drops out of the posterior.
        embedding_ = table / table.norm(2, {1}, /*keepdim=*/true);
    }
}

void CorpusDenoiser::to(const at::Device& device) {
    device_ = device;
    if (embedding_.defined()) embedding_ = embedding_.to(device);
    if (cached_.defined()) cached_ = cached_.to(device);
    if (cached_incidence_.defined()) cached_incidence_ = cached_incidence_.to(device);
    if (cached_incidence_t_.defined()) cached_incidence_t_ = cached_incidence_t_.to(device);
}

uint64_t CorpusDenoiser::working_bytes(int64_t batch, int64_t length) const {
    // Per sample: a float64 one-hot [L, V] and its transposed copy for the sparse product, the float32 marginals,
    // their log and the committed one-hots (3 [L, V]), and the sentence weights (a few float64 [N]).
    const double LV = static_cast<double>(length) * static_cast<double>(options_.vocab_size);
    const double per_sample = 2 * 8 * LV + 3 * 4 * LV + 4 * 8 * static_cast<double>(corpus_size());
    return static_cast<uint64_t>(static_cast<double>(batch) * per_sample);
}

const at::Tensor& CorpusDenoiser::padded(int64_t L) {
    if (L == cached_len_ && cached_.defined()) return cached_;
    std::vector<int64_t> flat;
    int64_t count = 0;
    size_t shortest = sentences_.front().size();
    for (const auto& s : sentences_) {
        shortest = std::min(shortest, s.size());
        if (static_cast<int64_t>(s.size()) > L) continue;
        flat.insert(flat.end(), s.begin(), s.end());
        flat.insert(flat.end(), static_cast<size_t>(L) - s.size(), options_.pad_id);
        ++count;
    }
    if (count == 0) {
        throw std::invalid_argument("CorpusDenoiser: no corpus sentence fits in length " + std::to_string(L) +
                                    " (the shortest has " + std::to_string(shortest) + " tokens)");
    }
    cached_ = at::tensor(flat, at::TensorOptions().dtype(at::kLong)).view({count, L}).to(device_);
    cached_len_ = L;
    const int64_t V = options_.vocab_size;
    const at::Tensor columns = (cached_ + at::arange(L, cached_.options()).mul_(V).unsqueeze(0)).reshape({-1});
    const at::Tensor rows = at::arange(count, cached_.options()).unsqueeze(1).expand({count, L}).reshape({-1});
    cached_incidence_ =
        at::sparse_coo_tensor(at::stack({rows, columns}), at::ones({count * L}, cached_.options().dtype(at::kDouble)),
                              {count, L * V})
            .coalesce();
    cached_incidence_t_ = cached_incidence_.t().coalesce().to(at::kFloat);
    return cached_;
}

const at::Tensor& CorpusDenoiser::incidence(int64_t L) {
    padded(L);
    return cached_incidence_;
}

const at::Tensor& CorpusDenoiser::incidence_t(int64_t L) {
    padded(L);
    return cached_incidence_t_;
}

DenoiserOutput CorpusDenoiser::denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                                       const Evidence& evidence) {
    if (!(t > 0.0 && t <= 1.0)) {
        throw std::invalid_argument("CorpusDenoiser::denoise: t must be in (0, 1], got " + std::to_string(t));
    }
    if (!x.defined()) throw std::invalid_argument("CorpusDenoiser::denoise: x is undefined");
    const bool continuous = options_.family == Family::continuous;
    if (continuous) {
        if (x.scalar_type() != at::kFloat || x.dim() != 3 || x.size(2) != options_.embed_dim) {
            throw std::invalid_argument(
                "CorpusDenoiser::denoise: continuous x must be float32 [B, L, D=" + std::to_string(options_.embed_dim) +
                "], got " + std::string(c10::toString(x.scalar_type())) + " " + shape_string(x));
        }
    } else if (x.scalar_type() != at::kLong || x.dim() != 2) {
        throw std::invalid_argument("CorpusDenoiser::denoise: discrete x must be int64 [B, L], got " +
                                    std::string(c10::toString(x.scalar_type())) + " " + shape_string(x));
    }
    const int64_t B = x.size(0), L = x.size(1), V = options_.vocab_size;
    if (B < 1 || L < 1) throw std::invalid_argument("CorpusDenoiser::denoise: empty batch " + shape_string(x));
    if (!continuous && (x.min().item<int64_t>() < 0 || x.max().item<int64_t>() >= V)) {
        throw std::invalid_argument("CorpusDenoiser::denoise: token ids must be in [0, " + std::to_string(V) +
                                    "), got values in [" + std::to_string(x.min().item<int64_t>()) + ", " +
                                    std::to_string(x.max().item<int64_t>()) + "]");
    }
    if (!conditions.empty() && static_cast<int64_t>(conditions.size()) != B) {
        throw std::invalid_argument("CorpusDenoiser::denoise: " + std::to_string(conditions.size()) +
                                    " conditions for a batch of " + std::to_string(B));
    }
    // The corpus posterior is unconditional: `conditions` are accepted and ignored (traits().conditional is false).

    const at::Tensor& O = incidence(L);  // [N, L * V]
    const int64_t N = O.size(0);
    // Per-sentence sums over positions as one sparse product: (O @ A)[n, b] = sum_i A[i * V + s_n,i, b].
    auto per_sentence = [&](const at::Tensor& by_token) {  // [B, L, V] -> [B, N]
        return at::mm(O, by_token.reshape({B, L * V}).t().to(at::kDouble).contiguous()).t();
    };
    // One-hot [B, L, V] of `ids` at the positions where `where` holds.
    auto one_hot = [&](const at::Tensor& ids, const at::Tensor& where) {
        return at::zeros({B, L, V}, x.options().dtype(at::kDouble))
            .scatter_(2, ids.clamp_min(0).unsqueeze(2), 1.0)
            .mul_(where.unsqueeze(2));
    };

    // Log-weights of the sentences [B, N], in float64: near t = 0 the continuous weights differ by hundreds of nats.
    at::Tensor log_w;
    at::Tensor masked;  // discrete: [B, L] bool
    if (continuous) {
        const double ab = schedule_.alpha_bar_at(t);
        // -|x - sqrt(ab) E[s]|^2 / (2 (1 - ab)) = sqrt(ab)/(1-ab) * sum_i x_i . E[s_i] + terms equal for all s
        // (|x|^2, and ab * L because the rows of E are unit vectors).
        log_w = per_sentence(at::matmul(x, embedding_.t())) * (std::sqrt(ab) / (1.0 - ab));
    } else if (options_.uniform_noise) {
        // Each agreeing position adds its own token's evidence; disagreeing ones leave the weight.
        const double per_match =
            nn::uniform_own_token_gain(at::full({1}, options_.uniform_noise->sigma_bar(t), at::kDouble), V)
                .item<double>();
        log_w = per_sentence(one_hot(x, at::ones_like(x, at::kBool))) * per_match;
    } else {
        masked = x.eq(options_.mask_id);
        const at::Tensor committed = masked.logical_not();
        const at::Tensor disagreements = committed.sum(1, true).to(at::kDouble) - per_sentence(one_hot(x, committed));
        log_w = disagreements * std::log(options_.mismatch);
    }
    if (!evidence.empty()) {
        at::Tensor breaches = at::zeros({B, N}, log_w.options());
        if (evidence.fixed.defined()) {
            const at::Tensor fixed = evidence.fixed.to(x.device());
            const at::Tensor is_fixed = fixed.ge(0);
            breaches += is_fixed.sum(1, true).to(at::kDouble) - per_sentence(one_hot(fixed, is_fixed));
        }
        if (evidence.forbidden.defined()) breaches += per_sentence(evidence.forbidden.to(x.device()));
        log_w = log_w + breaches * std::log(options_.mismatch);
    }
    const at::Tensor posterior = at::softmax(log_w, 1);  // uniform prior

    // Per-position token marginals [B, L, V]: each sentence adds its posterior weight at its tokens.
    const at::Tensor marginals =
        at::mm(incidence_t(L), posterior.t().to(at::kFloat).contiguous()).t().reshape({B, L, V});

    at::Tensor logits = marginals.clamp_min(static_cast<float>(std::exp(options_.min_logprob))).log();
    logits.select(2, options_.mask_id).fill_(options_.min_logprob);
    if (!continuous && !options_.uniform_noise) {
        // Committed tokens are certain: one-hot log-probabilities at unmasked positions.
        const at::Tensor committed =
            at::full({B, L, V}, options_.min_logprob, logits.options()).scatter_(2, x.unsqueeze(2), 0.0);
        logits = at::where(masked.unsqueeze(2), logits, committed);
    }

    DenoiserOutput out;
    out.logits = logits;
    if (continuous) out.x0 = at::matmul(marginals, embedding_);
    return out;
}

}  // namespace rudder
