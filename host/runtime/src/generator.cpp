#include <rudder/runtime/generator.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <tuple>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <rudder/base/memory.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/text/bpe_tokenizer.hpp>  // replace_invalid_utf8

#include "composer.hpp"
#include "diffusion_process.hpp"
#include "run_services.hpp"

namespace rudder {
namespace fs = std::filesystem;

namespace {

// Positions per sequence when neither the recipe nor the model says: E2E's texts are at most 75 words.
constexpr int64_t kDefaultMaxLength = 64;
// Reverse steps between two decisions of the compute threads: a decision reads /proc for well under a
// millisecond, a step of the bundled models takes 5 to 50.
constexpr int64_t kThreadRefreshSteps = 20;

c10::Device parse_device(const std::string& name) {
    const c10::Device device(name);
    if (device.is_cuda() && !at::hasCUDA())
        throw std::invalid_argument("device '" + name +
                                    "' asked for, but this LibTorch was built without CUDA support "
                                    "(or no CUDA device is visible); use \"cpu\"");
    return device;
}

// Index of the first pad, i.e. the number of content tokens.
int64_t content_length(const std::vector<int64_t>& ids, int64_t pad) {
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == pad) return static_cast<int64_t>(i);
    return static_cast<int64_t>(ids.size());
}

// Where controllers run unless their own "isolation" or the recipe's says: $RUDDER_ISOLATION, else in-process.
std::string host_isolation(std::vector<RecipeIssue>& issues) {
    const char* env = std::getenv("RUDDER_ISOLATION");
    if (env == nullptr || *env == '\0') return "in_process";
    if (std::string(env) == "process" || std::string(env) == "in_process") return env;
    issues.push_back({"/isolation", std::string("RUDDER_ISOLATION=") + env +
                                        " is not a place to run controllers: expected \"in_process\" or \"process\""});
    return "in_process";
}

}  // namespace

// The problems a recipe has, collected so that each value is reported once.
struct Generator::Issues {
    std::vector<RecipeIssue> list;
    // Whether a problem was found at `pointer`, or at a value holding it.
    bool reported(const std::string& pointer) const {
        for (const auto& i : list)
            if (!i.pointer.empty() && (pointer == i.pointer || pointer.rfind(i.pointer + "/", 0) == 0)) return true;
        return false;
    }
    void add(std::string pointer, std::string message) { list.push_back({std::move(pointer), std::move(message)}); }
    void throw_any() {
        if (!list.empty()) throw RecipeError(std::move(list));
    }
};

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
            throw ModelError("model '" + model.name + "' has no " +
                             (model.tokenizer == nullptr ? "tokenizer" : "denoiser"));
        if (model.denoiser->family() != model.family)
            throw ModelError("model '" + model.name + "' is " + family_name(model.family) + " but its denoiser is " +
                             family_name(model.denoiser->family()));
        if (model.denoiser->vocab_size() != model.tokenizer->vocab_size())
            throw ModelError("model '" + model.name + "': the denoiser has " +
                             std::to_string(model.denoiser->vocab_size()) + " tokens of vocabulary, the tokenizer " +
                             std::to_string(model.tokenizer->vocab_size()));
        if (recipe_.family && *recipe_.family != family_name(model.family))
            throw ModelError("model '" + model.name + "' is not a " + *recipe_.family + " model");
        return std::move(model);
    });
}

