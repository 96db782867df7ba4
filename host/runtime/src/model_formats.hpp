// The formats a model folder can be in, each recognised by its config.json: one table that load_model and
// describe_model both read, so that a new format is one row here and its loader and description.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <vector>

#include <rudder/runtime/loaded_model.hpp>

namespace rudder {

struct ModelFormat {
    // Whether a folder's config.json is in this format.
    bool (*recognises)(const nlohmann::json& config);
    // The model in `dir`, whose config.json is `config` (ModelError for whatever is wrong with it).
    Model (*load)(const std::filesystem::path& dir, const nlohmann::json& config, std::optional<Family> family);
    // What describe_model says of it (name and path are added by the caller).
    nlohmann::json (*describe)(const std::filesystem::path& dir, const nlohmann::json& config);
    // Its tokenizer alone (load_tokenizer), as `load` makes it.
    std::shared_ptr<const Tokenizer> (*tokenizer)(const std::filesystem::path& dir, const nlohmann::json& config);
};

// The format of a folder whose config.json is `config`. The public checkpoints (MDLM's, SEDD's, BD3-LM's, UDLM's and
// DUO's DiT; LLaDA's and Dream's transformers) keep their own config.json without a format version and are
// recognised first; every other folder is read as Rudder's own, whose format version is then checked.
const ModelFormat& format_of(const nlohmann::json& config);

// Each format's loader and description, defined beside what they load (model.cpp, model_description.cpp, and the
// checkpoint denoisers).
Model load_rudder_model(const std::filesystem::path& dir, const nlohmann::json& config, std::optional<Family> family);
std::shared_ptr<const Tokenizer> load_rudder_tokenizer(const std::filesystem::path& dir, const nlohmann::json& config);
nlohmann::json describe_rudder_model(const std::filesystem::path& dir, const nlohmann::json& config);
nlohmann::json describe_dit_checkpoint(const std::filesystem::path& dir, const nlohmann::json& config);
nlohmann::json describe_bidirectional_llm(const std::filesystem::path& dir, const nlohmann::json& config);

}  // namespace rudder
