#include <rudder/runtime/generator.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <rudder/base/memory.hpp>
#include <rudder/nn/compute_threads.hpp>

#include "composer.hpp"
#include "particles.hpp"
#include "sampler.hpp"

namespace rudder {
namespace fs = std::filesystem;

// The run services a controller reaches through rudder_run_info: the model's tokenizer and a re-entrant call of
// the denoiser on the input of the step the controller is in (handed over with the call).
class Generator::Services final : public plugins::RunServices {
public:
    Services(const Model& model, fs::path base_dir, std::vector<fs::path> model_path, GenerationStats& stats)
        : model_(model), base_dir_(std::move(base_dir)), model_path_(std::move(model_path)), stats_(stats) {}

    std::vector<int64_t> tokenize(const std::string& text) override { return model_.tokenizer->encode(text); }
    std::string detokenize(const int64_t* ids, int64_t n) override { return model_.tokenizer->decode(ids, n); }
    const std::string* token_text(int64_t id) override {
        if (id < 0 || id >= model_.tokenizer->vocab_size()) return nullptr;
        return &model_.tokenizer->token(id);
    }
    at::Tensor denoise(const plugins::StepInputs& step, const std::vector<std::string>& conditions) override {
        if (!model_.denoiser->conditional())
            throw std::logic_error("model '" + model_.name + "' was not trained with a condition");
        if (conditions.empty()) throw std::invalid_argument("denoise needs at least one condition");
        const at::Tensor& state = model_.family == Family::continuous ? step.latent : step.tokens;
        const int64_t n = static_cast<int64_t>(conditions.size()), batch = state.size(0);
        std::vector<std::string> rows;
        rows.reserve(static_cast<size_t>(n * batch));
        for (const auto& c : conditions) rows.insert(rows.end(), static_cast<size_t>(batch), c);
        std::vector<int64_t> repeat(static_cast<size_t>(state.dim()), 1);
        repeat[0] = n;
        Evidence evidence;
        if (self_condition_.defined()) evidence.self_condition = self_condition_.repeat(repeat);
        const at::Tensor logits = model_.denoiser->denoise(state.repeat(repeat), step.t, rows, evidence).logits;
        stats_.denoised_sequences += n * batch;  // the control's cost, counted with the loop's
        at::Tensor out = at::log_softmax(logits.to(at::kFloat), -1);
        std::vector<int64_t> shape{n, batch};
        for (int64_t d = 1; d < out.dim(); ++d) shape.push_back(out.size(d));
        return out.reshape(shape);
    }

    std::string model_dir() override {
        std::error_code ec;
        return model_.dir.empty() ? std::string() : fs::absolute(model_.dir, ec).lexically_normal().string();
    }
    at::Tensor embedding() override {
        return model_.family == Family::continuous ? model_.denoiser->embedding() : at::Tensor();
    }
    std::string find_model(const std::string& name) override {
        std::error_code ec;
        return fs::absolute(resolve_model(name, base_dir_, model_path_), ec).lexically_normal().string();
    }

    // The loop's previous clean estimate for the rows of the next denoise() (a self-conditioned network reads it).
    void set_self_condition(at::Tensor x0) { self_condition_ = std::move(x0); }

private:
    const Model& model_;
    at::Tensor self_condition_;
    fs::path base_dir_;                 // the recipe's folder: relative model paths start there
    std::vector<fs::path> model_path_;  // where bundled names are looked up
    GenerationStats& stats_;            // the generator's: these calls' sequences are counted there
};

namespace {

// Positions per sequence when neither the recipe nor the model says: E2E's texts are at most 75 words.
constexpr int64_t kDefaultMaxLength = 64;
// Reverse steps between two decisions of the compute threads: a decision reads /proc for well under a
// millisecond, a step of the bundled models takes 5 to 50.
constexpr int64_t kThreadRefreshSteps = 20;

c10::Device parse_device(const std::string& name) {
    const c10::Device device(name);
    if (device.is_cuda() && !at::hasCUDA())
        throw std::invalid_argument("device '" + name + "' asked for, but this LibTorch was built without CUDA support "
                                    "(or no CUDA device is visible); use \"cpu\"");
    return device;
}

ContinuousSampler::Kind continuous_kind(const std::string& name) {
    return name == "ddpm" ? ContinuousSampler::Kind::ddpm : ContinuousSampler::Kind::ddim;
}
DiscreteSampler::Kind discrete_kind(const std::string& name) {
    if (name == "first_hitting") return DiscreteSampler::Kind::first_hitting;
    if (name == "confidence") return DiscreteSampler::Kind::confidence;
    return name == "euler" ? DiscreteSampler::Kind::euler : DiscreteSampler::Kind::analytic;
}
DiscreteSampler::Order confidence_order(const std::string& name) {
    if (name == "margin") return DiscreteSampler::Order::margin;
    return name == "entropy" ? DiscreteSampler::Order::entropy : DiscreteSampler::Order::probability;
}
DiscreteSampler::Remasking remasking_of(const RemaskSpec& spec) {
    DiscreteSampler::Remasking r;
    using Strategy = DiscreteSampler::Remasking::Strategy;
    r.strategy = spec.strategy == "cap" ? Strategy::cap : spec.strategy == "rescale" ? Strategy::rescale : Strategy::none;
    r.eta = spec.eta;
    r.from_t = spec.from_t;
    r.to_t = spec.to_t;
    return r;
}

// The constraints as the denoiser takes them: whole [B, L, V] masks, which the combination has when its rows are every
// position (the generator asks for that from denoisers that use evidence; others get no mask, which costs nothing).
Evidence evidence_of(const Combined& c, int64_t batch, int64_t len, int64_t vocab_size, bool uses_evidence) {
    const at::Tensor forbidden = uses_evidence ? c.forbidden_mask(vocab_size) : at::Tensor();
    const bool whole = forbidden.defined() && forbidden.size(0) == batch * len;
    return Evidence{c.fixed, whole ? forbidden.view({batch, len, -1}) : at::Tensor(), at::Tensor()};
}

// A combination with nothing in it over these rows.
Combined rows_only(const at::Tensor& rows) {
    Combined c;
    c.rows = rows;
    return c;
}

// The most likely token of each row: max(-1)'s index, which ATen 1.13 computes ~4x faster than argmax(-1).
at::Tensor most_likely(const at::Tensor& scores) { return std::get<1>(scores.max(-1)); }

// What the controllers see at one step, built here only. PREDICT, either family: `latent` (continuous) or `masked`
// (discrete) is undefined for the other family.
plugins::StepInputs predict_inputs(int64_t step, int64_t steps, double t, double t_next, const at::Tensor& latent,
                                   const at::Tensor& x0_logits, const at::Tensor& tokens, const at::Tensor& masked) {
    plugins::StepInputs in;
    in.phase = RUDDER_PHASE_PREDICT;
    in.step = static_cast<int32_t>(step);
    in.total_steps = static_cast<int32_t>(steps);
    in.t = t;
    in.t_next = t_next;
    in.latent = latent;
    in.x0_logits = x0_logits;
    in.tokens = tokens;
    in.masked = masked;
    return in;
}

// GUIDE (continuous): the step's PREDICT inputs, at the next noise level, on the guided iterate.
plugins::StepInputs guide_inputs(const plugins::StepInputs& predict, const at::Tensor& latent, int64_t iteration) {
    plugins::StepInputs g = predict;
    g.phase = RUDDER_PHASE_GUIDE;
    g.guide_iter = static_cast<int32_t>(iteration);
    g.t = predict.t_next;
    g.latent = latent;
    g.x0_logits = at::Tensor();
    return g;
}

bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
    if (a.defined() != b.defined()) return false;
    return !a.defined() || (a.sizes() == b.sizes() && a.equal(b));
}

// Whether two steps' hard constraints are the same (they usually are: most controllers constrain every step alike).
bool same_constraints(const Combined& a, const Combined& b) {
    return same_tensor(a.fixed, b.fixed) && same_tensor(a.forbidden, b.forbidden) &&
           same_tensor(a.forbidden_bits, b.forbidden_bits) && same_tensor(a.rows, b.rows);
}

// What the controllers active at t read, filled in: x0 whole (log-probabilities [B, L, V]) or at the rows, and the
// candidates. `logits` [B * L, V] are the network's output, `row_logits` [N, V] the same at in.rows; `logp` caches
// their log-softmax between steps (controllers that read x0 get it normalised again, as they always have).
void fill_reads(plugins::StepInputs& in, const Composer::Reads& reads, const at::Tensor& logits,
                const at::Tensor& row_logits, at::Tensor& logp, int64_t batch, int64_t L, int64_t candidates) {
    const int64_t V = logits.size(1);
    if (reads.whole_x0) {
        if (!logp.defined()) logp = at::log_softmax(logits, -1);
        in.x0_logits = logp.view({batch, L, V});
    }
    const bool every_row = in.rows.size(0) == batch * L;
    if (reads.x0_rows)
        in.x0_rows = logp.defined() ? (every_row ? logp : logp.index_select(0, in.rows)) : at::log_softmax(row_logits, -1);
    if (reads.candidates) {
        // Read by no controller, x0 is not normalised for them: the denoiser's output already is (DenoiserOutput).
        auto [top, ids] = plugins::top_candidates(in.x0_rows.defined() ? in.x0_rows : row_logits, candidates);
        in.candidate_ids = ids;
        in.candidate_logp = top;
    }
}

// Index of the first pad, i.e. the number of content tokens.
int64_t content_length(const std::vector<int64_t>& ids, int64_t pad) {
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == pad) return static_cast<int64_t>(i);
    return static_cast<int64_t>(ids.size());
}

}  // namespace

