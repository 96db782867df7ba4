// Running a suite (`rudder eval`, docs/eval.md): every selected task's targets generated and scored into a folder
// (results.json, results.md, samples/<task>.jsonl), or one shard of the targets generated unscored
// (shard.jsonl), or the shards of a run merged and scored as one run would be.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <rudder/eval/summary.hpp>
#include <rudder/plugins/plugins.hpp>

namespace rudder::eval {

struct RunOptions {
    std::string suite;    // the suite's JSON file
    std::string out;      // folder for results.json, results.md and the samples; empty = <suite stem>-results
    int64_t targets = 0;  // > 0: at most this many targets per task (a quick run); 0 = the suite's count
    std::string only;     // run only the tasks whose name contains this
    std::string shard;    // "K/N": generate only targets K, K+N, ... into <out>/shard.jsonl (no scoring)
    std::vector<std::string> merge;  // shard folders to summarise instead of generating
};

// A target generated, for a caller that shows progress.
struct TargetProgress {
    std::string task;                    // its name
    int64_t task_number = 0, tasks = 0;  // this task's place among the tasks run (from 1), and their number
    int64_t done = 0, total = 0;         // this target's place among the task's targets (from 1), and their number
    double generating_seconds = 0.0;     // the task's generation so far (this process's targets), of `samples`
    int64_t samples = 0;
    std::chrono::steady_clock::time_point task_start;  // when the task's generation began
};

// What a run tells its caller as it goes (`rudder eval` prints it on stderr); an empty function is not called.
struct RunEvents {
    std::function<void(const std::string& message)> warning;  // e.g. fewer targets than the task asks for
    std::function<void(const TargetProgress& progress)> target_generated;
    std::function<void()> task_generated;  // after a task's last target (of this shard)
};

// -o, else <suite stem>-results in the current folder.
std::filesystem::path output_dir(const RunOptions& options);

// Runs the suite as `options` say, with the plugins of `registry`; returns each task's result in suite order
// (none for a shard, which only generates). Results are written after every task, samples as their targets
// finish, so a long run that is stopped keeps them. Throws ConfigError (rudder/nn/config_error.hpp) for a bad
// suite, std::runtime_error for anything else (missing files, failed runs, shards that do not merge).
std::vector<TaskResult> run_suite(const RunOptions& options, plugins::Registry& registry, const RunEvents& events = {});

}  // namespace rudder::eval
