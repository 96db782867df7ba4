// `rudder eval SUITE`: control tasks over held-out targets, each scored for success, teacher perplexity and time
// (docs/eval.md). The suite runs in rudder_eval (rudder/eval/run.hpp); this parses the arguments and prints.
#include <spdlog/fmt/fmt.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <rudder/base/paths.hpp>
#include <rudder/eval/run.hpp>
#include <rudder/plugins/plugins.hpp>

#include "commands.hpp"
#include "progress_line.hpp"

namespace rudder::cli {
namespace {

namespace fs = std::filesystem;

struct EvalOptions {
    eval::RunOptions run;
    std::string dask;  // a Dask scheduler's address: the shards run on its workers (rudder.dask)
    bool quiet = false;
};

// Returns the exit code; throws for errors the CLI reports (bad suite, missing files, failed runs).
int run_eval(const EvalOptions& o) {
    plugins::Registry registry = plugin_registry();
    std::optional<ProgressLine> progress;  // the current task's
    eval::RunEvents events;
    events.warning = [](const std::string& message) { std::fprintf(stderr, "warning: %s\n", message.c_str()); };
    events.target_generated = [&](const eval::TargetProgress& p) {
        if (!progress) progress.emplace(o.quiet);
        progress->show(p.done, p.total, [&] {
            const double elapsed =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - p.task_start).count();
            return fmt::format("[task {}/{}] {}: target {}/{}  {:.2f} s/sample generating, {:.0f} s in all",
                               p.task_number, p.tasks, p.task, p.done, p.total,
                               p.samples ? p.generating_seconds / static_cast<double>(p.samples) : 0.0, elapsed);
        });
    };
    events.task_generated = [&] { progress.reset(); };
    const std::vector<eval::TaskResult> results = eval::run_suite(o.run, registry, events);
    const fs::path out_dir = eval::output_dir(o.run);
    if (!o.run.shard.empty()) {
        if (!o.quiet)
            std::fprintf(stderr, "shard %s in %s (merge with `rudder eval SUITE --merge DIR...`)\n",
                         o.run.shard.c_str(), (out_dir / "shard.jsonl").string().c_str());
        return 0;
    }
    std::cout << eval::markdown(results);
    if (!o.quiet)
        std::fprintf(stderr, "results in %s (results.json, results.md, samples/)\n", out_dir.string().c_str());
    return 0;
}

// --dask: this process becomes `python3 -m rudder.dask eval ...` (the Python package beside the installed library),
// which runs `rudder eval --shard k/n` on the cluster's workers and `rudder eval --merge` with this executable.
// Dask's client is Python only, hence the hand-over rather than a C++ client.
int run_on_dask(const EvalOptions& o, int threads) {
    const fs::path package_dir = python_package_dir();
    if (!fs::exists(package_dir / "rudder" / "dask.py"))
        throw std::runtime_error("--dask: the Python package rudder is not at " + package_dir.string() +
                                 " (an installed prefix or a build tree has it)");
    const char* python_env = std::getenv("RUDDER_PYTHON");
    const std::string python = python_env != nullptr && *python_env != '\0' ? python_env : "python3";
    std::vector<std::string> args{python,
                                  "-m",
                                  "rudder.dask",
                                  "eval",
                                  fs::absolute(o.run.suite).string(),
                                  "--scheduler",
                                  o.dask,
                                  "-o",
                                  eval::output_dir(o.run).string(),
                                  "--threads",
                                  std::to_string(threads > 0 ? threads : 1)};
    if (!o.run.only.empty()) args.insert(args.end(), {"--only", o.run.only});
    if (o.run.targets > 0) args.insert(args.end(), {"--targets", std::to_string(o.run.targets)});
    if (o.quiet) args.push_back("--quiet");
    const char* python_path = std::getenv("PYTHONPATH");
    const std::string search =
        package_dir.string() + (python_path != nullptr && *python_path != '\0' ? ":" + std::string(python_path) : "");
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (setenv("PYTHONPATH", search.c_str(), 1) != 0 || (!ec && setenv("RUDDER_BIN", self.c_str(), 1) != 0))
        throw std::runtime_error(std::string("--dask: cannot set the environment: ") + std::strerror(errno));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    restore_standard_output();  // the Python that takes over writes its own results there
    std::fflush(stderr);
    execvp(argv[0], argv.data());
    throw std::runtime_error("--dask: cannot run " + python + " (" + std::strerror(errno) +
                             "); RUDDER_PYTHON names the Python 3 to use, one with Dask's distributed");
}

}  // namespace

void add_eval_command(CLI::App& app, Commands& commands) {
    auto o = std::make_shared<EvalOptions>();
    auto* eval = app.add_subcommand("eval", kEvalSummary);
    eval->add_option("suite", o->run.suite, "Suite (JSON, see docs/eval.md; suites ship in examples/eval/)")
        ->required()
        ->check(CLI::ExistingFile);
    eval->add_option("-o,--out", o->run.out,
                     "Folder for results.json, results.md and samples/ (default <suite>-results)");
    eval->add_option("--targets", o->run.targets, "At most this many targets per task (a quick run)")
        ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
    eval->add_option("--only", o->run.only, "Run only the tasks whose name contains this text");
    auto* shard = eval->add_option("--shard", o->run.shard,
                                   "K/N: generate only targets K, K+N, K+2N, ... of each task into OUT/shard.jsonl, "
                                   "unscored (a part of a run spread over processes or machines; python3 -m "
                                   "rudder.dask runs them on Dask)");
    eval->add_option("--merge", o->run.merge,
                     "Shard folders (--shard outputs) that together hold every target: summarise them into OUT "
                     "exactly as one run would, without generating")
        ->excludes(shard);
    eval->add_option("--dask", o->dask,
                     "SCHEDULER: spread the targets over a Dask cluster's workers (tcp://host:8786): "
                     "shards run there, the merge here; --threads is each shard's (default 1); "
                     "needs Python 3 with Dask's distributed ($RUDDER_PYTHON, default python3)")
        ->excludes(shard)
        ->excludes("--merge");
    commands.add_threads_option(eval);
    eval->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
    commands.list.push_back(
        {eval, [o, &commands] { return o->dask.empty() ? run_eval(*o) : run_on_dask(*o, commands.threads); }});
}

}  // namespace rudder::cli
