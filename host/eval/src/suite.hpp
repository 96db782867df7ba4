// A `rudder eval` suite (docs/eval.md): its tasks, each a recipe with the controllers that receive targets and
// where those targets come from.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace rudder::eval {

// Where a task's targets come from: held-out texts of an annotated JSON Lines file (`rudder annotate`'s output)
// or of E2E CSV, drawn by the seed.
struct TargetSource {
    std::filesystem::path file;
    int64_t count = 200;
    uint64_t seed = 0;
    int64_t max_words = 40;
    // E2E CSV whose meaning representations the annotated texts are looked up in (by text)
    std::filesystem::path meaning;
    // sentiment targets: {"field", "classes": {class: [MR values]}}, as attribute_classifier's
    nlohmann::json attribute;
};

// A recipe controller and the kind of target it receives.
struct ControlTarget {
    std::string control;  // the recipe controller's name or plugin
    std::string target;   // "pos", "tree", "span", "mr", "fields", "sentiment", "length", "prefix", "infill", "none"
};

struct Task {
    std::string name;
    std::filesystem::path recipe;
    std::string model;  // instead of the recipe's: a bundled name, or a folder (resolved against the suite's folder)
    std::vector<ControlTarget> controls;  // empty: no controller receives a target
    bool evaluate_only = false;
    // Per control: params merged after the target's (e.g. {"gamma": 4}), and a weight instead of the recipe's.
    std::map<std::string, nlohmann::json> params;
    std::map<std::string, double> weights;
    nlohmann::json sampler = nlohmann::json::object();   // merged into the recipe's sampler (e.g. {"steps": 50})
    nlohmann::json guidance = nlohmann::json::object();  // merged into the recipe's guidance ({"gradient_steps": 5})
    TargetSource targets;
};

struct Suite {
    std::string description;
    std::string teacher = "e2e-teacher";
    int64_t samples_per_target = 1;
    std::vector<Task> tasks;
};

// Reads and checks a suite; the files it names are resolved against its folder. Throws ConfigError
// (rudder/nn/config_error.hpp) listing every problem, std::runtime_error for a file it cannot read.
Suite read_suite(const std::filesystem::path& file);

}  // namespace rudder::eval
