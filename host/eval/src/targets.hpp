// A task's targets: held-out texts drawn by the seed, each turned into the params its controls receive.
#pragma once

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "suite.hpp"

namespace rudder::eval {

// One held-out text with its annotation (annotated JSON Lines) and/or its meaning representation (E2E CSV).
struct Annotated {
    std::string text;
    std::vector<std::string> pos;
    std::string tree;
    std::string mr;
    int64_t words = 0;  // the annotation's words; for CSV, the reference's space-separated words
};

// The texts of target files read so far, by file (tasks of a suite often share one).
using AnnotatedCache = std::map<std::filesystem::path, std::vector<Annotated>>;

// One target: the params each control receives, and what the samples file and the scores keep of the text.
struct Target {
    std::map<std::string, nlohmann::json> params;  // by control
    nlohmann::json record;                         // {"reference", ...; infill: "middle" [start, end) token positions}
    std::vector<std::string> middle;               // infill: the reference's middle tokens
};

// A task's targets: drawn from its source (or, with no control that takes one, `count` empty ones), at most
// `most` of them (0: no limit). `base` is the task's recipe (its model gives token targets their tokenizer).
// `warn` is told when the source has fewer suitable texts than the task's count.
std::vector<Target> task_targets(const Task& task, const JsonDocument& base, AnnotatedCache& annotated, int64_t most,
                                 const std::function<void(const std::string&)>& warn);

}  // namespace rudder::eval
