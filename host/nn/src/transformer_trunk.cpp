#include <rudder/nn/transformer_trunk.hpp>

#include <cmath>
#include <limits>

#include <rudder/nn/config_error.hpp>

#include "dropout.hpp"

namespace rudder::nn {
using json = nlohmann::json;

namespace {

constexpr double kTimeScale = 1000.0;  // the time embedding sees t * 1000, improved-diffusion's rescaled timesteps

}  // namespace

// -------------------------------------------------------------------------------------------------------------
// Config

DenoiserConfig DenoiserConfig::parse(const json& config, const Tokenizer& tokenizer, Family family) {
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader r(config, "", issues);
    DenoiserConfig c;
    c.family = family;
    c.vocab_size = tokenizer.vocab_size();
    c.pad_id = tokenizer.pad_id();
    c.mask_id = tokenizer.mask_id();
    if (r.has("family")) r.choice("family", {family_name(family)});
    if (r.has("vocab_size")) {
        const int64_t v = r.integer("vocab_size", 1, int64_t{1} << 31).value_or(c.vocab_size);
        if (v != c.vocab_size) {
            r.issue("vocab_size", "the network was built for " + std::to_string(v) + " tokens but the tokenizer has " +
                                      std::to_string(c.vocab_size));
        }
    }
    c.dim = r.integer("dim", 2, 8192).value_or(c.dim);
    c.layers = r.integer("layers", 1, 64).value_or(c.layers);
    c.heads = r.integer("heads", 1, 128).value_or(c.heads);
    c.ff_dim = r.integer("ff_dim", 1, 65536).value_or(c.ff_dim);
    c.max_length = r.integer("max_length", 1, 4096).value_or(c.max_length);
    c.max_condition_length = r.integer("max_condition_length", 0, 4096).value_or(c.max_condition_length);
    c.dropout = r.number("dropout", 0.0, 0.9).value_or(c.dropout);
    c.condition_dropout = r.number("condition_dropout", 0.0, 1.0).value_or(c.condition_dropout);
    if (c.dim % c.heads != 0) {
        r.issue("heads",
                "dim (" + std::to_string(c.dim) + ") must be a multiple of heads (" + std::to_string(c.heads) + ")");
    }
    if (family == Family::continuous) {
        if (c.dim % 2 != 0) r.issue("dim", "must be even (the time embedding is half cosines, half sines)");
        c.embed_dim = r.integer("embed_dim", 1, 4096).value_or(c.embed_dim);
        c.objective = r.choice("objective", {"diffusion_lm", "cdcd"}).value_or("diffusion_lm");
        c.self_conditioning = r.boolean("self_conditioning").value_or(c.self_conditioning);
        json_input::ObjectReader s(r.object("schedule").value_or(json::object()), "/schedule", issues);
        c.schedule = s.choice("name", {"sqrt", "cosine", "linear", "cdcd"})
                         .value_or(c.objective == "cdcd" ? "cdcd" : c.schedule);
        c.schedule_steps = s.integer("T", 2, 1000000).value_or(c.schedule_steps);
        if (c.schedule == "cdcd") {
            c.sigma_min = s.number("sigma_min", 1e-6, 1e6).value_or(c.sigma_min);
            c.sigma_max = s.number("sigma_max", 1e-6, 1e6).value_or(c.sigma_max);
            if (!(c.sigma_max > c.sigma_min))
                s.issue("sigma_max", "must be above sigma_min (" + std::to_string(c.sigma_min) + ")");
            c.warp_bins = s.integer("warp_bins", 1, 100000).value_or(c.warp_bins);
            c.warp_uniform = s.number("warp_uniform", 0.0, 1.0).value_or(c.warp_uniform);
            if (const auto warp = s.array("warp")) {
                std::vector<double> cdf;
                for (const json& v : *warp) cdf.push_back(v.is_number() ? v.get<double>() : -1.0);
                try {
                    if (static_cast<int64_t>(cdf.size()) != c.warp_bins + 1)
                        throw std::invalid_argument("has " + std::to_string(cdf.size()) + " values; warp_bins + 1 = " +
                                                    std::to_string(c.warp_bins + 1) + " expected");
                    TimeWarp(1.0, 2.0, cdf);  // checks the CDF alone
                    c.warp = std::move(cdf);
                } catch (const std::invalid_argument& e) {
                    s.issue("warp",
                            std::string("not a time warp's CDF (numbers nondecreasing from 0 to 1): ") + e.what());
                }
            }
        }
        s.reject_unknown_keys();
        if ((c.objective == "cdcd") != (c.schedule == "cdcd"))
            r.issue("objective", "the \"cdcd\" objective and the \"cdcd\" schedule go together (got objective \"" +
                                     c.objective + "\" with schedule \"" + c.schedule + "\")");
        if (c.self_conditioning && c.objective != "cdcd")
            r.issue("self_conditioning", "self-conditioning is implemented for the \"cdcd\" objective only");
    } else {
        c.objective = r.choice("objective", {"subs", "score_entropy"}).value_or("subs");
        c.graph = r.choice("graph", {"absorb", "uniform"}).value_or(c.graph);
        if (c.graph == "uniform" && c.objective != "score_entropy")
            r.issue(
                "graph",
                "the uniform graph is trained with the \"score_entropy\" objective (SUBS is defined for masking only)");
        json_input::ObjectReader m(r.object("mask_schedule").value_or(json::object()), "/mask_schedule", issues);
        c.mask_eps = m.number("eps", 0.0, 0.5).value_or(c.mask_eps);
        m.reject_unknown_keys();
        if (c.graph == "uniform") {
            json_input::ObjectReader u(r.object("uniform_schedule").value_or(json::object()), "/uniform_schedule",
                                       issues);
            c.uniform_sigma_min = u.number("sigma_min", 1e-8, 1e3).value_or(c.uniform_sigma_min);
            c.uniform_sigma_max = u.number("sigma_max", 1e-8, 1e3).value_or(c.uniform_sigma_max);
            if (!(c.uniform_sigma_max > c.uniform_sigma_min))
                u.issue("sigma_max", "must be above sigma_min (" + std::to_string(c.uniform_sigma_min) + ")");
            u.reject_unknown_keys();
        }
    }
    r.reject_unknown_keys();
    for (int64_t id : {c.pad_id, c.mask_id}) {
        if (id < 0 || id >= c.vocab_size) {
            issues.push_back({"", "the tokenizer's special id " + std::to_string(id) +
                                      " is outside its vocabulary of " + std::to_string(c.vocab_size)});
        }
    }
    if (!issues.empty()) {
        throw ConfigError(std::string(family_name(family)) + " denoiser network config", std::move(issues));
    }
    return c;
}

json DenoiserConfig::to_json() const {
    json j = {{"family", family_name(family)},
              {"vocab_size", vocab_size},
              {"dim", dim},
              {"layers", layers},
              {"heads", heads},
              {"ff_dim", ff_dim},
              {"max_length", max_length},
              {"max_condition_length", max_condition_length},
              {"dropout", dropout},
              {"condition_dropout", condition_dropout}};
    if (family == Family::continuous) {
        j["embed_dim"] = embed_dim;
        j["schedule"] = {{"name", schedule}, {"T", schedule_steps}};
        if (schedule == "cdcd") {
            j["schedule"]["sigma_min"] = sigma_min;
            j["schedule"]["sigma_max"] = sigma_max;
            j["schedule"]["warp_bins"] = warp_bins;
            j["schedule"]["warp_uniform"] = warp_uniform;
            if (!warp.empty()) j["schedule"]["warp"] = warp;
        }
        // Written when not the defaults, so the configs of models trained before them stay as they were.
        if (objective != "diffusion_lm") j["objective"] = objective;
        if (self_conditioning) j["self_conditioning"] = true;
    } else {
        j["mask_schedule"] = {{"eps", mask_eps}};
        if (objective != "subs") j["objective"] = objective;
        if (graph != "absorb") {
            j["graph"] = graph;
            j["uniform_schedule"] = {{"sigma_min", uniform_sigma_min}, {"sigma_max", uniform_sigma_max}};
        }
    }
    return j;
}

int64_t DenoiserConfig::parameters_at_least() const {
    // The parse() bounds (dim <= 8192, ff_dim <= 65536, layers <= 64, max_length <= 4096) keep this inside int64.
    return layers * (4 * dim * dim + 2 * dim * ff_dim) + max_length * dim;
}

GaussianSchedule DenoiserConfig::gaussian_schedule() const {
    if (schedule != "cdcd") return GaussianSchedule::make(schedule, schedule_steps);
    return GaussianSchedule::make_cdcd(sigma_min, sigma_max, warp, warp_bins, schedule_steps);
}

// Pre-LayerNorm transformer block: x + Attn(LN(x)), then x + FF(LN(x)).
class Block : public torch::nn::Module {
public:
    Block(const DenoiserConfig& c) : heads_(c.heads), dropout_(c.dropout) {
        // Residual projections start smaller (GPT-2) so the stream's variance does not grow with depth.
        const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers));
        norm1_ = register_module("norm1", std::make_shared<LayerNorm>(c.dim));
        qkv_ = register_module("qkv", std::make_shared<Affine>(c.dim, 3 * c.dim, kInitStd));
        proj_ = register_module("proj", std::make_shared<Affine>(c.dim, c.dim, residual_std));
        norm2_ = register_module("norm2", std::make_shared<LayerNorm>(c.dim));
        ff1_ = register_module("ff1", std::make_shared<Affine>(c.dim, c.ff_dim, kInitStd));
        ff2_ = register_module("ff2", std::make_shared<Affine>(c.ff_dim, c.dim, residual_std));
    }

    // x: [B, S, W]; key_bias: [B, 1, 1, S], 0 for keys to attend to and -inf for keys to ignore, or undefined.
    // Dropout (with `gen`) acts on the residual branches only, as in MDLM's DiT: the attention weights are the
    // largest tensor of the block, and drawing a mask for them costs a quarter of a CPU training step.
    at::Tensor forward(const at::Tensor& x, const at::Tensor& key_bias, at::Generator* gen) {
        const int64_t B = x.size(0), S = x.size(1), W = x.size(2), hd = W / heads_;
        // [B, S, 3W] -> three [B, H, S, hd]
        const at::Tensor qkv = qkv_->forward(norm1_->forward(x)).view({B, S, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
        // Contiguous copies make the batched matmuls below a third faster on the CPU than strided views.
        const at::Tensor q = qkv[0].contiguous(), k = qkv[1].contiguous(), v = qkv[2].contiguous();
        at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
        if (key_bias.defined()) scores = scores + key_bias;
        const at::Tensor attended =
            at::matmul(at::softmax(scores, -1, at::kFloat), v).transpose(1, 2).reshape({B, S, W});
        const at::Tensor h = x + dropout(proj_->forward(attended), dropout_, gen);
        const at::Tensor ff = ff2_->forward(at::gelu(ff1_->forward(norm2_->forward(h))));
        return h + dropout(ff, dropout_, gen);
    }

    void zero_residual_outputs() {
        at::NoGradGuard no_grad;
        for (const auto& output : {proj_, ff2_}) {
            output->weight().zero_();
            output->bias().zero_();
        }
    }

private:
    int64_t heads_;
    double dropout_;
    std::shared_ptr<LayerNorm> norm1_, norm2_;
    std::shared_ptr<Affine> qkv_, proj_, ff1_, ff2_;
};

at::Tensor time_sinusoid(const at::Tensor& t, int64_t dim) {
    const int64_t half = dim / 2;
    const at::Tensor freqs =
        at::exp(at::arange(half, t.options().dtype(at::kFloat)) * (-std::log(10000.0) / static_cast<double>(half)));
    const at::Tensor args = (t.to(at::kFloat) * kTimeScale).unsqueeze(1) * freqs.unsqueeze(0);
    return at::cat({at::cos(args), at::sin(args)}, 1);
}

// -------------------------------------------------------------------------------------------------------------
// Trunk

TransformerTrunk::TransformerTrunk(const DenoiserConfig& config) : config_(config) {
    const int64_t W = config.dim;
    position_ = register_parameter("position", init_normal({config.max_length, W}, kInitStd));
    if (config.max_condition_length > 0) {
        condition_token_ = register_parameter("condition_token", init_normal({config.vocab_size, W}, kInitStd));
        condition_position_ =
            register_parameter("condition_position", init_normal({config.max_condition_length, W}, kInitStd));
    }
    // A plain Module as the container names the blocks blocks.0, blocks.1, ... as torch's ModuleList would.
    auto container = register_module("blocks", std::make_shared<torch::nn::Module>());
    for (int64_t i = 0; i < config.layers; ++i) {
        blocks_.push_back(container->register_module(std::to_string(i), std::make_shared<Block>(config)));
    }
    final_norm_ = register_module("final_norm", std::make_shared<LayerNorm>(W));
}

void TransformerTrunk::start_blocks_as_identity(int64_t first) {
    for (size_t i = static_cast<size_t>(std::max<int64_t>(first, 0)); i < blocks_.size(); ++i)
        blocks_[i]->zero_residual_outputs();
}

at::Tensor TransformerTrunk::forward(const at::Tensor& h, const at::Tensor& condition, at::Generator* gen) {
    const int64_t B = h.size(0), L = h.size(1);
    at::Tensor x = h + position_.slice(0, 0, L);
    at::Tensor key_bias;
    int64_t C = 0;
    if (condition.defined() && config_.max_condition_length > 0) {
        // Columns that are pad in every row change nothing (masked keys whose own states nobody reads), so they
        // are dropped: an all-pad condition costs nothing, and short meaning representations cost little.
        const at::Tensor present = condition.ne(config_.pad_id);
        const at::Tensor used_columns = present.any(0).nonzero();
        C = used_columns.numel() == 0 ? 0 : used_columns.max().item<int64_t>() + 1;
        if (C > 0) {
            const at::Tensor cond = condition.slice(1, 0, C);
            const at::Tensor c = at::embedding(condition_token_, cond) + condition_position_.slice(0, 0, C);
            x = at::cat({c, x}, 1);
            const at::Tensor ignore =
                at::cat({present.slice(1, 0, C).logical_not(), at::zeros({B, L}, present.options())}, 1);
            key_bias = at::zeros({B, 1, 1, C + L}, x.options())
                           .masked_fill(ignore.view({B, 1, 1, C + L}), -std::numeric_limits<float>::infinity());
        }
    }
    for (const auto& block : blocks_) x = block->forward(x, key_bias, gen);
    return final_norm_->forward(x.slice(1, C, C + L));
}

}  // namespace rudder::nn