nlohmann::json sample_json(const SampleResult& s) {
    using json = nlohmann::json;
    json controls = json::object();
    for (const auto& c : s.controls) {
        json v = json::object();
        v["satisfied"] = c.verdict.satisfied < 0 ? json(nullptr) : json(c.verdict.satisfied == 1);
        if (c.verdict.has_score) v["score"] = c.verdict.score;
        if (!c.verdict.detail.empty()) {
            try {
                v["detail"] = json_input::parse(c.verdict.detail);
            } catch (const std::exception&) {  // not JSON, or too deep: kept as text
                v["detail"] = c.verdict.detail;
            }
        }
        controls[c.label] = v;
    }
    return json{{"index", s.index},
                {"text", s.text},
                {"tokens", std::vector<int64_t>(s.tokens.begin(), s.tokens.begin() + s.n_tokens)},
                {"controls", controls}};
}

bool keep_freed_memory_in_process() {
#if defined(__GLIBC__)
    // Fixed thresholds (1 GiB) stop glibc from serving large blocks with mmap and from trimming the heap.
    return mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
#else
    return false;
#endif
}

Generator::Generator(Recipe recipe, plugins::Registry& registry, const std::vector<fs::path>& model_path,
                     std::vector<RecipeIssue> earlier_issues)
    : recipe_(std::move(recipe)), device_(c10::kCPU) {
    set_up(registry, model_path, std::move(earlier_issues), [this, &model_path] {
        std::optional<Family> family;
        if (recipe_.family) family = *recipe_.family == "continuous" ? Family::continuous : Family::discrete;
        return load_model(resolve_model(recipe_.model, recipe_.base_dir, model_path), family);
    });
}

Generator::Generator(Recipe recipe, Model model, plugins::Registry& registry, const std::vector<fs::path>& model_path,
                     std::vector<RecipeIssue> earlier_issues)
    : recipe_(std::move(recipe)), device_(c10::kCPU) {
    recipe_.model = model.name;
    set_up(registry, model_path, std::move(earlier_issues), [this, &model] {
        // What load_model guarantees of a model directory, checked here for a model built by the caller.
        if (model.tokenizer == nullptr || model.denoiser == nullptr)
            throw ModelError("model '" + model.name + "' has no " + (model.tokenizer == nullptr ? "tokenizer" : "denoiser"));
        if (model.denoiser->family() != model.family)
            throw ModelError("model '" + model.name + "' is " + family_name(model.family) + " but its denoiser is " +
                             family_name(model.denoiser->family()));
        if (model.denoiser->vocab_size() != model.tokenizer->vocab_size())
            throw ModelError("model '" + model.name + "': the denoiser has " + std::to_string(model.denoiser->vocab_size()) +
                             " tokens of vocabulary, the tokenizer " + std::to_string(model.tokenizer->vocab_size()));
        if (recipe_.family && *recipe_.family != family_name(model.family))
            throw ModelError("model '" + model.name + "' is not a " + *recipe_.family + " model");
        return std::move(model);
    });
}

