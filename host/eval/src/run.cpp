// The run of a suite: its tasks one after the other, each generated (or merged from shards), summarised and written.
#include <rudder/eval/run.hpp>

#include <cctype>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "suite.hpp"
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/teacher_model.hpp>
#include <rudder/runtime/model.hpp>

#include "shards.hpp"
#include "summarize.hpp"
#include "target_run.hpp"
#include "targets.hpp"

namespace rudder::eval {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string slug(const std::string& name) {
    std::string out;
    for (char c : name) {
        const auto byte = static_cast<unsigned char>(c);
        out += std::isalnum(byte) ? static_cast<char>(std::tolower(byte)) : '-';
    }
    return out;
}

bool is_selected(const RunOptions& o, const Task& task) {
    return o.only.empty() || task.name.find(o.only) != std::string::npos;
}

// What the tasks of one run share.
struct SuiteRun {
    SuiteRun(const RunOptions& o, const Suite& s, plugins::Registry& r, const RunEvents& e)
        : options(o), suite(s), registry(r), events(e) {}
    const RunOptions& options;
    const Suite& suite;
    plugins::Registry& registry;
    const RunEvents& events;
    int64_t shard_k = 0, shard_n = 1;
    int64_t selected = 0;     // the tasks the run selected (--only)
    std::ofstream shard_out;  // --shard: shard.jsonl
    AnnotatedCache annotated;
};

// This process's targets of the task (every one, or this shard's), generated in order; each outcome goes to
// shard.jsonl (a line per target as it finishes) or to `write_samples`.
std::vector<TargetOutcome> generate_task(SuiteRun& run, const Task& task, int64_t task_number,
                                         const std::function<void(const TargetOutcome&)>& write_samples) {
    // The recipe as written, keys in its order, for the targets' recipes: a controller may read order into its
    // params (a JSON Schema's properties are written in the order it gives them).
    JsonDocument base;
    try {
        base = read_json_document(task.recipe);
    } catch (const ModelError& e) {
        throw std::runtime_error("task '" + task.name + "': the recipe " + e.what());
    }
    if (!task.model.empty()) base["model"] = task.model;
    const std::vector<Target> targets =
        task_targets(task, base, run.annotated, run.options.targets, run.events.warning);
    const bool sharded = !run.options.shard.empty();
    TargetProgress progress;
    progress.task = task.name;
    progress.task_number = task_number;
    progress.tasks = run.selected;
    progress.total = static_cast<int64_t>(targets.size());
    progress.task_start = std::chrono::steady_clock::now();
    std::vector<TargetOutcome> outcomes;
    for (size_t i = static_cast<size_t>(run.shard_k); i < targets.size(); i += static_cast<size_t>(run.shard_n)) {
        outcomes.push_back(run_target(run.suite, task, base, targets[i], i, run.registry));
        progress.generating_seconds += outcomes.back().seconds;
        progress.samples += static_cast<int64_t>(outcomes.back().samples.size());
        if (sharded)  // a line per target as it finishes
            run.shard_out << outcome_json(task.name, static_cast<int64_t>(targets.size()), run.options.shard,
                                          outcomes.back())
                                 .dump()
                          << "\n"
                          << std::flush;
        else
            write_samples(outcomes.back());
        progress.done = static_cast<int64_t>(i + 1);
        if (run.events.target_generated) run.events.target_generated(progress);
    }
    if (run.events.task_generated) run.events.task_generated();
    return outcomes;
}

// results.json and results.md of the tasks done so far.
void write_results(const fs::path& out_dir, const fs::path& suite_file, const Suite& suite,
                   const std::vector<TaskResult>& results) {
    json all = json::array();
    for (const auto& r : results) all.push_back(result_json(r));
    std::ofstream(out_dir / "results.json")
        << json({{"suite", suite_file.string()}, {"description", suite.description}, {"tasks", all}}).dump(2) << "\n";
    std::ofstream(out_dir / "results.md") << markdown(results);
}

}  // namespace

fs::path output_dir(const RunOptions& o) {
    return o.out.empty() ? fs::path(fs::path(o.suite).stem().string() + "-results") : fs::path(o.out);
}

std::vector<TaskResult> run_suite(const RunOptions& o, plugins::Registry& registry, const RunEvents& events) {
    const fs::path suite_file = o.suite;
    const Suite suite = read_suite(suite_file);
    const fs::path out_dir = output_dir(o);
    const bool sharded = !o.shard.empty(), merging = !o.merge.empty();
    SuiteRun run(o, suite, registry, events);
    if (sharded) std::tie(run.shard_k, run.shard_n) = parse_shard(o.shard);
    fs::create_directories(sharded ? out_dir : out_dir / "samples");
    std::optional<TeacherModel> teacher;  // a shard only generates: the merge scores
    if (!sharded) teacher = load_teacher(resolve_model(suite.teacher, suite_file.parent_path(), default_model_path()));
    std::map<std::string, std::vector<TargetOutcome>> merged;
    if (merging) merged = read_shards(o.merge);
    if (sharded) run.shard_out.open(out_dir / "shard.jsonl");

    std::vector<TaskResult> results;
    int64_t task_number = 0;
    for (const auto& task : suite.tasks) run.selected += is_selected(o, task);
    if (run.selected == 0)
        throw std::runtime_error("no task of '" + suite_file.string() + "' is named like '" + o.only + "'");
    for (const auto& task : suite.tasks) {
        if (!is_selected(o, task)) continue;
        ++task_number;
        std::vector<TargetOutcome> outcomes;
        // Samples are written as their targets finish, so a long run that is stopped keeps them.
        std::ofstream samples_out;
        if (!sharded) samples_out.open(out_dir / "samples" / (slug(task.name) + ".jsonl"));
        const auto write_samples = [&](const TargetOutcome& outcome) {
            for (const auto& line : outcome.samples) samples_out << line.dump() << "\n";
            samples_out.flush();
        };
        if (merging) {
            const auto found = merged.find(task.name);
            if (found == merged.end()) throw std::runtime_error("--merge: no shard holds task '" + task.name + "'");
            outcomes = std::move(found->second);
            for (const auto& outcome : outcomes) write_samples(outcome);
        } else {
            outcomes = generate_task(run, task, task_number, write_samples);
        }
        if (sharded) continue;
        results.push_back(summarize(task.name, outcomes, *teacher));
        // Written after every task, so a long run that is stopped keeps what it measured.
        write_results(out_dir, suite_file, suite, results);
    }
    return results;
}

}  // namespace rudder::eval
