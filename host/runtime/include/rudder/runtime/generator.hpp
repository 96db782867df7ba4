// The reverse loop: a recipe, a model and its controllers in; decoded samples with each controller's verdict out.
#pragma once

#include <rudder/plugins/plugins.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>
#include <rudder/runtime/run_types.hpp>

namespace rudder {

class Composer;
struct ComposedController;
class DiffusionProcess;
class ModelServices;

struct SampleResult {
    struct Control {
        std::string label;
        plugins::Verdict verdict;
    };
    int64_t index = 0;
    std::vector<int64_t> tokens;  // seq_len ids (pads included)
    int64_t n_tokens = 0;         // ids before the first pad
    std::string text;
    std::vector<Control> controls;
};

// A sample as one JSON object: {"index", "text", "tokens" (before the first pad), "controls": {label: {"satisfied":
// true|false|null, "score"?, "detail"?}}}. A line of `rudder generate`'s JSON Lines, and rudder_results_json().
nlohmann::json sample_json(const SampleResult& sample);

struct Progress {
    int64_t batch = 0, batches = 0;  // batch being denoised (0-based) and how many
    int64_t step = 0, steps = 0;     // reverse steps done in this batch
    double t = 1.0;
    int64_t samples_done = 0, samples_total = 0;
    // The batch's current best guess, decoded: one text per sample of the batch (the argmax of the controlled
    // clean-token distribution; committed tokens stay). Decoding costs, so it runs only when called; valid only
    // during the callback.
    std::function<std::vector<std::string>()> current_texts;
};
// Called after every reverse step; return false to cancel the run (generate() then throws Cancelled).
using ProgressCallback = std::function<bool(const Progress&)>;
// Called once per finished sample, in order, so callers can stream results.
using SampleCallback = std::function<void(const SampleResult&)>;

// Per-call changes to the recipe, so one generator (model and controllers loaded once) serves many runs.
struct RunOverrides {
    std::optional<int64_t> samples;
    std::optional<uint64_t> seed;
};

// Keeps memory that tensors free inside the process instead of returning it to the OS. Every reverse step
// allocates several [B, L, V] tensors; returned to the OS, each one comes back page-faulted, which costs ~12 ms per
// 5 MB on a virtual machine (measured with bench/). Process-wide (glibc mallopt), so the CLI calls it and an
// embedding application decides for itself. Returns false where the C library has no such setting.
bool keep_freed_memory_in_process();

class Generator {
public:
    // Resolves and loads the model, checks the sampler against the model's family and the device, resolves every
    // plugin and creates every controller from its params. Every problem found is reported at once as a
    // RecipeError whose issues carry JSON pointers (/model, /sampler/name, /controllers/1/params, ...).
    // `earlier_issues` (from parse_recipe's collecting mode) are reported together with these; a value already
    // reported there is not checked again.
    Generator(Recipe recipe, plugins::Registry& registry,
              const std::vector<std::filesystem::path>& model_path = default_model_path(),
              std::vector<RecipeIssue> earlier_issues = {});
    // Bring your own denoiser: the same with a model the caller built (any Denoiser, with its tokenizer) instead
    // of the recipe's "model", which is not looked up (it becomes model.name; recipe text still needs one for
    // parse_recipe, any name will do). For a C++ application that builds Rudder as a CMake subproject and links
    // rudder_runtime (the C API has no such entry point). A model without a tokenizer or denoiser, a denoiser of
    // another family or vocabulary size than the model's, or a recipe "family" the model is not, is an issue at
    // /model; everything else is checked as above.
    Generator(Recipe recipe, Model model, plugins::Registry& registry,
              const std::vector<std::filesystem::path>& model_path = default_model_path(),
              std::vector<RecipeIssue> earlier_issues = {});
    ~Generator();

    std::vector<SampleResult> generate(const ProgressCallback& progress = {}, const SampleCallback& on_sample = {},
                                       const RunOverrides& overrides = {});
    // Stops the generate() call in progress: it throws Cancelled at the end of the step in progress, or, when it waits
    // on a controller in a process of its own, within 50 ms (that process is stopped; the next run starts a new one).
    // A call into an in-process plugin cannot be stopped: the run stops once it returns. Safe from any thread and from
    // a signal handler (one lock-free atomic store); with no generate() running it does nothing (each generate() starts
    // uncancelled).
    void cancel() noexcept;