void Generator::set_up(plugins::Registry& registry, const std::vector<fs::path>& model_path,
                       std::vector<RecipeIssue> earlier_issues, const std::function<Model()>& load) {
    std::vector<RecipeIssue> issues = std::move(earlier_issues);
    // A value the parser already reported (or one inside it) is not checked again here.
    auto reported = [&](const std::string& pointer) {
        for (const auto& i : issues)
            if (!i.pointer.empty() && (pointer == i.pointer || pointer.rfind(i.pointer + "/", 0) == 0)) return true;
        return false;
    };
    try {
        device_ = parse_device(recipe_.device);
    } catch (const std::exception& e) {
        issues.push_back({"/device", e.what()});
    }

    bool model_ok = false;
    if (!reported("/model") && !reported("/family")) {
        try {
            model_ = load();
            model_.denoiser->to(device_);
            model_ok = true;
        } catch (const std::exception& e) {
            issues.push_back({"/model", e.what()});
        }
    }

    if (model_ok) {
        const int64_t longest = model_.denoiser->max_length();
        if (recipe_.max_length == 0) {
            recipe_.max_length = longest > 0 ? longest : kDefaultMaxLength;
            if (recipe_.max_length_limit > 0 && recipe_.max_length > recipe_.max_length_limit)
                issues.push_back({"/max_length", "model '" + model_.name + "' handles " + std::to_string(recipe_.max_length) +
                                                     " positions, over the limit of " +
                                                     std::to_string(recipe_.max_length_limit) + "; give max_length"});
        } else if (longest > 0 && recipe_.max_length > longest && !reported("/max_length")) {
            issues.push_back({"/max_length", "model '" + model_.name + "' handles at most " + std::to_string(longest) +
                                                 " positions; asked for " + std::to_string(recipe_.max_length)});
        }
    }
    if (model_ok && !model_.recommended_sampler.empty() && !recipe_.sampler_given.contains("name") &&
        !reported("/sampler")) {
        // The recipe leaves the sampler to the model: its recommendation, with the recipe's own keys over it.
        nlohmann::json merged = model_.recommended_sampler;
        merged.update(recipe_.sampler_given);
        std::vector<RecipeIssue> problems;
        SamplerSpec spec;
        parse_sampler_settings(merged, "/sampler", spec, problems);
        for (const auto& p : problems)
            if (!reported(p.pointer))  // the recipe's own keys were checked already; say each problem once
                issues.push_back({p.pointer, p.message + " (the recipe names no sampler, so it takes model '" + model_.name +
                                             "''s recommended " + model_.recommended_sampler.dump() + ")"});
        if (problems.empty()) recipe_.sampler = spec;
    }
    if (model_ok && !reported("/sampler/name")) {
        const bool continuous = model_.family == Family::continuous;
        std::string& name = recipe_.sampler.name;
        if (name.empty()) name = continuous ? "ddim" : "analytic";
        if (!is_sampler_of(name, model_.family))
            issues.push_back({"/sampler/name", "sampler '" + name + "' is for " +
                                                   (continuous ? "discrete" : "continuous") + " models; model '" +
                                                   model_.name + "' is " + family_name(model_.family) + " (use " +
                                                   (continuous ? "'ddpm' or 'ddim'"
                                                               : "'euler', 'analytic', 'first_hitting' or 'confidence'") + ")"});
        if (!continuous && model_.denoiser->uniform_noise()) {
            // Under uniform noise no position is ever masked: samplers that order or revisit masked positions have
            // nothing to work on.
            if (name == "first_hitting" || name == "confidence")
                issues.push_back({"/sampler/name", "model '" + model_.name + "' diffuses with uniform noise (no position is "
                                                   "ever masked); sampler '" + name + "' unmasks positions: use 'analytic' "
                                                   "(Tweedie tau-leaping) or 'euler'"});
            if (recipe_.sampler.prompt_guidance > 0 && !reported("/sampler/prompt_guidance"))
                issues.push_back({"/sampler/prompt_guidance", "model '" + model_.name + "' diffuses with uniform noise: "
                                                              "there is no mask to hide the fixed tokens with, so no "
                                                              "unconditional pass; prompt guidance is for absorbing models"});
            if (recipe_.sampler.remask.on() && !reported("/sampler/remask"))
                issues.push_back({"/sampler/remask", "model '" + model_.name + "' diffuses with uniform noise, where every "
                                                     "token may change at every step already; remasking is for absorbing models"});
        }
        if (name == "first_hitting") recipe_.sampler.steps = recipe_.max_length;
        if (const int64_t block = continuous ? 0 : model_.denoiser->decoding_block(); block > 0) {
            // BD3-LM: a block is predicted from the finished blocks before it, never from masked ones.
            const int64_t b = recipe_.sampler.block_length;
            const std::string how = "; sample it block by block, e.g. {\"name\": \"first_hitting\", \"block_length\": " +
                                    std::to_string(block) + "}";
            if (name != "first_hitting" && name != "confidence")
                issues.push_back({"/sampler/name", "model '" + model_.name + "' predicts each block of " + std::to_string(block) +
                                                       " positions from the finished blocks before it (block diffusion); "
                                                       "sampler '" + name + "' unmasks the whole sequence at once" + how});
            else if (b < 1 || block % b != 0)
                issues.push_back({"/sampler/block_length", "model '" + model_.name + "' predicts each block of " +
                                                               std::to_string(block) + " positions from the finished blocks "
                                                               "before it: block_length must divide " + std::to_string(block) +
                                                               (b < 1 ? " (none given)" : ", not be " + std::to_string(b)) + how});
            // Its training never shows it a masked block before the one it predicts, which is what the unconditional
            // pass would be.
            if (recipe_.sampler.prompt_guidance > 0 && !reported("/sampler/prompt_guidance"))
                issues.push_back({"/sampler/prompt_guidance", "model '" + model_.name + "' predicts each block from the "
                                                              "finished blocks before it and was never trained with them "
                                                              "masked, so it has no unconditional prediction to guide away "
                                                              "from; prompt guidance is for models that unmask anywhere"});
        }
        if (name == "confidence" || name == "first_hitting") {
            const int64_t L = recipe_.max_length, b = recipe_.sampler.block_length;
            if (b > L)
                issues.push_back({"/sampler/block_length", "block_length " + std::to_string(b) +
                                                               " is longer than max_length " + std::to_string(L)});
        }
        if (name == "confidence") {
            const int64_t L = recipe_.max_length, b = recipe_.sampler.block_length;
            const int64_t blocks = DiscreteSampler::block_count(L, b);
            if (recipe_.sampler.steps < blocks)
                issues.push_back({"/sampler/steps", std::to_string(recipe_.sampler.steps) + " steps for " +
                                                        std::to_string(blocks) + " blocks of " + std::to_string(b) +
                                                        " positions: the confidence sampler needs a step per block"});
        }
        if (continuous && recipe_.sampler.prompt_guidance > 0 && !reported("/sampler/prompt_guidance"))
            issues.push_back({"/sampler/prompt_guidance", "'prompt_guidance' applies to absorbing discrete models; model '" +
                                                              model_.name + "' is continuous"});
        if (!continuous && recipe_.sampler.noise_scale != 1.0 && !reported("/sampler/noise_scale"))
            issues.push_back({"/sampler/noise_scale", "'noise_scale' applies to continuous models; model '" +
                                                          model_.name + "' is " + family_name(model_.family)});
        if (recipe_.guidance.particles > 1 && !reported("/guidance/particles")) {
            if (continuous && recipe_.guidance.gradient_steps == 0)
                issues.push_back({"/guidance/particles", "particles are weighed by the controllers' log p(c | x), which "
                                                         "they report during gradient guidance; gradient_steps is 0"});
            if (!continuous && model_.denoiser->uniform_noise())
                issues.push_back({"/guidance/particles", "model '" + model_.name + "' diffuses with uniform noise; "
                                                         "particles are for continuous and absorbing models"});
            if (!continuous && recipe_.guidance.resample_every > 0 && !reported("/guidance/resample_every"))
                issues.push_back({"/guidance/resample_every", "discrete particles are only chosen between at the end: "
                                                              "resampling them is for continuous models"});
        }
        if (continuous && recipe_.sampler.steps > model_.schedule.T())
            issues.push_back({"/sampler/steps", "model '" + model_.name + "' was trained with " +
                                                    std::to_string(model_.schedule.T()) + " steps; asked for " +
                                                    std::to_string(recipe_.sampler.steps)});
    }

    // Where each controller runs: its own "isolation", else the recipe's, else the host's ($RUDDER_ISOLATION).
    std::string host_isolation = "in_process";
    if (const char* env = std::getenv("RUDDER_ISOLATION"); env != nullptr && *env != '\0') {
        if (std::string(env) == "process" || std::string(env) == "in_process")
            host_isolation = env;
        else
            issues.push_back({"/isolation", std::string("RUDDER_ISOLATION=") + env +
                                                " is not a place to run controllers: expected \"in_process\" or "
                                                "\"process\""});
    }
    std::vector<ComposedController> controllers;
    std::vector<std::string> pointers;  // each created controller's place in the recipe
    for (const auto& spec : recipe_.controllers) {
        if (reported(spec.pointer + "/plugin") || reported(spec.pointer + "/params")) continue;
        const std::string& where =
            !spec.isolation.empty() ? spec.isolation : recipe_.isolation ? *recipe_.isolation : host_isolation;
        const plugins::Isolation isolation =
            where == "process" ? plugins::Isolation::process : plugins::Isolation::in_process;
        try {
            plugins::ControllerType type = registry.resolve(spec.plugin, recipe_.base_dir, spec.sha256);
            try {
                ComposedController c;
                c.instance = std::make_unique<plugins::ControllerInstance>(type, spec.params.dump(), spec.name,
                                                                           isolation);
                c.instance->set_time_limit(spec.time_limit);
                c.continue_on_failure = spec.on_failure == "continue";
                c.weight = spec.weight;
                c.active = spec.active;
                controllers.push_back(std::move(c));
                pointers.push_back(spec.pointer);
            } catch (const std::exception& e) {
                issues.push_back({spec.pointer + "/params", e.what()});
            }
        } catch (const std::exception& e) {
            issues.push_back({spec.pointer + "/plugin", e.what()});
        }
    }
    if (recipe_.guidance.particles > 1 && !reported("/guidance/particles") &&
        std::none_of(controllers.begin(), controllers.end(),
                     [](const ComposedController& c) { return c.instance->has(RUDDER_CAP_GRADIENT); }))
        issues.push_back({"/guidance/particles", "particles are chosen by the controllers' log p(c | x), which only "
                                                 "controllers with the GRADIENT capability report; the recipe has none"});
    if (!issues.empty()) throw RecipeError(std::move(issues));
    // Each controller sees the run's shape now, as the first batch will give it: params that cannot work with
    // this model or length (a span longer than max_length, say) are the recipe's problem, found by `validate`
    // rather than by the run.
    services_ = std::make_unique<Services>(model_, recipe_.base_dir, model_path, stats_);
    const plugins::RunShape first = run_shape(std::min(recipe_.batch_size, recipe_.samples) * recipe_.guidance.particles);
    for (size_t k = 0; k < controllers.size(); ++k) {
        try {
            controllers[k].instance->begin(first, services_.get());
        } catch (const std::exception& e) {
            issues.push_back({pointers[k] + "/params", std::string("does not fit this run (") + family_name(model_.family) +
                                                           " model '" + model_.name + "', max_length " +
                                                           std::to_string(recipe_.max_length) + "): " + e.what()});
        }
    }
    if (!issues.empty()) throw RecipeError(std::move(issues));
    composer_ = std::make_unique<Composer>(std::move(controllers), model_.family, model_.tokenizer->mask_id(),
                                           model_.tokenizer->vocab_size());
    if (const std::string over = over_memory_limit(std::min(recipe_.batch_size, recipe_.samples)); !over.empty())
        throw RecipeError({{recipe_.guidance.particles > 1 ? "/guidance/particles" : "/batch_size", over}});
}

