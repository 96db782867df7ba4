#include <rudder/nn/text_classifier.hpp>

#include <ATen/ATen.h>

#include <stdexcept>

#include <rudder/nn/config_error.hpp>
#include <rudder/nn/score_entropy.hpp>

namespace rudder::nn {
using json = nlohmann::json;

namespace {

// The keys of the network config that describe the trunk and the noise: read by DenoiserConfig::parse.
const char* const kTrunkKeys[] = {"family",          "vocab_size", "dim",      "layers",        "heads",     "ff_dim",
                                  "max_length",      "embed_dim",  "schedule", "mask_schedule", "objective", "graph",
                                  "uniform_schedule"};

DenoiserConfig trunk_config(const json& config, const Tokenizer& tokenizer) {
    if (!config.is_object() || !config.contains("family") ||
        (config.at("family") != "continuous" && config.at("family") != "discrete"))
        throw ConfigError("syntax classifier network config",
                          {{"/family", "expected \"continuous\" or \"discrete\" (the denoiser's family)"}});
    json trunk = {{"layers", 3}};
    for (const char* key : kTrunkKeys)
        if (config.contains(key)) trunk[key] = config.at(key);
    trunk["max_condition_length"] = 0;  // the classifier sees the text alone
    return DenoiserConfig::parse(trunk, tokenizer,
                                 config.at("family") == "continuous" ? Family::continuous : Family::discrete);
}

}  // namespace

TextClassifierNet::TextClassifierNet(const json& config, const Tokenizer& tokenizer)
    : trunk_config_(trunk_config(config, tokenizer)), schedule_(trunk_config_.gaussian_schedule()),
      mask_schedule_(trunk_config_.mask_eps),
      uniform_schedule_(trunk_config_.uniform_sigma_min, trunk_config_.uniform_sigma_max) {
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader r(config, "", issues);
    span_hidden_ = r.integer("span_hidden", 1, 8192).value_or(span_hidden_);
    tags_ = r.texts("tags").value_or(std::vector<std::string>{});
    labels_ = r.texts("labels").value_or(std::vector<std::string>{});
    classes_ = r.texts("classes").value_or(std::vector<std::string>{});
    noise_ = r.boolean("noise").value_or(true);
    if (tags_.empty() != labels_.empty())
        r.issue(tags_.empty() ? "tags" : "labels", "the syntax heads need both \"tags\" and \"labels\"");
    if (tags_.empty() && classes_.empty())
        r.issue("classes", "no head: give \"tags\" and \"labels\" (syntax) or \"classes\" (attribute), or both");
    if (classes_.size() == 1) r.issue("classes", "expected at least two classes");
    if (!issues.empty()) throw ConfigError("text classifier network config", std::move(issues));

    const int64_t W = trunk_config_.dim, V = trunk_config_.vocab_size;
    if (family() == Family::continuous) {
        noise_embedding_ = register_buffer("noise_embedding", at::zeros({V, trunk_config_.embed_dim}));
        input_proj_ = register_module("input_proj", torch::nn::Linear(trunk_config_.embed_dim, W));
    } else {
        token_embedding_ = register_parameter("token_embedding", at::randn({V, W}) * 0.02);
    }
    time_mlp1_ = register_module("time_mlp1", torch::nn::Linear(W, W));
    time_mlp2_ = register_module("time_mlp2", torch::nn::Linear(W, W));
    trunk_ = register_module("trunk", std::make_shared<TransformerTrunk>(trunk_config_));
    if (has_syntax_heads()) {
        tag_head_ = register_module("tag_head", torch::nn::Linear(W, static_cast<int64_t>(tags_.size()) + 1));
        span_start_ = register_module("span_start", torch::nn::Linear(W, span_hidden_));
        span_end_ =
            register_module("span_end", torch::nn::Linear(torch::nn::LinearOptions(W, span_hidden_).bias(false)));
        span_head_ =
            register_module("span_head", torch::nn::Linear(span_hidden_, static_cast<int64_t>(labels_.size()) + 1));
    }
    if (!classes_.empty())
        class_head_ = register_module("class_head", torch::nn::Linear(W, static_cast<int64_t>(classes_.size())));
}

json TextClassifierNet::config() const {
    json j = trunk_config_.to_json();
    for (const char* key : {"max_condition_length", "condition_dropout", "dropout"}) j.erase(key);
    if (has_syntax_heads()) {
        j["span_hidden"] = span_hidden_;
        j["tags"] = tags_;
        j["labels"] = labels_;
    }
    if (!classes_.empty()) j["classes"] = classes_;
    if (!noise_) j["noise"] = false;
    return j;
}

void TextClassifierNet::set_noise_embedding(const at::Tensor& table) {
    if (family() != Family::continuous) throw std::logic_error("a discrete classifier has no noise embedding");
    if (table.sizes() != noise_embedding_.sizes())
        throw std::invalid_argument("the denoiser's embedding table is " + c10::str(table.sizes()) +
                                    "; the classifier was configured for " + c10::str(noise_embedding_.sizes()));
    at::NoGradGuard no_grad;
    noise_embedding_.copy_(table);
}

at::Tensor TextClassifierNet::hidden(const at::Tensor& input, const at::Tensor& t) {
    at::Tensor h;
    if (family() == Family::continuous) {
        if (input.dim() != 3 || input.size(2) != trunk_config_.embed_dim)
            throw std::invalid_argument("the continuous classifier takes x_t [B, L, " +
                                        std::to_string(trunk_config_.embed_dim) + "], got " + c10::str(input.sizes()));
        h = input_proj_->forward(input.to(at::kFloat));
    } else if (input.scalar_type() == at::kLong) {
        h = at::embedding(token_embedding_, input);
    } else {
        if (input.dim() != 3 || input.size(2) != trunk_config_.vocab_size)
            throw std::invalid_argument("the discrete classifier takes tokens [B, L] or one-hot [B, L, " +
                                        std::to_string(trunk_config_.vocab_size) + "], got " + c10::str(input.sizes()));
        h = at::matmul(input.to(at::kFloat), token_embedding_);
    }
    if (h.size(1) > trunk_config_.max_length)
        throw std::invalid_argument("input has length " + std::to_string(h.size(1)) +
                                    "; the classifier takes at most " + std::to_string(trunk_config_.max_length));
    const at::Tensor time =
        time_mlp2_->forward(at::silu(time_mlp1_->forward(time_sinusoid(t.to(h.device()), trunk_config_.dim))));
    return trunk_->forward(h + time.unsqueeze(1), at::Tensor(), nullptr);
}

at::Tensor TextClassifierNet::tag_log_probs(const at::Tensor& hidden) {
    if (!has_syntax_heads()) throw std::logic_error("this classifier has no syntax heads");
    return at::log_softmax(tag_head_->forward(hidden), -1, at::kFloat);
}

at::Tensor TextClassifierNet::span_log_probs(const at::Tensor& hidden) {
    if (!has_syntax_heads()) throw std::logic_error("this classifier has no syntax heads");
    return label_spans(span_start_->forward(hidden).unsqueeze(2) + span_end_->forward(hidden).unsqueeze(1));
}

at::Tensor TextClassifierNet::span_log_probs(const at::Tensor& hidden, const at::Tensor& starts,
                                             const at::Tensor& lasts) {
    if (!has_syntax_heads()) throw std::logic_error("this classifier has no syntax heads");
    return label_spans(span_start_->forward(hidden.index_select(1, starts)) +
                       span_end_->forward(hidden.index_select(1, lasts)));
}

// Span (i, e): start features of word i plus end features of word e, through a ReLU to the label scores.
at::Tensor TextClassifierNet::label_spans(const at::Tensor& start_plus_end) {
    return at::log_softmax(span_head_->forward(at::relu(start_plus_end)), -1, at::kFloat);
}

at::Tensor TextClassifierNet::class_log_probs(const at::Tensor& hidden) {
    if (classes_.empty()) throw std::logic_error("this classifier has no attribute head");
    return at::log_softmax(class_head_->forward(hidden.mean(1)), -1, at::kFloat);
}

at::Tensor TextClassifierNet::predict_classes(const at::Tensor& tokens, at::Generator& gen) {
    at::Tensor t;
    const at::Tensor x = noisy_input(tokens, gen, t);
    return class_log_probs(hidden(x, t)).argmax(-1);
}

at::Tensor TextClassifierNet::clean_input(const at::Tensor& tokens, at::Tensor& t) {
    t = at::full({tokens.size(0)}, kMinTime, at::kFloat);
    return family() == Family::continuous ? at::embedding(noise_embedding_, tokens) : tokens;
}

at::Tensor TextClassifierNet::noisy_input(const at::Tensor& tokens, at::Generator& gen, at::Tensor& t) {
    const int64_t B = tokens.size(0), L = tokens.size(1);
    if (!noise_) return clean_input(tokens, t);
    if (family() == Family::continuous) {
        const int64_t T = schedule_.T();
        const at::Tensor k = at::randint(1, T + 1, {B}, gen, at::kLong);
        std::vector<double> ab(static_cast<size_t>(B));
        for (int64_t b = 0; b < B; ++b) ab[static_cast<size_t>(b)] = schedule_.alpha_bar(k[b].item<int64_t>());
        const at::Tensor a = at::tensor(ab, at::kDouble).to(at::kFloat).view({B, 1, 1});
        t = k.to(at::kFloat) / static_cast<double>(T);
        const at::Tensor eps = at::randn({B, L, trunk_config_.embed_dim}, gen, at::kFloat);
        return a.sqrt() * at::embedding(noise_embedding_, tokens) + (1.0 - a).sqrt() * eps;
    }
    t = at::rand({B}, gen, at::kFloat) * (1.0 - kMinTime) + kMinTime;
    if (trunk_config_.graph == "uniform") {
        std::vector<double> sigma_bar(static_cast<size_t>(B));
        for (int64_t b = 0; b < B; ++b)
            sigma_bar[static_cast<size_t>(b)] = uniform_schedule_.sigma_bar(t[b].item<double>());
        return sample_transition(Graph::uniform, tokens, at::tensor(sigma_bar, at::kDouble), trunk_config_.vocab_size,
                                 trunk_config_.mask_id, gen);
    }
    const at::Tensor masked = at::rand({B, L}, gen, at::kFloat).lt((t * (1.0 - mask_schedule_.eps())).unsqueeze(1));
    return tokens.masked_fill(masked, trunk_config_.mask_id);
}

at::Tensor TextClassifierNet::loss(const TrainingBatch& batch, at::Generator& gen) {
    const at::Tensor& tokens = batch.tokens;
    if (!tokens.defined() || tokens.dim() != 2 ||
        (has_syntax_heads() && (!batch.tags.defined() || !batch.targets.defined())) ||
        (!classes_.empty() && !batch.classes.defined()))
        throw std::invalid_argument(
            "the text classifier trains on tokens [B, L] with tags [B, L] and span targets (syntax "
            "heads) and classes [B] (attribute head)");
    const int64_t L = tokens.size(1);
    at::Tensor t;
    const at::Tensor x = noisy_input(tokens, gen, t);
    const at::Tensor h = hidden(x, t);
    at::Tensor total = at::zeros({}, h.options());
    if (!classes_.empty()) total = total + at::nll_loss(class_log_probs(h), batch.classes);
    if (!has_syntax_heads()) return total;
    const at::Tensor tag_loss =
        at::nll_loss(tag_log_probs(h).reshape({-1, static_cast<int64_t>(tags_.size()) + 1}), batch.tags.reshape({-1}));
    // Span [i, j) sits at (i, j - 1) of the span head's square.
    const at::Tensor span_targets = batch.targets.slice(1, 0, L).slice(2, 1, L + 1).reshape({-1});
    const at::Tensor span_loss = at::nll_loss(span_log_probs(h).reshape({-1, static_cast<int64_t>(labels_.size()) + 1}),
                                              span_targets, {}, at::Reduction::Mean, /*ignore_index=*/-1);
    return total + tag_loss + span_loss;
}

}  // namespace rudder::nn