    // The recipe as it runs: max_length resolved, and `sampler` holding the sampler, its steps and every setting
    // (the model's recommendation or the family's default where the recipe names none).
    const Recipe& recipe() const { return recipe_; }
    // Whether samples cost less denoised together than one at a time: true where every reverse step evaluates the
    // network for every sequence of the batch. False for the discrete analytic sampler, which skips a step's
    // evaluation when no position of the batch unmasks (most steps, for one short sequence; almost none in a large
    // batch): 16 samples in batches of 16 took 2.6x as long as in batches of 1 (docs/serving.md).
    bool batching_pays() const;
    const Model& model() const { return model_; }
    const GenerationStats& stats() const { return stats_; }
    // About how much memory the process holds at the peak of a run of this recipe: what it holds now (the model,
    // the plugins) and a batch's working tensors (the denoiser's activations and outputs, the step's [B, L, V]
    // tensors, the controllers' buffers). Plugins' own allocations are not counted. Measured against peak RSS in
    // docs/results.md. A recipe whose estimate exceeds its memory limit is refused when the generator is made.
    uint64_t estimated_peak_bytes() const { return estimate_peak_bytes(std::min(recipe_.batch_size, recipe_.samples)); }
    // The same for a run of `samples` samples (RunOverrides::samples) instead of the recipe's.
    uint64_t estimated_peak_bytes(int64_t samples) const {
        return estimate_peak_bytes(std::min(recipe_.batch_size, samples));
    }
    // Whether a run of `samples` samples keeps within the recipe's memory limit (generate() refuses one that does not).
    bool fits_memory_limit(int64_t samples) const {
        return over_memory_limit(std::min(recipe_.batch_size, samples)).empty();
    }

private:
    struct Issues;
    // Both constructors: the model from `load` (its exceptions are issues at /model), then everything else.
    void set_up(plugins::Registry& registry, const std::vector<std::filesystem::path>& model_path,
                std::vector<RecipeIssue> earlier_issues, const std::function<Model()>& load);
    // max_length from the model when the recipe leaves it out, checked against the model's longest.
    void resolve_length(Issues& issues);
    // Resolves each controller's plugin and creates it from its params.
    std::vector<ComposedController> create_controllers(plugins::Registry& registry, Issues& issues);
    // Begins every controller with the first batch's shape: what does not fit the run is the recipe's problem.
    void begin_controllers(Issues& issues);
    // The hard constraints of the first step composed before any sampling (the first batch, every position masked):
    // controllers that fix different tokens at a position, fix a token another forbids, or leave a position no token
    // are issues at their pointers, found by validation rather than by a run.
    void check_hard_constraints(Issues& issues);
    // generate()'s batches, after it reset the cancel flag.
    std::vector<SampleResult> run_batches(const ProgressCallback& progress, const SampleCallback& on_sample,
                                          const RunOverrides& overrides);
    // A finished sample: its text and each controller's verdict.
    SampleResult finish_sample(int64_t index, const int64_t* row);
    std::string decode(const int64_t* row, int64_t* n_tokens) const;
    uint64_t estimate_peak_bytes(int64_t batch) const;
    // The estimate for batches of `batch` against the memory limit: "" when within it, else why not.
    std::string over_memory_limit(int64_t batch) const;
    // What controllers' begin() sees for a batch of `batch` sequences of this run.
    plugins::RunShape run_shape(int64_t batch) const;
    // The GenerationFault for step `i` that could not sample at (sample, position): the model's scores there
    // (`scores`, [V]) are checked first, so the message blames the model or the controls.
    GenerationFault fault_at(int64_t i, int64_t sample, int64_t position, const at::Tensor& scores) const;

    Recipe recipe_;
    std::atomic<bool> cancel_requested_{false};  // cancel(); outlives the controllers, which read it
    Model model_;
    std::unique_ptr<DiffusionProcess> process_;  // its room's reverse loop and sampler settings
    std::unique_ptr<Composer> composer_;
    std::unique_ptr<ModelServices> services_;
    std::vector<std::string> controller_pointers_;  // each controller's place in the recipe, for messages
    int64_t begun_batch_ = -1;  // the batch size the controllers began with, while no run has used that begin
    c10::Device device_;
    GenerationStats stats_;
};

}  // namespace rudder