uint64_t Generator::estimate_peak_bytes(int64_t batch) const {
    // The step's own [B, L, V] float tensors beyond the denoiser's, in units of one, as measured against peak RSS
    // (docs/results.md). The lean step draws over the rows only, so a step without controllers holds little beyond
    // the network's output: discrete, its SUBS form (log-softmax, clamp, carry-over); continuous, nothing for
    // clamping and the softmax and its product for interpolation. Freed tensors are partly reused.
    const bool discrete = model_.family == Family::discrete;
    double units = discrete ? 3.5 : (recipe_.sampler.x0 == "clamp" ? 0 : 2);
    // Uniform noise: the step's deltas and clean estimate (2 float32) and its transition, about four float64 passes.
    if (discrete && model_.denoiser->uniform_noise()) units += 10;
    if (discrete && recipe_.sampler.prompt_guidance > 0) units += 2;  // the unconditional output and the combination
    bool whole_x0 = false;
    for (size_t k = 0; k < composer_->size(); ++k) {
        const auto& c = composer_->instance(k);
        const bool rows = c.has(RUDDER_CAP_ROWS);
        whole_x0 = whole_x0 || (!rows && !c.has(RUDDER_CAP_IGNORES_X0));
        if (c.has(RUDDER_CAP_LOGIT_DELTA)) units += 2;              // its buffer and the weighted copy
        if (c.has(RUDDER_CAP_GRADIENT)) units += discrete ? 3 : 1;  // its buffer (discrete: and the Taylor terms)
        if (c.has(RUDDER_CAP_HARD_CONSTRAINT) && !rows) units += 0.25;  // the forbidden bytes
        // A delta on a model that takes conditions may come from the re-entrant denoise (cfg): its [n, B, L, V].
        if (c.has(RUDDER_CAP_LOGIT_DELTA) && model_.denoiser->conditional()) units += 5;
    }
    if (whole_x0) units += 1;  // the log-softmax of the network's output that they read
    const double unit = static_cast<double>(batch) * static_cast<double>(recipe_.max_length) *
                        static_cast<double>(model_.tokenizer->vocab_size()) * 4;
    // The units were fitted under glibc's malloc; tcmalloc (the rudder command's) reuses freed tensors more tightly
    // and a batch's working memory peaks at about 0.6 of that (make bench-memory, docs/results.md).
    const double allocator_share = allocator_is_tcmalloc() ? 0.6 : 1.0;
    const double working = static_cast<double>(model_.denoiser->working_bytes(batch, recipe_.max_length)) + units * unit;
    return resident_bytes() + static_cast<uint64_t>(allocator_share * working);
}

