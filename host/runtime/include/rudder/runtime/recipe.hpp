// Recipes: the JSON that says which model, which sampler and which controls. See docs/recipes.md.
#pragma once

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder {

// One problem in a recipe: where (a JSON pointer, "" for the whole document) and what.
using RecipeIssue = json_input::Issue;

// Thrown with every problem found, not just the first.
class RecipeError : public std::runtime_error {
public:
    explicit RecipeError(std::vector<RecipeIssue> issues);
    const std::vector<RecipeIssue>& issues() const { return issues_; }

private:
    std::vector<RecipeIssue> issues_;
};

// The recipe's "sampler": which sampler, its steps, and its settings. Each diffusion process (continuous, absorbing,
// uniform noise) reads the settings of its own samplers from `settings` (docs/recipes.md, "Samplers"); the keys a
// process does not read are refused, never ignored.
struct SamplerChoice {
    nlohmann::json settings = nlohmann::json::object();  // the "sampler" object as the recipe writes it
    // The sampler it names ("" = the model's recommended one, else its family's default) and the steps it asks for.
    // A Generator sets all three to what it runs: the name, the steps, and every setting with defaults filled in.
    std::string name;
    int64_t steps = 200;
};

struct GuidanceSpec {
    int64_t gradient_steps = 3;    // K Adagrad steps on x_{t-1} per reverse step (continuous)
    double step_size = 0.1;        // Adagrad learning rate
    double fluency_weight = 0.01;  // lambda in lambda |x - mu|^2 / sigma^2
    double until_t = 0.0;          // no gradient guidance once t <= until_t
    // Particles (both families; resampling, Feynman-Kac steering after Singhal et al. 2025, continuous only): each
    // sample is drawn as `particles` sequences; every `resample_every` steps (0: never) they are resampled within their
    // sample by exp(resample_scale * the gain in their reward since the last resampling), the reward being the
    // steering controllers' weighted log p(c | x); the sample is the particle with the highest reward at the end.
    int64_t particles = 1;
    int64_t resample_every = 0;
    double resample_scale = 1.0;
};

struct ActiveWindow {
    double from_t = 1.0;  // active while to_t <= t <= from_t
    double to_t = 0.0;
    bool never = false;  // "evaluate_only": the controller judges the samples but never steers
    bool contains(double t) const { return !never && t <= from_t && t >= to_t; }
};

struct ControllerSpec {
    std::string plugin;  // an id from the search path, or a path to a library (relative to the recipe)
    std::string sha256;  // "" or the library file's SHA-256 (lowercase hex): a mismatch is refused
    std::string name;    // label in outputs and messages; defaults to the plugin id (made unique)
    double weight = 1.0;
    ActiveWindow active;
    double time_limit = 60.0;  // seconds one step or evaluate call may take; 0 = no limit
    // "in_process" | "process" (a child process of its own, see docs/abi.md); "" = the recipe's "isolation"
    std::string isolation;
    // "fail": a PluginError from this controller fails the run; "continue": it is dropped from the rest of the run
    // (with a warning; its verdicts say "dropped") and the run goes on without it.
    std::string on_failure = "fail";
    // The params as the recipe writes them, keys in its order: what the plugin is given (params.dump()). A
    // controller may read order into them (a JSON Schema's properties are written in the order it gives them).
    JsonDocument params = JsonDocument::object();
    std::string pointer;  // "/controllers/<i>", for messages
};

struct Recipe {
    std::string model;                  // a bundled model name or a model directory (relative to the recipe)
    std::optional<std::string> family;  // "continuous" | "discrete"; needed only for models that offer both
    SamplerChoice sampler;
    uint64_t seed = 0;
    int64_t samples = 1;
    int64_t batch_size = 16;     // samples denoised together
    int64_t max_length = 0;      // L: positions per sequence; 0 = the model's longest (64 if it has none)
    std::string device = "cpu";  // cpu | cuda | cuda:<index>
    // How the denoiser holds its weight matrices: "stored" (as the model's files store them) | "int8" (weight-only
    // quantisation, Denoiser::quantize_int8; LLaDA and Dream checkpoints).
    std::string weights = "stored";
    // Where controllers run unless their own "isolation" says: "in_process" | "process"; unset = the host's default
    // ($RUDDER_ISOLATION, else in_process).
    std::optional<std::string> isolation;
    // k: each step's most likely tokens per row that the host offers controllers declaring RUDDER_CAP_CANDIDATES.
    int64_t candidates = 64;
    GuidanceSpec guidance;
    std::vector<ControllerSpec> controllers;
    std::filesystem::path base_dir;    // the recipe file's folder: relative paths resolve against it
    int64_t max_length_limit = 0;      // RecipeLimits::max_length, for the model's length when max_length is 0
    int64_t max_steps_limit = 100000;  // RecipeLimits::max_steps, for the settings a model recommends
    uint64_t max_memory_limit = 0;     // RecipeLimits::max_memory_bytes
    bool model_paths = true;           // RecipeLimits::model_paths
};

// Resource limits checked up front so a recipe cannot ask for an absurd allocation.
struct RecipeLimits {
    int64_t max_steps = 100000;
    int64_t max_samples = 1000000;
    int64_t max_batch_size = 4096;
    int64_t max_length = 4096;
    int64_t max_controllers = 256;  // each is a plugin instance with its own buffers at every step
    uint64_t max_memory_bytes = 0;  // a run's estimated peak memory (Generator); 0 = the machine's physical memory
    // Whether the models a run's controllers ask for (find_model: classifiers, taggers) may be given by path; false:
    // by name only, from the model search path (a server's clients name models, they give no paths).
    bool model_paths = true;
};

// Parses and validates recipe text. Throws RecipeError with every issue found. With `issues` given, problems of
// individual values are appended there instead and the recipe keeps defaults for them, so that a later phase
// (loading the model and the plugins) can report its own problems too; text that is not a JSON object still throws.
Recipe parse_recipe(const std::string& text, const std::filesystem::path& base_dir, const RecipeLimits& limits = {},
                    std::vector<RecipeIssue>* issues = nullptr);
// The same for a document already parsed (with json_input::parse_document, which refuses duplicate keys and deep
// nesting): a served request's recipe, read once as JSON and never printed and parsed again. The controllers' params
// keep the document's key order.
Recipe parse_recipe_document(const JsonDocument& doc, const std::filesystem::path& base_dir,
                             const RecipeLimits& limits = {}, std::vector<RecipeIssue>* issues = nullptr);

// Reads the file (an unreadable file is a RecipeError at pointer "") and parses it; base_dir = its folder.
Recipe load_recipe(const std::filesystem::path& path, const RecipeLimits& limits = {},
                   std::vector<RecipeIssue>* issues = nullptr);

// Checks a "sampler" object (found at `pointer`, for messages) as far as it can be without a model, appending its
// problems to `issues`. Recipes use it, and so does a model directory's recommended sampler settings (docs/models.md):
// a recipe whose "sampler" names no sampler takes the model's recommendation, with the recipe's own keys over it.
void check_sampler_settings(const nlohmann::json& sampler, const std::string& pointer, std::vector<RecipeIssue>& issues,
                            const RecipeLimits& limits = {});

// Reads a window of diffusion time in `window` ({"from_t", "to_t"}, from noisy to clean) into from_t and to_t where
// given; a window that runs backwards is an issue at `key` of `parent`.
void read_time_window(json_input::ObjectReader& window, json_input::ObjectReader& parent, const char* key,
                      double& from_t, double& to_t);
void read_time_window(json_input::DocumentReader& window, json_input::DocumentReader& parent, const char* key,
                      double& from_t, double& to_t);

}  // namespace rudder