void Generator::set_up(plugins::Registry& registry, const std::vector<fs::path>& model_path,
                       std::vector<RecipeIssue> earlier_issues, const std::function<Model()>& load) {
    Issues issues{std::move(earlier_issues)};
    try {
        device_ = parse_device(recipe_.device);
    } catch (const std::exception& e) {
        issues.add("/device", e.what());
    }
    if (!issues.reported("/model") && !issues.reported("/family")) {
        try {
            model_ = load();
            if (recipe_.weights == "int8" && !model_.denoiser->quantize_int8())
                issues.add("/weights", "int8 weights apply to LLaDA and Dream checkpoints; model '" + model_.name +
                                           "' has no int8 path");
            model_.denoiser->to(device_);
            resolve_length(issues);
            process_ = make_process(model_, recipe_, issues.list,
                                    [&issues](const std::string& pointer) { return issues.reported(pointer); });
        } catch (const std::exception& e) {
            issues.add("/model", e.what());
        }
    }
    std::vector<ComposedController> controllers = create_controllers(registry, issues);
    if (recipe_.guidance.particles > 1 && !issues.reported("/guidance/particles") &&
        std::none_of(controllers.begin(), controllers.end(),
                     [](const ComposedController& c) { return c.instance->has(RUDDER_CAP_GRADIENT); }))
        issues.add("/guidance/particles",
                   "particles are chosen by the controllers' log p(c | x), which only "
                   "controllers with the GRADIENT capability report; the recipe has none");
    issues.throw_any();
    services_ = std::make_unique<ModelServices>(model_, recipe_.base_dir, model_path, stats_, recipe_.model_paths);
    composer_ = std::make_unique<Composer>(std::move(controllers), model_.family, model_.tokenizer->mask_id(),
                                           model_.tokenizer->vocab_size());
    // Messages name tokens by their text: what a recipe's author wrote, not the tokenizer's ids.
    composer_->set_token_names([tokenizer = model_.tokenizer](int64_t id) {
        if (id == tokenizer->pad_id()) return std::string("the end of the text");
        if (id < 0 || id >= tokenizer->vocab_size()) return "id " + std::to_string(id);
        return nlohmann::json(replace_invalid_utf8(tokenizer->decode(&id, 1))).dump();
    });
    begin_controllers(issues);
    issues.throw_any();
    check_hard_constraints(issues);
    issues.throw_any();
    if (const std::string over = over_memory_limit(std::min(recipe_.batch_size, recipe_.samples)); !over.empty())
        throw RecipeError({{recipe_.guidance.particles > 1 ? "/guidance/particles" : "/batch_size", over}});
    recipe_.sampler.name = process_->sampler();
    recipe_.sampler.steps = process_->steps();
    recipe_.sampler.settings = process_->settings();
}

void Generator::resolve_length(Issues& issues) {
    const int64_t longest = model_.denoiser->traits().max_length;
    if (recipe_.max_length == 0) {
        recipe_.max_length = longest > 0 ? longest : kDefaultMaxLength;
        if (recipe_.max_length_limit > 0 && recipe_.max_length > recipe_.max_length_limit)
            issues.add("/max_length", "model '" + model_.name + "' handles " + std::to_string(recipe_.max_length) +
                                          " positions, over the limit of " + std::to_string(recipe_.max_length_limit) +
                                          "; give max_length");
    } else if (longest > 0 && recipe_.max_length > longest && !issues.reported("/max_length")) {
        issues.add("/max_length", "model '" + model_.name + "' handles at most " + std::to_string(longest) +
                                      " positions; asked for " + std::to_string(recipe_.max_length));
    }
}