std::string Generator::over_memory_limit(int64_t batch) const {
    const uint64_t physical = physical_memory_bytes();
    const uint64_t limit = recipe_.max_memory_limit > 0 ? recipe_.max_memory_limit : physical;
    const int64_t particles = recipe_.guidance.particles;  // each sample is that many sequences
    const uint64_t estimate = estimate_peak_bytes(batch * particles);
    if (limit == 0 || estimate <= limit) return "";
    return "a batch of " + std::to_string(batch) +
           (particles > 1 ? " samples of " + std::to_string(particles) + " particles" : std::string()) + " needs about " +
           memory_text(estimate) + " at its peak (model '" + model_.name + "', " + std::to_string(recipe_.max_length) +
           " positions of " + std::to_string(model_.tokenizer->vocab_size()) + " tokens), over the limit of " +
           memory_text(limit) + (recipe_.max_memory_limit > 0 ? "" : " (the machine's memory)") + "; lower batch_size" +
           (particles > 1 ? ", particles" : "") + " or max_length";
}

plugins::RunShape Generator::run_shape(int64_t batch) const {
    const auto& tok = *model_.tokenizer;
    plugins::RunShape shape;
    shape.family = model_.family == Family::continuous ? RUDDER_FAMILY_CONTINUOUS : RUDDER_FAMILY_DISCRETE;
    shape.batch_size = batch;
    shape.seq_len = recipe_.max_length;
    shape.vocab_size = tok.vocab_size();
    shape.embed_dim = model_.denoiser->embed_dim();
    shape.pad_id = tok.pad_id();
    shape.mask_id = model_.family == Family::discrete ? tok.mask_id() : -1;
    shape.unk_id = tok.unk_id();
    shape.total_steps = static_cast<int32_t>(recipe_.sampler.steps);
    shape.device = device_;
    shape.candidates = static_cast<int32_t>(std::min(recipe_.candidates, tok.vocab_size()));
    return shape;
}

Generator::~Generator() = default;

bool Generator::batching_pays() const {
    return model_.family == Family::continuous || discrete_kind(recipe_.sampler.name) != DiscreteSampler::Kind::analytic;
}

std::string Generator::decode(const int64_t* row, int64_t* n_tokens) const {
    const std::vector<int64_t> ids(row, row + recipe_.max_length);
    *n_tokens = content_length(ids, model_.tokenizer->pad_id());
    return model_.tokenizer->decode(ids.data(), *n_tokens);
}

std::vector<SampleResult> Generator::generate(const ProgressCallback& progress, const SampleCallback& on_sample,
                                              const RunOverrides& overrides) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(overrides.seed.value_or(recipe_.seed));
    const int64_t total = overrides.samples.value_or(recipe_.samples);
    if (total < 1) throw std::invalid_argument("samples must be at least 1, got " + std::to_string(total));
    const int64_t per_batch = std::min(recipe_.batch_size, total);
    const int64_t batches = (total + per_batch - 1) / per_batch;
    if (per_batch > std::min(recipe_.batch_size, recipe_.samples))  // more samples than the recipe's: re-checked
        if (const std::string over = over_memory_limit(per_batch); !over.empty()) throw std::invalid_argument(over);
    std::vector<SampleResult> results;
    results.reserve(static_cast<size_t>(total));
    stats_ = {};
    composer_->start_run();
    // The compute threads follow the load: decided now, and again every few steps (compute_threads.hpp).
    ComputeShare share;
    stats_.threads = share.threads();

    for (int64_t b = 0; b < batches; ++b) {
        const int64_t batch = std::min(per_batch, total - b * per_batch);
        const plugins::RunShape shape = run_shape(batch * recipe_.guidance.particles);
        composer_->begin(shape, services_.get());

        if (b > 0) stats_.threads = std::max(stats_.threads, share.refresh());
        auto tick = [&](int64_t step, double t, const std::function<at::Tensor()>& best_tokens) {
            if (step % kThreadRefreshSteps == 0) stats_.threads = std::max(stats_.threads, share.refresh());
            if (!progress) return;
            Progress p{b, batches, step, recipe_.sampler.steps, t, b * per_batch, total, {}};
            p.current_texts = [&] {
                const at::Tensor rows = best_tokens().to(at::kCPU).contiguous();
                std::vector<std::string> texts;
                int64_t n = 0;
                for (int64_t i = 0; i < rows.size(0); ++i) texts.push_back(decode(rows[i].data_ptr<int64_t>(), &n));
                return texts;
            };
            if (!progress(p)) throw Cancelled();
        };
        const at::Tensor tokens = (model_.family == Family::continuous ? run_continuous(batch, gen, tick)
                                                                       : run_discrete(batch, gen, tick))
                                      .to(at::kCPU).contiguous();

        for (int64_t i = 0; i < batch; ++i) {
            SampleResult r;
            r.index = b * per_batch + i;
            const int64_t* row = tokens[i].data_ptr<int64_t>();
            r.tokens.assign(row, row + recipe_.max_length);
            r.text = decode(row, &r.n_tokens);
            for (size_t k = 0; k < composer_->size(); ++k) {
                auto& inst = composer_->instance(k);
                if (!composer_->failure(k).empty()) {  // dropped from the run: it cannot tell
                    plugins::Verdict dropped;
                    dropped.detail = nlohmann::json{{"dropped", composer_->failure(k)}}.dump();
                    r.controls.push_back({inst.label(), dropped});
                    continue;
                }
                r.controls.push_back({inst.label(), inst.evaluate(r.index, r.tokens, r.n_tokens, r.text)});
            }
            if (on_sample) on_sample(r);
            results.push_back(std::move(r));
        }
    }
    return results;
}

GenerationFault Generator::fault_at(int64_t i, int64_t sample, int64_t position, const at::Tensor& scores) const {
    const std::string where = "step " + std::to_string(i + 1) + ", sample " + std::to_string(sample) +
                              " of the batch, position " + std::to_string(position);
    if (scores.isnan().any().item<bool>() || !scores.isfinite().any().item<bool>())
        return GenerationFault(where + ": model '" + model_.name + "' gives no distribution there (" +
                               (scores.isnan().any().item<bool>() ? "NaN" : "no finite log-probability") +
                               "): are its weights finite?");
    return GenerationFault(where + ": the model's distribution is sound there but the controlled one is not (NaN, "
                                   "or no token allowed): the controllers' contributions or the guidance made it so");
}

