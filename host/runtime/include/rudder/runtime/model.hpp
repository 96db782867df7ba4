// Model directories: config.json (with a format version) + the files it names. See docs/models.md.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rudder/nn/model_files.hpp>
#include <rudder/nn/schedule.hpp>
#include <rudder/runtime/denoiser.hpp>
#include <rudder/runtime/loaded_model.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder {

// Whether a recipe's sampler name belongs to the family: ddpm, ddim (continuous); euler, analytic, first_hitting,
// confidence (discrete).
bool is_sampler_of(const std::string& sampler_name, Family family);

// Folders searched for bundled models by name: $RUDDER_MODEL_PATH (':'-separated), then
// <prefix>/<datadir>/rudder/models (bundled_model_dir(); the build tree and an installed prefix both have it).
std::vector<std::filesystem::path> default_model_path();

// The names of the models found in `search_path` (folders holding a config.json).
std::vector<std::string> list_models(const std::vector<std::filesystem::path>& search_path);

// The bundled model of the README's quick start, which lists and pickers offer first.
constexpr const char* kDefaultModel = "e2e-discrete";

// Whether the folder holds a model recipes sample from (a diffusion model), not one that controllers and commands
// load (a classifier, a judge, a tagger, a teacher): describe_model's "diffusion". False for a folder it cannot read.
bool is_generator(const std::filesystem::path& dir);

// A recipe's "model": a path (contains '/' or names an existing folder relative to base_dir) or a bundled name.
// Throws ModelError listing the bundled models, with "did you mean", when nothing matches.
std::filesystem::path resolve_model(const std::string& name_or_path, const std::filesystem::path& base_dir,
                                    const std::vector<std::filesystem::path>& search_path);

// Writes a model directory of type "corpus" (the exact corpus denoiser): the sentences (deduplicated, in order),
// a word vocabulary built from them, and config.json. Offers both families. Throws ModelError on I/O failure.
struct CorpusModelOptions {
    int64_t embed_dim = 16;
    uint64_t embed_seed = 0;
    std::string schedule = "sqrt";
    int64_t schedule_steps = 2000;
};
void write_corpus_model(const std::vector<std::string>& sentences, const std::filesystem::path& dir,
                        const CorpusModelOptions& options = {});

// What the model folder `dir` holds, as JSON, from its config.json and its weights files' headers (no tensor is read):
// name, path, format (a Rudder folder or a public checkpoint), kind, whether it is a diffusion model, families,
// noise, network sizes, weights (files, bytes, parameters, dtypes), tokenizer, whether it takes a condition, the
// recommended sampler and which controls apply. For `rudder models MODEL`. Throws ModelError as load_model does.
nlohmann::json describe_model(const std::filesystem::path& dir);

// Loads a model directory. `family` picks one for models that offer both; std::nullopt takes the model's first.
// Throws ModelError naming the file and the problem (missing file, bad JSON, other format version, ...).
Model load_model(const std::filesystem::path& dir, std::optional<Family> family);

// The tokenizer of the model folder `dir` alone, as load_model makes it, without reading the weights (a server counts
// a prompt's tokens with it before it loads the model). Throws ModelError as load_model does.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::filesystem::path& dir);

}  // namespace rudder