std::vector<ComposedController> Generator::create_controllers(plugins::Registry& registry, Issues& issues) {
    // Where each controller runs: its own "isolation", else the recipe's, else the host's ($RUDDER_ISOLATION).
    const std::string host = host_isolation(issues.list);
    std::vector<ComposedController> controllers;
    for (const auto& spec : recipe_.controllers) {
        if (issues.reported(spec.pointer + "/plugin") || issues.reported(spec.pointer + "/params")) continue;
        const std::string& where = !spec.isolation.empty() ? spec.isolation
                                   : recipe_.isolation     ? *recipe_.isolation
                                                           : host;
        const plugins::Isolation isolation =
            where == "process" ? plugins::Isolation::process : plugins::Isolation::in_process;
        try {
            plugins::ControllerType type = registry.resolve(spec.plugin, recipe_.base_dir, spec.sha256);
            try {
                ComposedController c;
                // A controller in a process of its own holds at most the run's memory limit there.
                const uint64_t memory_limit =
                    recipe_.max_memory_limit > 0 ? recipe_.max_memory_limit : physical_memory_bytes();
                c.instance = std::make_unique<plugins::ControllerInstance>(type, spec.params.dump(), spec.name,
                                                                           isolation, memory_limit);
                c.instance->set_time_limit(spec.time_limit);
                c.instance->set_cancel_flag(&cancel_requested_);
                c.continue_on_failure = spec.on_failure == "continue";
                c.weight = spec.weight;
                c.active = spec.active;
                controllers.push_back(std::move(c));
                controller_pointers_.push_back(spec.pointer);
            } catch (const std::exception& e) {
                issues.add(spec.pointer + "/params", e.what());
            }
        } catch (const std::exception& e) {
            issues.add(spec.pointer + "/plugin", e.what());
        }
    }
    return controllers;
}

void Generator::begin_controllers(Issues& issues) {
    // Each controller sees the run's shape now, as the first batch will give it: params that cannot work with this
    // model or length (a span longer than max_length, say) are the recipe's problem, found by `validate` rather than
    // by the run. The first batch of the first run then needs no begin of its own.
    const plugins::RunShape first =
        run_shape(std::min(recipe_.batch_size, recipe_.samples) * recipe_.guidance.particles);
    for (size_t k = 0; k < composer_->size(); ++k) {
        try {
            composer_->instance(k).begin(first, services_.get());
        } catch (const std::exception& e) {
            issues.add(controller_pointers_[k] + "/params",
                       std::string("does not fit this run (") + family_name(model_.family) + " model '" + model_.name +
                           "', max_length " + std::to_string(recipe_.max_length) + "): " + e.what());
        }
    }
    begun_batch_ = first.batch_size;
}

void Generator::check_hard_constraints(Issues& issues) {
    bool any = false, reads_x0 = false;
    for (size_t k = 0; k < composer_->size(); ++k) {
        const auto& c = composer_->instance(k);
        if (!c.has(RUDDER_CAP_HARD_CONSTRAINT)) continue;
        any = true;
        reads_x0 = reads_x0 || !c.has(RUDDER_CAP_IGNORES_X0);
    }
    if (!any) return;
    // The batch the controllers began with (begin_controllers): they are not begun again for this.
    const plugins::RunShape shape = run_shape(begun_batch_);
    const int64_t B = shape.batch_size, L = recipe_.max_length, V = model_.tokenizer->vocab_size();
    const auto on = at::TensorOptions().device(device_);
    plugins::StepInputs in;
    in.total_steps = static_cast<int32_t>(process_->steps());
    in.t = 1.0;
    in.t_next = in.total_steps > 0 ? 1.0 - 1.0 / in.total_steps : 0.0;
    const bool discrete = model_.family == Family::discrete;
    in.tokens = at::full({B, L}, discrete ? model_.tokenizer->mask_id() : 0, on.dtype(at::kLong));
    if (discrete) in.masked = at::ones({B, L}, on.dtype(at::kByte));
    if (!discrete && shape.embed_dim > 0) in.latent = at::zeros({B, L, shape.embed_dim}, on.dtype(at::kFloat));
    in.rows = at::arange(B * L, on.dtype(at::kLong));
    if (reads_x0) {
        in.x0_logits = at::zeros({B, L, V}, on.dtype(at::kFloat));
        in.x0_rows = in.x0_logits.view({B * L, V});
    }
    if (shape.candidates > 0)
        std::tie(in.candidate_logp, in.candidate_ids) =
            plugins::top_candidates(at::zeros({B * L, V}, on.dtype(at::kFloat)), shape.candidates);
    try {
        composer_->predict(in, /*constraints_only=*/true);
    } catch (const ConstraintConflict& e) {
        for (size_t k : e.controllers) issues.add(controller_pointers_[k], e.what());
    } catch (const CompositionError& e) {
        for (size_t k : e.controllers) issues.add(controller_pointers_[k], e.what());
    } catch (const std::exception&) {
        // A controller that cannot take this stand-in of a step (it fails the same way in a run, where its
        // on_failure decides): not a conflict between constraints, so not an issue of the recipe.
    }
    composer_->start_run();  // a controller dropped by its on_failure takes part in the run again
}