// The clean-token estimate from the controlled scores [B, L, V] (unnormalised; temperature not applied).
at::Tensor Generator::estimate_x0(const at::Tensor& controlled, const at::Tensor& logits, const at::Tensor& model_x0,
                                  double t) const {
    const at::Tensor E = model_.denoiser->embedding();
    const std::string& mode = recipe_.sampler.x0;
    // Diffusion-LM's clamping trick: snap to the embedding of the most likely token (the temperature cannot move it).
    if (mode == "clamp" || t <= recipe_.sampler.clamp_below_t) return at::embedding(E, most_likely(controlled));
    const double T = recipe_.sampler.temperature;
    auto probabilities = [T](const at::Tensor& scores) { return at::softmax(T == 1.0 ? scores : scores / T, -1); };
    const at::Tensor interpolated = at::matmul(probabilities(controlled), E);  // CDCD's score interpolation
    if (mode == "model" && model_x0.defined()) {
        // Keep the network's own estimate and move it by what the controllers changed in the distribution.
        return model_x0 + interpolated - at::matmul(probabilities(logits), E);
    }
    return interpolated;
}

at::Tensor Generator::run_continuous(int64_t samples, at::Generator& gen, const StepTick& tick) {
    // Each sample is `particles` sequences, particle j of sample s at row s * particles + j.
    const int64_t particles = recipe_.guidance.particles, batch = samples * particles;
    const int64_t L = recipe_.max_length, V = model_.tokenizer->vocab_size();
    const at::Tensor E = model_.denoiser->embedding();
    const ContinuousSampler sampler(model_.schedule, continuous_kind(recipe_.sampler.name), recipe_.sampler.steps,
                                    recipe_.sampler.eta, recipe_.sampler.noise_scale);
    const GuidanceSpec& guide = recipe_.guidance;
    const int64_t steps = sampler.steps(), mask_id = model_.tokenizer->mask_id();
    at::Tensor x = sampler.init({batch, L, E.size(1)}, gen, E);
    const at::Tensor every_row = at::arange(batch * L, at::TensorOptions().dtype(at::kLong).device(device_));
    const bool uses_evidence = model_.denoiser->uses_evidence();
    // The previous step's clean estimate, for a self-conditioned network (CDCD); none before the first step.
    at::Tensor previous_x0;
    const auto evidence = [&](const Combined& c) {
        Evidence e = evidence_of(c, batch, L, V, uses_evidence);
        e.self_condition = previous_x0;
        return e;
    };
    Combined last;
    // Particles: each one's reward (the controllers' weighted log p(c | x) at its last guidance) and its reward when
    // last resampled.
    Particles swarm(samples, particles, recipe_.guidance.resample_scale);

    for (int64_t i = 0; i < steps; ++i) {
        const double t = sampler.t(i), t_next = sampler.t_next(i);
        services_->set_self_condition(previous_x0);
        DenoiserOutput out = model_.denoiser->denoise(x, t, {}, evidence(last));
        ++stats_.denoiser_calls;
        stats_.denoised_sequences += batch;
        at::Tensor logits = out.logits.to(at::kFloat).reshape({batch * L, V}), logp;

        // The controllers see the log-probabilities and their most likely tokens only when one of them reads them.
        const Composer::Reads reads = composer_->reads(t);
        plugins::StepInputs in = predict_inputs(i, steps, t, t_next, x, {}, {}, {});
        in.rows = every_row;
        const bool steered = reads.any || composer_->wants_guidance(t_next);
        in.tokens = steered ? most_likely(logits).view({batch, L}) : at::zeros({batch, L}, every_row.options());
        fill_reads(in, reads, logits, logits, logp, batch, L, recipe_.candidates);
        Combined combined = reads.any ? composer_->predict(in) : Combined{};
        combined.rows = every_row;
        if (uses_evidence && !same_constraints(combined, last)) {
            out = model_.denoiser->denoise(x, t, {}, evidence(combined));
            ++stats_.denoiser_calls;
            stats_.denoised_sequences += batch;
            logits = out.logits.to(at::kFloat).reshape({batch * L, V});
        }

        const at::Tensor controlled = Composer::controlled(logits, combined, {}, mask_id).view({batch, L, V});
        at::Tensor x0_hat = estimate_x0(controlled, logits.view({batch, L, V}), out.x0, t);
        at::Tensor fixed_mask;
        if (combined.fixed.defined()) {
            fixed_mask = combined.fixed.ge(0).unsqueeze(-1);
            x0_hat = at::where(fixed_mask, at::embedding(E, combined.fixed.clamp_min(0)), x0_hat);
        }
        previous_x0 = x0_hat;
        ContinuousSampler::Result res = sampler.step(x, x0_hat, i, gen);
        x = res.sample;

        if (t_next > 0 && guide.gradient_steps > 0 && t_next > guide.until_t && composer_->wants_guidance(t_next)) {
            // Diffusion-LM's guidance: K Adagrad steps on x_{t-1} maximising sum_i w_i log p_i(c | x) minus the
            // fluency term lambda |x - mu|^2 / sigma^2. DDIM with eta = 0 has sigma = 0; the marginal standard
            // deviation at t_next stands in for it there.
            const double ab = model_.schedule.alpha_bar_at(t_next);
            const double sigma = res.sigma > 0 ? res.sigma : std::sqrt(std::max(1.0 - ab, 1e-8));
            at::Tensor accum = at::zeros_like(x);
            for (int64_t k = 0; k < guide.gradient_steps; ++k) {
                Composer::Guided guided = composer_->guide(guide_inputs(in, x, k));
                if (!guided.grad.defined()) break;
                if (particles > 1) swarm.score(guided.reward, i);
                at::Tensor grad = guided.grad - (2.0 * guide.fluency_weight / (sigma * sigma)) * (x - res.mean);
                accum.add_(grad * grad);
                x = x + guide.step_size * grad / (accum.sqrt() + 1e-10);
            }
        }
        if (fixed_mask.defined() && i + 1 < steps) {
            // Infilling as Diffusion-LM does it: fixed positions carry the fixed token's embedding, noised to the
            // level of the next step.
            const at::Tensor noised = sampler.q_sample(at::embedding(E, combined.fixed.clamp_min(0)), sampler.timestep(i + 1), gen);
            x = at::where(fixed_mask, noised, x);
        }
        // A NaN state would round to arbitrary tokens (empty texts) and go unnoticed: checked on [B, L, D] only.
        if (!x.isfinite().all().item<bool>()) {
            const at::Tensor bad = x.isfinite().all(-1).logical_not().nonzero()[0];
            const int64_t b = bad[0].item<int64_t>(), position = bad[1].item<int64_t>();
            throw fault_at(i, b, position, logits[b * L + position]);
        }
        last = std::move(combined);
        if (guide.resample_every > 0 && (i + 1) % guide.resample_every == 0 && i + 1 < steps && swarm.scored()) {
            const at::Tensor rows = swarm.resample(gen).to(device_);
            x = x.index_select(0, rows);
            if (previous_x0.defined()) previous_x0 = previous_x0.index_select(0, rows);
            last = select_sequences(last, rows, batch, L);
            ++stats_.resamplings;
        }
        // The current best guess: the most likely token of the controlled clean-token distribution (each sample's
        // leading particle).
        tick(i + 1, t_next, [&] { return swarm.leading(most_likely(controlled)); });
    }
    // Round to the nearest embedding (Diffusion-LM's decoding), within the last step's hard constraints: the nearest
    // embedding has the largest 2 x.e - |e|^2 (|x|^2 is the same for every token).
    const at::Tensor closeness = at::addmm(E.pow(2).sum(-1).neg(), x.reshape({batch * L, -1}), E.t(), 1.0, 2.0);
    stats_.steps += steps;
    return swarm.chosen(most_likely(Composer::controlled(closeness, last, {}, mask_id)).view({batch, L}));
}

