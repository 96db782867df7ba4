#include <rudder/nn/denoiser_net.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "dropout.hpp"
#include <rudder/nn/score_entropy.hpp>
#include <rudder/nn/config_error.hpp>
#include <rudder/nn/weights.hpp>

namespace rudder::nn {
using json = nlohmann::json;

namespace {

constexpr double kMinTime = 1e-3;  // MDLM's sampling_eps: the discrete loss draws t from [kMinTime, 1]

// MDLM's low-discrepancy draw of a batch's diffusion times: t_b = (u + b / B) mod 1 mapped to [kMinTime, 1], float64
// [B] on the CPU (one uniform u from `gen`).
at::Tensor low_discrepancy_times(int64_t B, at::Generator& gen) {
    const at::Tensor u = at::rand({1}, gen, at::kDouble);
    return at::fmod(u + at::arange(B, at::kDouble) / static_cast<double>(B), 1.0) * (1.0 - kMinTime) + kMinTime;
}

std::string shape_string(const at::Tensor& t) {
    std::ostringstream out;
    out << t.sizes();
    return out.str();
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------
// Shared

DenoiserNet::DenoiserNet(DenoiserConfig config) : config_(std::move(config)) {
    trunk_ = register_module("trunk", std::make_shared<TransformerTrunk>(config_));
}

std::vector<std::string> DenoiserNet::grow_from(const SafeTensors& tensors, const std::filesystem::path& file,
                                                int64_t held_layers) {
    const auto new_block = [&](const std::string& name) {
        for (int64_t i = held_layers; i < config_.layers; ++i)
            if (name.rfind("trunk.blocks." + std::to_string(i) + ".", 0) == 0) return true;
        return false;
    };
    std::vector<std::string> fresh = load_module_tensors(*this, tensors, file, "", new_block);
    trunk_->start_blocks_as_identity(held_layers);
    return fresh;
}

at::Tensor DenoiserNet::check_tokens(const at::Tensor& tokens) const {
    if (!tokens.defined() || tokens.dim() != 2 || tokens.scalar_type() != at::kLong || tokens.size(0) < 1 ||
        tokens.size(1) < 1) {
        throw std::invalid_argument("tokens must be int64 [B, L] with B, L >= 1, got " +
                                    (tokens.defined() ? shape_string(tokens) + " " + c10::toString(tokens.scalar_type())
                                                      : std::string("undefined")));
    }
    if (tokens.size(1) > config_.max_length) {
        throw std::invalid_argument("tokens have length " + std::to_string(tokens.size(1)) +
                                    "; the network takes at most max_length = " + std::to_string(config_.max_length));
    }
    const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
    if (lo < 0 || hi >= config_.vocab_size) {
        throw std::invalid_argument("tokens hold id " + std::to_string(lo < 0 ? lo : hi) +
                                    ", outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
    }
    return tokens;
}

at::Tensor DenoiserNet::check_condition(const at::Tensor& condition, int64_t batch) const {
    if (!condition.defined()) return condition;
    if (config_.max_condition_length == 0) {
        throw std::invalid_argument(
            "a condition was given, but the network has no condition inputs "
            "(max_condition_length = 0)");
    }
    if (condition.dim() != 2 || condition.scalar_type() != at::kLong || condition.size(0) != batch) {
        throw std::invalid_argument("condition must be int64 [B, C] with B = " + std::to_string(batch) + ", got " +
                                    shape_string(condition) + " " + c10::toString(condition.scalar_type()));
    }
    if (condition.size(1) > config_.max_condition_length) {
        throw std::invalid_argument("condition has " + std::to_string(condition.size(1)) +
                                    " tokens; the network takes at most max_condition_length = " +
                                    std::to_string(config_.max_condition_length));
    }
    if (condition.numel() > 0) {
        const int64_t lo = condition.min().item<int64_t>(), hi = condition.max().item<int64_t>();
        if (lo < 0 || hi >= config_.vocab_size) {
            throw std::invalid_argument("condition holds id " + std::to_string(lo < 0 ? lo : hi) +
                                        ", outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
        }
    }
    return condition;
}

at::Tensor DenoiserNet::drop_condition(const at::Tensor& condition, at::Generator& gen) const {
    if (!condition.defined() || config_.condition_dropout <= 0.0) return condition;
    const at::Tensor drop = at::rand({condition.size(0), 1}, gen, at::kFloat).lt(config_.condition_dropout);
    return condition.masked_fill(drop.to(condition.device()), config_.pad_id);
}

at::Generator* DenoiserNet::dropout_generator(at::Generator& gen) const {
    return is_training() && config_.dropout > 0.0 ? &gen : nullptr;
}

// -------------------------------------------------------------------------------------------------------------
// Continuous family

namespace {

// The time warp's running means forget old losses at this rate per example seen in a bin; their weight in the fit
// is capped at the matching effective count.
constexpr double kWarpDecay = 0.99;

}  // namespace

ContinuousDenoiserNet::ContinuousDenoiserNet(const json& network_config, const Tokenizer& tokenizer)
    : DenoiserNet(DenoiserConfig::parse(network_config, tokenizer, Family::continuous)),
      schedule_(config_.gaussian_schedule()) {
    if (!cdcd()) {  // CDCD draws its noise levels through the warp, which training moves: no fixed table
        const int64_t T = schedule_.T();
        std::vector<double> table(static_cast<size_t>(T) + 1);
        for (int64_t k = 0; k <= T; ++k) table[static_cast<size_t>(k)] = schedule_.alpha_bar(k);
        alpha_bar_ = at::tensor(table, at::kDouble);
    }

    const int64_t V = config_.vocab_size, D = config_.embed_dim, W = config_.dim;
    // Unit-variance embeddings, as Diffusion-LM's nn.Embedding starts: the data then has the noise's scale.
    embedding_ = register_parameter("embedding", init_normal({V, D}, 1.0));
    input_proj_ = register_module("input_proj", std::make_shared<Affine>(D, W, kInitStd));
    time_mlp1_ = register_module("time_mlp1", std::make_shared<Affine>(W, W, kInitStd));
    time_mlp2_ = register_module("time_mlp2", std::make_shared<Affine>(W, W, kInitStd));
    if (cdcd()) {
        head_ = register_module("head", std::make_shared<Affine>(W, V, kInitStd));
        if (config_.self_conditioning)
            self_condition_proj_ = register_module("self_condition_proj", std::make_shared<Affine>(D, W, kInitStd));
        // The running means start where the config's warp says nothing was seen yet: a config's warp is the learned
        // one of a finished model, whose weights file then brings these buffers back.
        warp_loss_ = register_buffer("warp_loss", at::zeros({config_.warp_bins}, at::kDouble));
        warp_seen_ = register_buffer("warp_seen", at::zeros({config_.warp_bins}, at::kDouble));
    } else {
        output_proj_ = register_module("output_proj", std::make_shared<Affine>(W, D, kInitStd));
    }
}

json ContinuousDenoiserNet::config() const {
    json j = config_.to_json();
    if (cdcd()) j["schedule"]["warp"] = warp_cdf();
    return j;
}

json ContinuousDenoiserNet::training_log() const {
    if (!cdcd()) return json::object();
    const at::Tensor loss = warp_loss_.cpu().contiguous();
    const auto* l = loss.data_ptr<double>();
    return {{"warp", warp_cdf()}, {"warp_loss", std::vector<double>(l, l + loss.numel())}};
}

TimeWarp ContinuousDenoiserNet::warp() const { return *schedule_.warp(); }

std::vector<double> ContinuousDenoiserNet::warp_cdf() const {
    if (!cdcd()) return {};
    // Fitted from the running means when there are any (training, or weights that carry them); else the config's.
    const at::Tensor seen = warp_seen_.cpu().contiguous(), loss = warp_loss_.cpu().contiguous();
    if (seen.gt(0).all().item<bool>()) {
        const auto* l = loss.data_ptr<double>();
        const auto* w = seen.data_ptr<double>();
        return fit_time_warp({l, l + loss.numel()}, {w, w + seen.numel()}, config_.warp_uniform);
    }
    return schedule_.warp()->cdf();
}

void ContinuousDenoiserNet::update_warp(const at::Tensor& levels, const at::Tensor& losses) {
    const at::Tensor lv = levels.to(at::kCPU, at::kDouble).contiguous(),
                     ls = losses.detach().to(at::kCPU, at::kDouble).contiguous();
    at::NoGradGuard no_grad;
    at::Tensor mean = warp_loss_.cpu().contiguous(), seen = warp_seen_.cpu().contiguous();
    auto* m = mean.data_ptr<double>();
    auto* w = seen.data_ptr<double>();
    const int64_t K = config_.warp_bins;
    const double cap = 1.0 / (1.0 - kWarpDecay);
    for (int64_t b = 0; b < lv.numel(); ++b) {
        const int64_t j =
            std::clamp(static_cast<int64_t>(lv.data_ptr<double>()[b] * static_cast<double>(K)), int64_t{0}, K - 1);
        const double l = ls.data_ptr<double>()[b];
        m[j] = w[j] > 0 ? kWarpDecay * m[j] + (1.0 - kWarpDecay) * l : l;
        w[j] = std::min(w[j] + 1.0, cap);
    }
    warp_loss_.copy_(mean);
    warp_seen_.copy_(seen);
    schedule_ =
        GaussianSchedule::make_cdcd(TimeWarp(config_.sigma_min, config_.sigma_max, warp_cdf()), config_.schedule_steps);
}

at::Tensor cdcd_embedding(const at::Tensor& stored) {
    const at::Tensor table = stored.to(at::kFloat);  // no copy for the float32 parameter
    return table * (std::sqrt(static_cast<double>(table.size(-1))) / table.norm(2, -1, true).clamp_min(1e-12));
}

void ContinuousDenoiserNet::start_from_diffusion_lm(const SafeTensors& tensors, const std::filesystem::path& file) {
    if (!cdcd()) throw std::logic_error("start_from_diffusion_lm: this network is not trained with the cdcd objective");
    const at::Tensor* out_weight = tensors.find("output_proj.weight");
    const at::Tensor* out_bias = tensors.find("output_proj.bias");
    if (!out_weight || !out_bias)
        throw SafeTensorsError("'" + file.string() + "': no output_proj (not a diffusion_lm network's weights)");
    SafeTensors shared;
    for (const auto& [name, tensor] : tensors.tensors)
        if (name.rfind("output_proj.", 0) != 0) shared.tensors.emplace_back(name, tensor);
    const auto cdcd_only = [](const std::string& name) {
        return name.rfind("head.", 0) == 0 || name.rfind("self_condition_proj.", 0) == 0 || name == "warp_loss" ||
               name == "warp_seen";
    };
    load_module_tensors(*this, shared, file, "", cdcd_only);
    const int64_t D = config_.embed_dim, W = config_.dim;
    if (!out_weight->sizes().equals({D, W}) || !out_bias->sizes().equals({D}))
        throw SafeTensorsError("'" + file.string() + "': output_proj is " + c10::str(out_weight->sizes()) +
                               ", the network expects [" + std::to_string(D) + ", " + std::to_string(W) + "]");
    at::NoGradGuard no_grad;
    head_->weight().copy_(at::matmul(embedding_, out_weight->to(at::kFloat)));
    head_->bias().copy_(at::matmul(embedding_, out_bias->to(at::kFloat)));
    if (self_condition_proj_) {
        self_condition_proj_->weight().zero_();
        self_condition_proj_->bias().zero_();
    }
}

at::Tensor ContinuousDenoiserNet::diffused_embedding() const {
    return cdcd() ? cdcd_embedding(embedding_) : embedding_;
}

at::Tensor ContinuousDenoiserNet::check_inputs(const at::Tensor& x_t, const at::Tensor& t,
                                               const at::Tensor& condition) const {
    const int64_t D = config_.embed_dim;
    if (!x_t.defined() || x_t.dim() != 3 || x_t.size(2) != D || x_t.size(0) < 1 || x_t.size(1) < 1 ||
        !x_t.is_floating_point()) {
        throw std::invalid_argument("x_t must be floating-point [B, L, " + std::to_string(D) + "], got " +
                                    (x_t.defined() ? shape_string(x_t) : std::string("undefined")));
    }
    const int64_t B = x_t.size(0);
    if (x_t.size(1) > config_.max_length) {
        throw std::invalid_argument("x_t has length " + std::to_string(x_t.size(1)) +
                                    "; the network takes at most max_length = " + std::to_string(config_.max_length));
    }
    if (!t.defined() || t.dim() != 1 || t.size(0) != B) {
        throw std::invalid_argument("t must be [B] with B = " + std::to_string(B));
    }
    return check_condition(condition, B);
}

at::Tensor ContinuousDenoiserNet::hidden(const at::Tensor& x_t, const at::Tensor& level, const at::Tensor& condition,
                                         const at::Tensor& self_condition, at::Generator* gen) {
    // Sinusoidal embedding of the rescaled time (or noise level), then a small MLP; added to every text position.
    const at::Tensor time =
        time_mlp2_->forward(at::silu(time_mlp1_->forward(time_sinusoid(level.to(x_t.device()), config_.dim))));
    at::Tensor h = input_proj_->forward(x_t.to(at::kFloat)) + time.unsqueeze(1);
    if (self_condition_proj_) {
        if (self_condition.defined()) {
            if (!self_condition.sizes().equals(x_t.sizes()))
                throw std::invalid_argument("self_condition must have x_t's shape " + shape_string(x_t) + ", got " +
                                            shape_string(self_condition));
            h = h + self_condition_proj_->forward(self_condition.to(at::kFloat));
        } else {
            h = h + self_condition_proj_->bias();  // the projection of zeros: no estimate yet
        }
    }
    return trunk_->forward(h, condition, gen);
}

at::Tensor ContinuousDenoiserNet::clean_logits(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition,
                                               const at::Tensor& self_condition, at::Generator* gen) {
    if (!cdcd())
        throw std::logic_error(
            "clean_logits: the network was trained with the diffusion_lm objective (it predicts x0)");
    const at::Tensor cond = check_inputs(x_t, t, condition);
    // The sampler's times are warped times; the network reads the noise level they stand for.
    const at::Tensor tc = t.to(at::kCPU, at::kDouble).contiguous();
    std::vector<double> levels(static_cast<size_t>(tc.numel()));
    const TimeWarp& w = *schedule_.warp();
    for (int64_t b = 0; b < tc.numel(); ++b)
        levels[static_cast<size_t>(b)] = w.level(std::clamp(tc.data_ptr<double>()[b], 0.0, 1.0));
    return head_->forward(hidden(x_t, at::tensor(levels, at::kFloat), cond, self_condition, gen));
}

at::Tensor ContinuousDenoiserNet::predict_x0(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition,
                                             at::Generator* gen) {
    if (cdcd()) return at::matmul(at::softmax(clean_logits(x_t, t, condition, {}, gen), -1), diffused_embedding());
    const at::Tensor cond = check_inputs(x_t, t, condition);
    return output_proj_->forward(hidden(x_t, t, cond, {}, gen));
}

at::Tensor ContinuousDenoiserNet::rounding_logits(const at::Tensor& x0) const { return at::matmul(x0, embedding_.t()); }

at::Tensor ContinuousDenoiserNet::loss(const TrainingBatch& batch, at::Generator& gen) {
    return cdcd() ? cdcd_loss(batch, gen) : diffusion_lm_loss(batch, gen);
}

// CDCD's objective (Dieleman et al. 2022, sections 3.1-3.4), per example:
//   level ~ the time warp (training: u ~ U[0, 1], level = F^-1(u); dev loss: level ~ U[0, 1], the same at every
//           evaluation whatever the warp), sigma = sigma_min (sigma_max / sigma_min)^level
//   x     = (E[w] + sigma eps) / sqrt(1 + sigma^2)   E's rows normalised; the network's input scaled to unit variance
//   loss  = mean_i -log p(w_i | x, sigma)            cross-entropy at every position, pads included (the model must
//                                                    learn where the text ends); through x it also trains E
// Self-conditioning: half the training batches first predict without it (no gradient) and feed that estimate,
// softmax(logits) E, back as the second pass's extra input; the dev loss always runs both passes, as sampling does.
at::Tensor ContinuousDenoiserNet::cdcd_loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor tokens = check_tokens(batch.tokens);
    const int64_t B = tokens.size(0), L = tokens.size(1), D = config_.embed_dim;
    const at::Tensor cond = drop_condition(check_condition(batch.condition, B), gen);
    const auto device = tokens.device();

    const at::Tensor u = at::rand({B}, gen, at::kDouble);
    at::Tensor levels = u;
    if (is_training()) {
        const TimeWarp w = warp();
        levels = u.clone();
        auto* lv = levels.data_ptr<double>();
        for (int64_t b = 0; b < B; ++b) lv[b] = w.level(lv[b]);
    }
    const at::Tensor sigma =
        at::exp(std::log(config_.sigma_min) + levels * (std::log(config_.sigma_max) - std::log(config_.sigma_min)));
    const at::Tensor E = diffused_embedding();
    const at::Tensor x0 = at::embedding(E, tokens);
    const at::Tensor eps = at::randn({B, L, D}, gen, at::kFloat).to(device);
    const at::Tensor s = sigma.to(at::kFloat).to(device).view({B, 1, 1});
    const at::Tensor x = (x0 + s * eps) / (1.0 + s * s).sqrt();
    const at::Tensor level_in = levels.to(at::kFloat);

    at::Tensor self_condition;
    const bool self_condition_now =
        config_.self_conditioning && (!is_training() || at::rand({1}, gen, at::kDouble).item<double>() < 0.5);
    if (self_condition_now) {
        at::NoGradGuard no_grad;
        self_condition =
            at::matmul(at::softmax(head_->forward(hidden(x, level_in, cond, {}, nullptr)), -1, at::kFloat), E).detach();
    }
    const at::Tensor logits =
        head_->forward(hidden(x, level_in, cond, self_condition, dropout_generator(gen))).to(at::kFloat);
    const at::Tensor target_logit = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
    const at::Tensor per_example = (at::logsumexp(logits, -1) - target_logit).mean(1);  // [B]
    if (is_training()) update_warp(levels, per_example);
    return per_example.mean();
}

// Diffusion-LM's end-to-end objective (improved-diffusion's training_losses_e2e with x0 prediction), per example:
//   x_start  = E[w] + sqrt(1 - ab_1) n        the embedding with the first step's noise ("x_start_mean" trick), so
//                                             the decoder below learns from what the last reverse step hands it
//   k ~ U{1..T},  x_k = sqrt(ab_k) x_start + sqrt(1 - ab_k) eps
//   mse      = mean |f(x_k, k) - x_start|^2   (the target is E[w] itself when k = 1: the L_0 term)
//   rounding = mean_i -log softmax(x_start_i · E^T)[w_i]   (the decoder p(w | x_0), tied to E)
//   prior    = mean |sqrt(ab_T) x_start|^2    (the L_T term; tiny under "sqrt", but it bounds E's scale)
// Means run over positions (and embedding dimensions), pads included: the model must learn where the text ends.
at::Tensor ContinuousDenoiserNet::diffusion_lm_loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor tokens = check_tokens(batch.tokens);
    const int64_t B = tokens.size(0), L = tokens.size(1), D = config_.embed_dim, T = schedule_.T();
    const at::Tensor cond = drop_condition(check_condition(batch.condition, B), gen);
    const auto device = tokens.device();

    const at::Tensor x0_mean = at::embedding(embedding_, tokens);
    const at::Tensor x_start =
        x0_mean + std::sqrt(1.0 - schedule_.alpha_bar(1)) * at::randn({B, L, D}, gen, at::kFloat).to(device);

    const at::Tensor k = at::randint(1, T + 1, {B}, gen, at::kLong);
    const at::Tensor ab = alpha_bar_.index_select(0, k).to(at::kFloat).to(device).view({B, 1, 1});
    const at::Tensor eps = at::randn({B, L, D}, gen, at::kFloat).to(device);
    const at::Tensor x_t = ab.sqrt() * x_start + (1.0 - ab).sqrt() * eps;
    const at::Tensor t = (k.to(at::kFloat) / static_cast<double>(T)).to(device);

    const at::Tensor x0_hat = predict_x0(x_t, t, cond, dropout_generator(gen));
    const at::Tensor first_step = k.eq(1).to(device).view({B, 1, 1});
    const at::Tensor mse = (x0_hat - at::where(first_step, x0_mean, x_start)).pow(2).mean({1, 2});

    // -log softmax(x · E^T)[w] = logsumexp(x · E^T) - x · E[w]: one pass over the [B, L, V] logits each way.
    const at::Tensor rounding =
        (at::logsumexp(rounding_logits(x_start).to(at::kFloat), -1) - (x_start * x0_mean).sum(-1)).mean(1);
    const at::Tensor prior = (schedule_.alpha_bar(T) * x_start.pow(2)).mean({1, 2});
    return (mse + rounding + prior).mean();
}

// -------------------------------------------------------------------------------------------------------------
// Discrete family

DiscreteDenoiserNet::DiscreteDenoiserNet(const json& network_config, const Tokenizer& tokenizer)
    : DenoiserNet(DenoiserConfig::parse(network_config, tokenizer, Family::discrete)), mask_schedule_(config_.mask_eps),
      uniform_schedule_(config_.uniform_sigma_min, config_.uniform_sigma_max) {
    const int64_t V = config_.vocab_size, W = config_.dim;
    token_embedding_ = register_parameter("token_embedding", init_normal({V, W}, kInitStd));
    head_ = register_module("head", std::make_shared<Affine>(W, V, kInitStd));
    if (score_entropy() && !uniform()) {
        // The absorbing score's output is the clean token's log-probability, unnormalised: start it at the uniform
        // distribution's rather than at 0 (a total of V), or the first steps only learn the normaliser.
        at::NoGradGuard no_grad;
        head_->bias().fill_(-std::log(static_cast<double>(V - 1)));
    }
    if (uniform()) {
        time_mlp1_ = register_module("time_mlp1", std::make_shared<Affine>(W, W, kInitStd));
        time_mlp2_ = register_module("time_mlp2", std::make_shared<Affine>(W, W, kInitStd));
    }
}

at::Tensor DiscreteDenoiserNet::hidden(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& condition,
                                       at::Generator* gen) {
    at::Tensor h = at::embedding(token_embedding_, x_t);
    if (uniform()) {
        const at::Tensor time = time_mlp2_->forward(
            at::silu(time_mlp1_->forward(time_sinusoid(t.to(at::kFloat).to(h.device()), config_.dim))));
        h = h + time.unsqueeze(1);
    }
    return trunk_->forward(h, condition, gen);
}

at::Tensor subs_log_probs(at::Tensor logits, const at::Tensor& tokens, int64_t mask_id) {
    logits.select(-1, mask_id).fill_(-std::numeric_limits<float>::infinity());
    at::Tensor out = at::log_softmax(logits, -1).contiguous();
    out.select(-1, mask_id).fill_(kImpossibleLogProb);
    // An unmasked position is certain of its token (carry-over): only those rows are rewritten, so a step with most
    // positions masked makes no further pass over [B, L, V].
    const at::Tensor ids = tokens.to(out.device()).reshape({-1});
    const at::Tensor rows = ids.ne(mask_id).nonzero().squeeze(1);
    if (rows.numel() > 0) {
        at::Tensor flat = out.view({-1, out.size(-1)});
        flat.index_fill_(0, rows, kImpossibleLogProb);
        flat.index_put_({rows, ids.index_select(0, rows)}, at::zeros({}, out.options()));
    }
    return out;
}

at::Tensor DiscreteDenoiserNet::head_bias() const {
    // SUBS, zero masking probability: the clean token is never the mask. Put into the bias, the -inf costs no
    // extra pass over the [B, L, V] logits.
    return head_->bias().index_fill(0, at::tensor({config_.mask_id}, at::kLong).to(head_->bias().device()),
                                    -std::numeric_limits<float>::infinity());
}

at::Tensor DiscreteDenoiserNet::log_probs(const at::Tensor& tokens, const at::Tensor& condition, double t) {
    check_tokens(tokens);
    const at::Tensor cond = check_condition(condition, tokens.size(0));
    if (uniform()) {
        if (!(t > 0.0 && t <= 1.0))
            throw std::invalid_argument("log_probs: t must be in (0, 1], got " + std::to_string(t));
        const at::Tensor times = at::full({tokens.size(0)}, t, at::TensorOptions().dtype(at::kFloat));
        const at::Tensor h = hidden(tokens, times, cond, nullptr);
        const int64_t N = tokens.numel(), V = config_.vocab_size;
        // The head gives the clean token given the other positions; the position's own noisy token adds its evidence.
        const at::Tensor log_p0 = at::log_softmax(at::linear(h, head_->weight(), head_bias()), -1).reshape({N, V});
        const at::Tensor sigma_bar =
            at::full({N}, uniform_schedule_.sigma_bar(t), at::TensorOptions().dtype(at::kDouble));
        return nn::uniform_posterior_from_rest(log_p0, tokens.reshape({N}), sigma_bar)
            .clamp_min(kImpossibleLogProb)
            .view({tokens.size(0), tokens.size(1), V});
    }
    const at::Tensor hidden = trunk_->forward(at::embedding(token_embedding_, tokens), cond, nullptr);
    const at::Tensor logp =
        at::log_softmax(at::linear(hidden, head_->weight(), head_bias()), -1).clamp_min(kImpossibleLogProb);
    // SUBS, carry-over unmasking: an unmasked position keeps its token with certainty.
    const at::Tensor committed = at::full_like(logp, kImpossibleLogProb).scatter_(-1, tokens.unsqueeze(-1), 0.0);
    return at::where(tokens.eq(config_.mask_id).unsqueeze(-1), logp, committed);
}

// MDLM's continuous-time negative ELBO for absorbing diffusion under SUBS. With alpha(t) = P(a token is still
// clean at t) = 1 - m(t), m = MaskSchedule::mask_prob, MDLM (its eq. 10-11) gives
//   NELBO = E_{t ~ U[0,1]} E_{x_t ~ q(.|x_0)} [ alpha'(t) / (1 - alpha(t)) * sum_{i: x_t^i = mask} log p(x_0^i | x_t) ]
// (unmasked positions add nothing: SUBS gives them log p = 0). For the log-linear schedule m(t) = (1 - eps) t,
//   alpha'(t) / (1 - alpha(t)) = -m'(t) / m(t) = -(1 - eps) / ((1 - eps) t) = -1 / t,
// so the loss is E_t [ (1/t) * sum over masked positions of -log p(x_0^i | x_t) ]. This is MDLM's
// dsigma / expm1(sigma) weight written out: sigma(t) = -log(1 - m(t)) gives dsigma / expm1(sigma) = m'/m = 1/t.
// We divide by all B * L positions (pads included: the model must learn where the text ends) and draw t with
// MDLM's low-discrepancy sampler, t_b = (u + b / B) mod 1 mapped to [kMinTime, 1], which lowers the variance of
// a batch's estimate at no cost.
at::Tensor DiscreteDenoiserNet::loss(const TrainingBatch& batch, at::Generator& gen) {
    return score_entropy() ? score_entropy_loss(batch, gen) : subs_loss(batch, gen);
}

// SEDD's diffusion-weighted denoising score entropy (its eq. 10): per position,
//   sigma(t) * sum over y != x_t of Q[x_t, y] (s_y - r_y log s_y + K(r_y))      (nn::score_entropy)
// with t drawn as for SUBS (MDLM's low-discrepancy draw in [kMinTime, 1]) and sigma(t) the noise rate: the
// log-linear schedule's for "absorb", the geometric one's for "uniform". Summed over positions, divided by all
// B * L. With the prior term (0 up to e^-sigma_bar(1)) this is the negative ELBO. The absorbing graph's score is
// the output less log(e^sigma_bar - 1) (SEDD's scaling: the output then tracks the clean-token log-probability), and
// only masked positions carry loss, so the head runs on them alone. The uniform graph's score is the one the head's
// clean-token distribution implies (nn::uniform_score_of_clean), at every position.
at::Tensor DiscreteDenoiserNet::score_entropy_loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor tokens = check_tokens(batch.tokens);
    if (tokens.eq(config_.mask_id).any().item<bool>())
        throw std::invalid_argument("tokens hold the mask id " + std::to_string(config_.mask_id) +
                                    "; training text must be clean");
    const int64_t B = tokens.size(0), L = tokens.size(1), V = config_.vocab_size;
    const at::Tensor cond = drop_condition(check_condition(batch.condition, B), gen);
    const auto device = tokens.device();
    const Graph graph = uniform() ? Graph::uniform : Graph::absorb;

    const at::Tensor t = low_discrepancy_times(B, gen);
    std::vector<double> sigma_bar(static_cast<size_t>(B)), rate(static_cast<size_t>(B));
    const double* times = t.data_ptr<double>();
    for (int64_t b = 0; b < B; ++b) {
        const double tb = times[b];
        sigma_bar[static_cast<size_t>(b)] = uniform() ? uniform_schedule_.sigma_bar(tb) : mask_schedule_.sigma_bar(tb);
        rate[static_cast<size_t>(b)] = uniform() ? uniform_schedule_.sigma(tb) : mask_schedule_.sigma(tb);
    }
    const at::Tensor total = at::tensor(sigma_bar, at::kDouble), weight = at::tensor(rate, at::kDouble);
    const at::Tensor x_t = sample_transition(graph, tokens, total, V, config_.mask_id, gen);

    const at::Tensor states = hidden(x_t, t, cond, dropout_generator(gen)).reshape({B * L, -1});
    const at::Tensor row_of = at::arange(B * L, at::kLong).div(L, "floor");  // the batch row of each position
    at::Tensor where = at::arange(B * L, at::kLong).to(device);
    if (!uniform()) where = x_t.reshape({B * L}).eq(config_.mask_id).nonzero().squeeze(1);
    const at::Tensor rows = row_of.to(device).index_select(0, where);
    const at::Tensor row_total = total.to(device).index_select(0, rows);
    at::Tensor log_score;
    if (uniform()) {
        // The head gives p0 (the mask token impossible); the score is the one p0 implies at this noise level.
        const at::Tensor log_p0 = at::log_softmax(at::linear(states, head_->weight(), head_bias()), -1, at::kFloat);
        log_score = nn::uniform_score_of_clean(log_p0, x_t.reshape({B * L}), row_total);
    } else {
        // log(e^sigma_bar - 1) through expm1, as SEDD computes it where sigma_bar is small.
        log_score = head_->forward(states.index_select(0, where)).to(at::kFloat) -
                    at::log(at::expm1(row_total)).to(states.scalar_type()).unsqueeze(1);
    }
    const at::Tensor entropy =
        nn::score_entropy(graph, log_score, x_t.reshape({B * L}).index_select(0, where),
                          tokens.reshape({B * L}).index_select(0, where), row_total, config_.mask_id);
    const at::Tensor weights = weight.to(device).index_select(0, rows).to(entropy.scalar_type());
    return (entropy * weights).sum() / static_cast<double>(B * L);
}

SubsNoise draw_subs_noise(const at::Tensor& tokens, int64_t mask_id, double eps, at::Generator& gen,
                          const at::Tensor& clean) {
    if (tokens.eq(mask_id).any().item<bool>())
        throw std::invalid_argument("tokens hold the mask id " + std::to_string(mask_id) +
                                    "; training text must be clean");
    const int64_t B = tokens.size(0), L = tokens.size(1);
    SubsNoise noise;
    noise.t = low_discrepancy_times(B, gen);
    noise.masked = at::rand({B, L}, gen, at::kDouble).lt((noise.t * (1.0 - eps)).unsqueeze(1)).to(tokens.device());
    if (clean.defined()) noise.masked = noise.masked.logical_and(clean.to(tokens.device()).logical_not());
    noise.x_t = tokens.masked_fill(noise.masked, mask_id);
    return noise;
}

at::Tensor subs_nelbo(const at::Tensor& states, const SubsNoise& noise, const at::Tensor& tokens,
                      const at::Tensor& head_weight, const at::Tensor& bias) {
    const int64_t B = tokens.size(0), L = tokens.size(1);
    // Only masked positions carry loss, so the head (the [., V] part of the step) runs on them alone, and
    // -log p(w) = logsumexp(logits) - logit[w] takes the target logit as a dot product, never a [., V] gather.
    const at::Tensor where = noise.masked.reshape({B * L}).nonzero().squeeze(1);
    const at::Tensor h = states.reshape({B * L, -1}).index_select(0, where);
    const at::Tensor target = tokens.reshape({B * L}).index_select(0, where);
    const at::Tensor lse = at::logsumexp(at::linear(h, head_weight, bias).to(at::kFloat), -1);
    const at::Tensor target_logit = (h * head_weight.index_select(0, target)).sum(-1) + bias.index_select(0, target);
    const at::Tensor weight =
        (1.0 / noise.t).to(at::kFloat).to(tokens.device()).index_select(0, at::div(where, L, "floor"));
    // Divided by every position, masked or not, so the estimate is unbiased whatever the masks drew.
    return ((lse - target_logit) * weight).sum() / static_cast<double>(B * L);
}

at::Tensor DiscreteDenoiserNet::subs_loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor tokens = check_tokens(batch.tokens);
    // The condition's dropout is drawn before the noise (the order fixes what a seed gives).
    const at::Tensor cond = drop_condition(check_condition(batch.condition, tokens.size(0)), gen);
    const SubsNoise noise = draw_subs_noise(tokens, config_.mask_id, mask_schedule_.eps(), gen);
    const at::Tensor hidden = trunk_->forward(at::embedding(token_embedding_, noise.x_t), cond, dropout_generator(gen));
    return subs_nelbo(hidden, noise, tokens, head_->weight(), head_bias());
}

// -------------------------------------------------------------------------------------------------------------

std::shared_ptr<DenoiserNet> make_denoiser_net(const json& network_config, const Tokenizer& tokenizer) {
    const bool has_family = network_config.is_object() && network_config.contains("family");
    const json family = has_family ? network_config.at("family") : json();
    if (family == "continuous") return std::make_shared<ContinuousDenoiserNet>(network_config, tokenizer);
    if (family == "discrete") return std::make_shared<DiscreteDenoiserNet>(network_config, tokenizer);
    throw ConfigError("denoiser network config",
                      {{"/family", (has_family ? "expected \"continuous\" or \"discrete\", got " + family.dump()
                                               : std::string("missing 'family' (\"continuous\" or \"discrete\")"))}});
}

at::Tensor encode_conditions(const Tokenizer& tokenizer, const std::vector<std::string>& conditions,
                             int64_t condition_length) {
    const auto n = static_cast<int64_t>(conditions.size());
    at::Tensor out = at::full({n, condition_length}, tokenizer.pad_id(), at::kLong);
    int64_t* data = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
        const std::vector<int64_t> ids = tokenizer.encode(conditions[static_cast<size_t>(i)]);
        if (static_cast<int64_t>(ids.size()) > condition_length) {
            throw std::invalid_argument("condition " + std::to_string(i) + " ('" + conditions[static_cast<size_t>(i)] +
                                        "') has " + std::to_string(ids.size()) + " tokens; the model takes at most " +
                                        std::to_string(condition_length));
        }
        std::copy(ids.begin(), ids.end(), data + i * condition_length);
    }
    return out;
}

}  // namespace rudder::nn