uint64_t Generator::estimate_peak_bytes(int64_t batch) const {
    // The step's own [B, L, V] float tensors beyond the denoiser's, in units of one, as measured against peak RSS
    // (docs/results.md): the process's own, and each controller's. The lean step draws over the rows only, so a step
    // without controllers holds little beyond the network's output. Freed tensors are partly reused.
    double units = process_->step_units();
    bool whole_x0 = false;
    for (size_t k = 0; k < composer_->size(); ++k) {
        const auto& c = composer_->instance(k);
        const bool rows = c.has(RUDDER_CAP_ROWS);
        whole_x0 = whole_x0 || (!rows && !c.has(RUDDER_CAP_IGNORES_X0));
        if (c.has(RUDDER_CAP_LOGIT_DELTA)) units += 2;  // its buffer and the weighted copy
        if (c.has(RUDDER_CAP_GRADIENT)) units += process_->gradient_units();
        if (c.has(RUDDER_CAP_HARD_CONSTRAINT) && !rows) units += 0.25;  // the forbidden bytes
        // A delta on a model that takes conditions may come from the re-entrant denoise (cfg): its [n, B, L, V].
        if (c.has(RUDDER_CAP_LOGIT_DELTA) && model_.denoiser->traits().conditional) units += 5;
    }
    if (whole_x0) units += 1;  // the log-softmax of the network's output that they read
    const double unit = static_cast<double>(batch) * static_cast<double>(recipe_.max_length) *
                        static_cast<double>(model_.tokenizer->vocab_size()) * 4;
    // The units were fitted under glibc's malloc; tcmalloc (the rudder command's) reuses freed tensors more tightly
    // and a batch's working memory peaks at about 0.6 of that (make bench-memory, docs/results.md).
    const double allocator_share = allocator_is_tcmalloc() ? 0.6 : 1.0;
    const double working =
        static_cast<double>(model_.denoiser->working_bytes(batch, recipe_.max_length)) + units * unit;
    return resident_bytes() + static_cast<uint64_t>(allocator_share * working);
}

std::string Generator::over_memory_limit(int64_t batch) const {
    const uint64_t physical = physical_memory_bytes();
    const uint64_t limit = recipe_.max_memory_limit > 0 ? recipe_.max_memory_limit : physical;
    const int64_t particles = recipe_.guidance.particles;  // each sample is that many sequences
    const uint64_t estimate = estimate_peak_bytes(batch * particles);
    if (limit == 0 || estimate <= limit) return "";
    return "a batch of " + std::to_string(batch) +
           (particles > 1 ? " samples of " + std::to_string(particles) + " particles" : std::string()) +
           " needs about " + memory_text(estimate) + " at its peak (model '" + model_.name + "', " +
           std::to_string(recipe_.max_length) + " positions of " + std::to_string(model_.tokenizer->vocab_size()) +
           " tokens), over the limit of " + memory_text(limit) +
           (recipe_.max_memory_limit > 0 ? "" : " (the machine's memory)") + "; lower batch_size" +
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
    shape.total_steps = static_cast<int32_t>(process_->steps());
    shape.device = device_;
    shape.candidates = static_cast<int32_t>(std::min(recipe_.candidates, tok.vocab_size()));
    return shape;
}

Generator::~Generator() = default;

bool Generator::batching_pays() const { return process_->batching_pays(); }