at::Tensor Generator::run_discrete(int64_t samples, at::Generator& gen, const StepTick& tick) {
    if (model_.denoiser->uniform_noise()) return run_uniform(samples, gen, tick);
    // Each sample is `particles` sequences, particle j of sample s at row s * particles + j; the one whose reward (the
    // steering controllers' weighted log p(c | x) at the last step they scored) is highest is the sample.
    const int64_t particles = recipe_.guidance.particles, batch = samples * particles;
    Particles swarm(samples, particles, recipe_.guidance.resample_scale);
    const int64_t L = recipe_.max_length, V = model_.tokenizer->vocab_size(), mask_id = model_.tokenizer->mask_id();
    const DiscreteSampler sampler(model_.mask_schedule, discrete_kind(recipe_.sampler.name), recipe_.sampler.steps,
                                  recipe_.sampler.block_length, confidence_order(recipe_.sampler.order),
                                  remasking_of(recipe_.sampler.remask));
    const bool always_fresh = !recipe_.sampler.cache || composer_->needs_fresh_logits();
    // A denoiser that conditions on the constraints takes them whole: the controllers then see every position.
    const bool every_row = model_.denoiser->uses_evidence();
    const auto evidence = [&](const Combined& c) { return evidence_of(c, batch, L, V, every_row); };
    const double T = recipe_.sampler.temperature;
    at::Tensor tokens = sampler.init(batch, L, mask_id, device_);
    at::Tensor logits, logp;  // the network's scores for `tokens` [B * L, V], and their log-softmax once needed
    Combined seen;            // the constraints the denoiser's last call was given
    bool stale = true;
    // Prompt guidance (LLaDA's unsupervised classifier-free guidance): the positions hard constraints have fixed are
    // the prompt; the unconditional pass sees them masked again, without the constraints as evidence.
    const double prompt_w = recipe_.sampler.prompt_guidance;
    at::Tensor prompt = prompt_w > 0 ? at::zeros({batch, L}, tokens.options().dtype(at::kBool)) : at::Tensor();
    auto denoise = [&](double t, const Combined& constraints) {
        logits = model_.denoiser->denoise(tokens, t, {}, evidence(constraints)).logits.to(at::kFloat);
        ++stats_.denoiser_calls;
        stats_.denoised_sequences += batch;
        if (prompt.defined() && prompt.any().item<bool>()) {
            const at::Tensor unconditional =
                model_.denoiser->denoise(tokens.masked_fill(prompt, mask_id), t, {}, {}).logits.to(at::kFloat);
            logits = unconditional + (prompt_w + 1.0) * (logits - unconditional);
            ++stats_.denoiser_calls;
            stats_.denoised_sequences += batch;
        }
        logits = logits.reshape({batch * L, V});
        logp = at::Tensor();
        stale = false;
        seen = constraints;
    };
    // The current best guess: committed tokens, and the network's most likely token where still masked.
    const auto best_guess = [&] {
        if (!logits.defined()) return tokens;
        at::Tensor scores = logits.clone();
        scores.select(1, mask_id).fill_(-std::numeric_limits<float>::infinity());
        return at::where(tokens.eq(mask_id), most_likely(scores).view({batch, L}), tokens);
    };

    // Remasking never touches a position a controller fixed: a hard constraint stays met.
    at::Tensor pinned = sampler.remasks() ? at::zeros({batch, L}, tokens.options().dtype(at::kBool)) : at::Tensor();
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const double t = sampler.t(i), t_next = sampler.t_next(i);
        const at::Tensor masked = tokens.eq(mask_id);
        // Which positions unmask is drawn first: a step where none does changes nothing, and costs nothing more.
        at::Tensor unmask = sampler.choose(masked, i, gen);
        // Which committed tokens are masked again (remasking): chosen from the step's state, as unmasking is, and
        // applied after the draw, so this step's draws still see them.
        at::Tensor remask = sampler.remasks() ? sampler.remask(masked.logical_not().logical_and_(pinned.logical_not()), i, gen)
                                              : at::Tensor();
        const bool remasks = remask.defined() && remask.any().item<bool>();
        const auto apply_remask = [&] {
            if (!remasks) return;
            tokens = tokens.masked_fill(remask, mask_id);
            stats_.remasked += remask.sum().item<int64_t>();
            stale = true;
        };
        if (!unmask.any().item<bool>()) {
            apply_remask();
            tick(i + 1, t_next, [&] { return swarm.leading(best_guess()); });
            continue;
        }
        // MDLM's cache: the network's output depends only on the tokens, so reuse it while none changed.
        if (stale || always_fresh) denoise(t, seen);

        plugins::StepInputs in = predict_inputs(i, sampler.steps(), t, t_next, {}, {}, tokens, masked.to(at::kByte));
        in.rows = every_row ? at::arange(batch * L, tokens.options()) : unmask.view({-1}).nonzero().squeeze(1);
        // The network's scores at the step's rows: the controllers' candidates and the draw read them.
        at::Tensor row_logits = every_row ? logits : logits.index_select(0, in.rows);
        const Composer::Reads reads = composer_->reads(t);
        fill_reads(in, reads, logits, row_logits, logp, batch, L, recipe_.candidates);
        const Combined combined = reads.any ? composer_->predict(in) : rows_only(in.rows);
        if (particles > 1 && combined.reward.any()) swarm.score(combined.reward, i);

        // Fixed tokens are committed at once, and the denoiser sees them (and, if it can use them, the other
        // constraints) before this step samples. A position fixed now is not drawn.
        bool changed = false;
        if (combined.fixed.defined()) {
            const at::Tensor is_fixed = combined.fixed.ge(0);
            if (is_fixed.logical_and(tokens.ne(combined.fixed)).any().item<bool>()) {
                tokens = at::where(is_fixed, combined.fixed, tokens);
                changed = true;
            }
            unmask.logical_and_(is_fixed.logical_not());
            if (prompt.defined()) prompt.logical_or_(is_fixed);
            if (pinned.defined()) {
                pinned.logical_or_(is_fixed);
                remask.logical_and_(is_fixed.logical_not());
            }
        }
        if (changed || (model_.denoiser->uses_evidence() && !same_constraints(combined, seen))) {
            denoise(t, combined);
            row_logits = every_row ? logits : logits.index_select(0, in.rows);
        }

        // Draw at the positions that unmask: the controlled scores of those rows only, at the temperature.
        const at::Tensor drawn_at_row = unmask.view({-1}).index_select(0, combined.rows).nonzero().squeeze(1);
        if (drawn_at_row.size(0) > 0) {
            const at::Tensor positions = combined.rows.index_select(0, drawn_at_row);
            // Every row drawn (none fixed this step): the combination's rows as they are, no copy of them.
            const bool every_row_drawn = drawn_at_row.size(0) == combined.rows.size(0);
            const at::Tensor pick = every_row_drawn ? at::Tensor() : drawn_at_row;
            at::Tensor scores = Composer::controlled(pick.defined() ? row_logits.index_select(0, pick) : row_logits,
                                                     combined, pick, mask_id);
            if (T != 1.0) scores.div_(T);
            if (recipe_.sampler.top_k > 0 || recipe_.sampler.top_p < 1.0)
                DiscreteSampler::truncate(scores, recipe_.sampler.top_k, recipe_.sampler.top_p);
            at::Tensor drawn;
            try {
                drawn = DiscreteSampler::draw(scores, gen);
            } catch (const NothingToSample& e) {
                const int64_t position = positions[e.row].item<int64_t>();
                throw fault_at(i, position / L, position % L, logits[position]);
            }
            at::Tensor committed = positions;
            if (sampler.kind() == DiscreteSampler::Kind::confidence) {
                // Of the tokens drawn, the ones the model is most confident in are kept; the rest stay masked.
                const at::Tensor kept = sampler.kept_rows(positions, scores, drawn, batch, L, i);
                committed = positions.index_select(0, kept);
                drawn = drawn.index_select(0, kept);
            }
            stats_.rows_drawn += positions.size(0);
            tokens = tokens.clone();
            tokens.view({-1}).index_copy_(0, committed, drawn);
            stale = true;
        }
        apply_remask();
        tick(i + 1, t_next, [&] { return swarm.leading(best_guess()); });
    }
    stats_.steps += sampler.steps();
    return swarm.chosen(tokens);
}

// Uniform noise: every position holds a token and is drawn anew at every step, so the network runs at every step and
// the controllers see every position (`masked` all zero, x0 the clean-token estimate). Their deltas reweight the
// step's transition probabilities, p(x_s = y | x_t) exp(delta_y), as classifier guidance does for uniform-noise
// models (Schiff et al. 2025, "Simple guidance mechanisms for discrete diffusion models"; on the last step that is
// the clean estimate itself): a forbidden token is never drawn, at any step, and a fixed token holds from the step
// that fixes it on. Temperature, top-k and top-p shape the clean estimate the step is built from.
at::Tensor Generator::run_uniform(int64_t batch, at::Generator& gen, const StepTick& tick) {
    const int64_t L = recipe_.max_length, V = model_.tokenizer->vocab_size(), mask_id = model_.tokenizer->mask_id();
    const UniformSampler sampler(*model_.denoiser->uniform_noise(),
                                 recipe_.sampler.name == "euler" ? UniformSampler::Kind::euler : UniformSampler::Kind::analytic,
                                 recipe_.sampler.steps);
    const bool every_row = model_.denoiser->uses_evidence();
    const double T = recipe_.sampler.temperature;  // shapes the model's prediction (UniformSampler::step_log_probs)
    const at::Tensor all_rows = at::arange(batch * L, at::TensorOptions().dtype(at::kLong).device(device_));
    at::Tensor tokens = sampler.init(batch, L, V, gen, device_);
    at::Tensor logits, logp;
    Combined seen;
    auto denoise = [&](double t, const Combined& constraints) {
        logits = model_.denoiser->denoise(tokens, t, {}, evidence_of(constraints, batch, L, V, every_row))
                     .logits.to(at::kFloat).reshape({batch * L, V});
        logp = at::Tensor();
        ++stats_.denoiser_calls;
        stats_.denoised_sequences += batch;
        seen = constraints;
    };
    const auto best_guess = [&] { return logits.defined() ? most_likely(logits).view({batch, L}) : tokens; };
    const at::Tensor nothing_masked = at::zeros({batch, L}, tokens.options().dtype(at::kByte));

    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const double t = sampler.t(i), t_next = sampler.t_next(i);
        denoise(t, seen);
        plugins::StepInputs in = predict_inputs(i, sampler.steps(), t, t_next, {}, {}, tokens, nothing_masked);
        in.rows = all_rows;
        const Composer::Reads reads = composer_->reads(t);
        fill_reads(in, reads, logits, logits, logp, batch, L, recipe_.candidates);
        const Combined combined = reads.any ? composer_->predict(in) : rows_only(in.rows);
        if (combined.fixed.defined()) {
            const at::Tensor is_fixed = combined.fixed.ge(0);
            if (is_fixed.logical_and(tokens.ne(combined.fixed)).any().item<bool>()) {
                tokens = at::where(is_fixed, combined.fixed, tokens);
                denoise(t, combined);
            }
        }
        if (every_row && !same_constraints(combined, seen)) denoise(t, combined);

        // The controls as deltas on the network's (finite) scores: -inf where a token is forbidden or not the fixed one.
        const at::Tensor delta = Composer::controlled(logits, combined, {}, mask_id) - logits;
        at::Tensor scores = sampler.step_log_probs(logits, tokens.view({-1}), i, T, recipe_.sampler.top_k,
                                                   recipe_.sampler.top_p) + delta;
        // A fixed position keeps its token whatever the step would give it (Euler's large steps can give staying
        // probability 0): its row is the constraint alone.
        if (combined.fixed.defined())
            scores = at::where(combined.fixed.ge(0).view({-1, 1}), delta.to(scores.scalar_type()), scores);
        at::Tensor drawn;
        try {
            drawn = DiscreteSampler::draw(scores, gen);
        } catch (const NothingToSample& e) {
            throw fault_at(i, e.row / L, e.row % L, logits[e.row]);
        }
        stats_.rows_drawn += batch * L;
        tokens = drawn.view({batch, L});
        tick(i + 1, t_next, best_guess);
    }
    stats_.steps += sampler.steps();
    return tokens;
}

}  // namespace rudder