std::string Generator::decode(const int64_t* row, int64_t* n_tokens) const {
    const std::vector<int64_t> ids(row, row + recipe_.max_length);
    *n_tokens = content_length(ids, model_.tokenizer->pad_id());
    // A word vocabulary may hold tokens that are not UTF-8 (and a partial character reads the same): every text a run
    // hands out (JSON Lines, the C API, Python, the server's events) is valid UTF-8, with U+FFFD for such bytes.
    return replace_invalid_utf8(model_.tokenizer->decode(ids.data(), *n_tokens));
}

void Generator::cancel() noexcept { cancel_requested_.store(true); }

std::vector<SampleResult> Generator::generate(const ProgressCallback& progress, const SampleCallback& on_sample,
                                              const RunOverrides& overrides) {
    cancel_requested_.store(false);
    try {
        return run_batches(progress, on_sample, overrides);
    } catch (const plugins::CallCancelled&) {  // a controller's process stopped by cancel()
        throw Cancelled();
    }
}

std::vector<SampleResult> Generator::run_batches(const ProgressCallback& progress, const SampleCallback& on_sample,
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
        // The controllers began this shape when the generator was made, and nothing has run since.
        if (begun_batch_ != shape.batch_size) composer_->begin(shape, services_.get());
        begun_batch_ = -1;

        if (b > 0) stats_.threads = std::max(stats_.threads, share.refresh());
        ReverseRun run{model_, recipe_, *composer_, stats_, device_, gen, {}, {}};
        run.tick = [&](int64_t step, double t, const std::function<at::Tensor()>& best_tokens) {
            if (step % kThreadRefreshSteps == 0) stats_.threads = std::max(stats_.threads, share.refresh());
            if (cancel_requested_.load()) throw Cancelled();
            if (!progress) return;
            Progress p{b, batches, step, process_->steps(), t, b * per_batch, total, {}};
            p.current_texts = [&] {
                const at::Tensor rows = best_tokens().to(at::kCPU).contiguous();
                std::vector<std::string> texts;
                int64_t n = 0;
                for (int64_t i = 0; i < rows.size(0); ++i) texts.push_back(decode(rows[i].data_ptr<int64_t>(), &n));
                return texts;
            };
            if (!progress(p)) throw Cancelled();
        };
        run.fault_at = [this](int64_t i, int64_t sample, int64_t position, const at::Tensor& scores) {
            return fault_at(i, sample, position, scores);
        };
        const at::Tensor tokens = process_->run(batch, run).to(at::kCPU).contiguous();
        for (int64_t i = 0; i < batch; ++i) {
            SampleResult r = finish_sample(b * per_batch + i, tokens[i].data_ptr<int64_t>());
            if (on_sample) on_sample(r);
            results.push_back(std::move(r));
        }
    }
    return results;
}

SampleResult Generator::finish_sample(int64_t index, const int64_t* row) {
    SampleResult r;
    r.index = index;
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
    return r;
}

GenerationFault Generator::fault_at(int64_t i, int64_t sample, int64_t position, const at::Tensor& scores) const {
    const std::string where = "step " + std::to_string(i + 1) + ", sample " + std::to_string(sample) +
                              " of the batch, position " + std::to_string(position);
    if (scores.isnan().any().item<bool>() || !scores.isfinite().any().item<bool>())
        return GenerationFault(where + ": model '" + model_.name + "' gives no distribution there (" +
                               (scores.isnan().any().item<bool>() ? "NaN" : "no finite log-probability") +
                               "): are its weights finite?");
    const std::string authors = composer_->last_delta_authors();
    if (!authors.empty())
        return GenerationFault(where +
                               ": the model's distribution is sound there but the controlled one is not (NaN, or no "
                               "token allowed) once the logit deltas of " +
                               authors +
                               " are added: deltas that large overflow float32 with the scores; lower the weight or "
                               "the delta");
    return GenerationFault(where +
                           ": the model's distribution is sound there but the controlled one is not (NaN, "
                           "or no token allowed): the controllers' contributions or the guidance made it so");
}

}  // namespace rudder
