// `rudder generate` and `rudder validate`: a recipe, its model and its controllers.
#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include <rudder/base/memory.hpp>
#include <rudder/base/output_file.hpp>
#include <rudder/plugins/plugin_calls.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>
#include <rudder/text/text_files.hpp>

#include "commands.hpp"
#include "progress_line.hpp"

namespace rudder::cli {

namespace {

// Runs `command`; a recipe it finds invalid is reported with every problem, and exits 2.
int with_recipe_errors(const std::string& file, const std::function<int()>& command) {
    try {
        return command();
    } catch (const RecipeError& e) {
        print_recipe_error(file, e);
        return kExitInvalid;
    }
}

// Generation progress, a step count per batch (progress_line.hpp says when a line is printed).
// The step rate is measured from the batch's first step on (the first line has none yet), and a run of several
// batches also shows how long the whole run has left, at the rate of its steps so far.
class ProgressPrinter {
public:
    explicit ProgressPrinter(bool quiet) : line_(quiet) {}
    bool operator()(const Progress& p) {
        const auto now = std::chrono::steady_clock::now();
        if (p.step == 1) batch_start_ = now;
        if (!run_started_) {
            run_start_ = now;
            run_started_ = true;
        }
        line_.show(p.step, p.steps, [&] {
            const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
            std::string text =
                fmt::format("[batch {}/{}] step {}/{}  t={:.3f}", p.batch + 1, p.batches, p.step, p.steps, p.t);
            const double in_batch = seconds(now - batch_start_);
            if (p.step > 1 && in_batch > 0)
                text += fmt::format("  {:.1f} steps/s", static_cast<double>(p.step - 1) / in_batch);
            const int64_t done = p.batch * p.steps + p.step, total = p.batches * p.steps;
            const double elapsed = seconds(now - run_start_);
            if (p.batches > 1 && done > 1 && elapsed > 0)
                text += "  run left " +
                        duration_text(elapsed / static_cast<double>(done - 1) * static_cast<double>(total - done));
            return text;
        });
        return true;
    }

private:
    // "42 s", "3 min 05 s", "1 h 02 min".
    static std::string duration_text(double seconds) {
        const auto s = static_cast<int64_t>(seconds + 0.5);
        if (s < 60) return fmt::format("{} s", s);
        if (s < 3600) return fmt::format("{} min {:02} s", s / 60, s % 60);
        return fmt::format("{} h {:02} min", s / 3600, s % 3600 / 60);
    }
    ProgressLine line_;
    std::chrono::steady_clock::time_point batch_start_ = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point run_start_;
    bool run_started_ = false;
};

// One readable line per sample: its text, then each controller's verdict.
std::string sample_text_line(const SampleResult& s) {
    std::string line = std::to_string(s.index + 1) + ". " + s.text;
    if (s.controls.empty()) return line;
    line += "   [";
    for (size_t i = 0; i < s.controls.size(); ++i) {
        const auto& v = s.controls[i].verdict;
        line += (i ? ", " : "") + s.controls[i].label + ": " +
                (v.satisfied < 0    ? "n/a"
                 : v.satisfied == 1 ? "ok"
                                    : "NOT MET");
    }
    return line + "]";
}

// The recipe at `path`, or read from standard input when `path` is "-" (relative paths in it are then relative
// to the working directory).
Recipe read_recipe(const std::string& path, std::vector<RecipeIssue>& issues, const RecipeLimits& limits) {
    if (path != "-") return load_recipe(path, limits, &issues);
    // Read up to just past the limit, which parse_recipe refuses: /dev/zero on stdin is not read for ever.
    std::string text;
    char chunk[1 << 16];
    while (text.size() <= kMaxConfigFileBytes && std::cin.read(chunk, sizeof chunk).gcount() > 0)
        text.append(chunk, static_cast<size_t>(std::cin.gcount()));
    return parse_recipe(text, ".", limits, &issues);
}

// --max-memory MB: the limit on a run's estimated peak memory (0: the machine's memory).
RecipeLimits limits_with_memory(int64_t max_memory_mb) {
    RecipeLimits limits;
    limits.max_memory_bytes = static_cast<uint64_t>(max_memory_mb) * 1000 * 1000;
    return limits;
}

// Ctrl-C (SIGINT) or SIGTERM during a run: the run stops at the end of the step in progress (a step waiting on a
// controller's process stops at once: Generator::cancel); a second one ends the process at once, as usual. A step
// inside an in-process plugin call that does not return (an endless loop) would never reach its end, so the first
// signal also starts a watch: a second after kCallGraceSeconds and every second after, if the plugin call running at
// the last look is still the one running (plugins::plugin_calls: none started since), the process ends with
// kExitInterrupted and says why. Everything here is async-signal-safe: lock-free atomics, write, alarm, _exit.
volatile std::sig_atomic_t g_interrupted = 0;
std::atomic<Generator*> g_running{nullptr};  // the generator to cancel
std::atomic<uint64_t> g_calls_started_at_last_look{0};
constexpr unsigned kCallGraceSeconds = 2;

extern "C" void on_watch(int) {
    const plugins::PluginCalls now = plugins::plugin_calls();
    if (now.running > 0 && now.started == g_calls_started_at_last_look.load()) {
        static const char message[] =
            "\nrudder: interrupted inside a plugin call that did not return; ending the process now\n";
        (void)!::write(STDERR_FILENO, message, sizeof message - 1);
        ::_exit(kExitInterrupted);
    }
    g_calls_started_at_last_look.store(now.started);
    ::alarm(1);
}

extern "C" void on_interrupt(int signal_number) {
    g_interrupted = signal_number;
    std::signal(signal_number, SIG_DFL);
    if (Generator* generator = g_running.load()) generator->cancel();
    g_calls_started_at_last_look.store(plugins::plugin_calls().started);
    std::signal(SIGALRM, on_watch);
    ::alarm(kCallGraceSeconds);
}

class InterruptHandlers {
public:
    explicit InterruptHandlers(Generator& generator) {
        static_assert(std::atomic<Generator*>::is_always_lock_free, "read in a signal handler");
        g_interrupted = 0;
        g_running.store(&generator);
        previous_int_ = std::signal(SIGINT, on_interrupt);
        previous_term_ = std::signal(SIGTERM, on_interrupt);
    }
    ~InterruptHandlers() {
        std::signal(SIGINT, previous_int_);
        std::signal(SIGTERM, previous_term_);
        ::alarm(0);
        std::signal(SIGALRM, SIG_DFL);
        g_running.store(nullptr);
    }
    InterruptHandlers(const InterruptHandlers&) = delete;
    InterruptHandlers& operator=(const InterruptHandlers&) = delete;

private:
    void (*previous_int_)(int);
    void (*previous_term_)(int);
};

int cmd_generate(const std::string& recipe_path, const std::string& out_path, std::optional<int64_t> samples,
                 std::optional<int64_t> seed, bool quiet, bool as_text, int64_t max_memory_mb) {
    std::vector<RecipeIssue> issues;
    Recipe recipe = read_recipe(recipe_path, issues, limits_with_memory(max_memory_mb));
    if (samples) recipe.samples = *samples;
    if (seed) recipe.seed = static_cast<uint64_t>(*seed);
    std::error_code ec;
    if (!out_path.empty() && recipe_path != "-" && std::filesystem::equivalent(out_path, recipe_path, ec))
        throw RecipeError({{"", "-o '" + out_path + "' is the recipe itself; name another output file"}});
    plugins::Registry registry = plugin_registry();
    Generator generator(recipe, registry, default_model_path(), std::move(issues));

    std::unique_ptr<OutputFile> file;
    if (!out_path.empty()) file = std::make_unique<OutputFile>(out_path);
    auto write = [&](const std::string& text) { file ? file->write(text) : write_stdout(text); };
    if (!quiet)
        std::fprintf(stderr, "model %s (%s), sampler %s, %lld steps, %lld sample%s, %zu controller%s\n",
                     generator.model().name.c_str(), family_name(generator.model().family),
                     generator.recipe().sampler.name.c_str(), static_cast<long long>(generator.recipe().sampler.steps),
                     static_cast<long long>(recipe.samples), recipe.samples == 1 ? "" : "s", recipe.controllers.size(),
                     recipe.controllers.size() == 1 ? "" : "s");

    std::map<std::string, std::pair<int64_t, int64_t>> tally;  // label -> (satisfied, judged)
    std::vector<std::string> order;
    const auto start = std::chrono::steady_clock::now();
    ProgressPrinter printer(quiet);
    InterruptHandlers interrupts(generator);
    int64_t written = 0;
    try {
        generator.generate([&](const Progress& p) { return g_interrupted == 0 && printer(p); },
                           [&](const SampleResult& s) {
                               write((as_text ? sample_text_line(s) : sample_json(s).dump()) + "\n");
                               ++written;
                               for (const auto& c : s.controls) {
                                   if (!tally.count(c.label)) order.push_back(c.label);
                                   auto& t = tally[c.label];
                                   if (c.verdict.satisfied >= 0) {
                                       t.second += 1;
                                       t.first += c.verdict.satisfied;
                                   }
                               }
                           });
        if (file) file->commit();
    } catch (const std::exception&) {
        if (file && !file->direct() && file->size() > 0)
            std::fprintf(stderr, "\nrudder: the %lld samples completed are in '%s'; '%s' is unchanged\n",
                         static_cast<long long>(written), file->written_path().c_str(), out_path.c_str());
        if (g_interrupted != 0) {
            std::fprintf(stderr, "rudder: interrupted after %lld of %lld samples\n", static_cast<long long>(written),
                         static_cast<long long>(recipe.samples));
            return kExitInterrupted;
        }
        throw;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!quiet) {
        std::fprintf(stderr, "%lld samples in %.2f s (%.2f samples/s)%s%s\n", static_cast<long long>(recipe.samples),
                     secs, static_cast<double>(recipe.samples) / secs, out_path.empty() ? "" : " -> ",
                     out_path.c_str());
        for (const auto& label : order)
            std::fprintf(stderr, "  %s: %lld/%lld satisfied\n", label.c_str(),
                         static_cast<long long>(tally[label].first), static_cast<long long>(tally[label].second));
    }
    return kExitOk;
}

int cmd_validate(const std::string& recipe_path, int64_t max_memory_mb) {
    std::vector<RecipeIssue> issues;
    Recipe recipe = read_recipe(recipe_path, issues, limits_with_memory(max_memory_mb));
    plugins::Registry registry = plugin_registry();
    Generator generator(recipe, registry, default_model_path(), std::move(issues));
    std::cout << recipe_path << ": valid (model " << generator.model().name << ", "
              << family_name(generator.model().family) << ", sampler " << generator.recipe().sampler.name << ", "
              << recipe.controllers.size() << " controller" << (recipe.controllers.size() == 1 ? "" : "s") << ", about "
              << memory_text(generator.estimated_peak_bytes()) << " at its peak)\n";
    return kExitOk;
}

}  // namespace

void add_recipe_commands(CLI::App& app, Commands& commands) {
    struct Options {
        std::string recipe, out, format = "jsonl";
        std::optional<int64_t> samples;
        std::optional<int64_t> seed;
        int64_t max_memory_mb = 0;
        bool quiet = false;
    };
    auto o = std::make_shared<Options>();
    auto* generate = app.add_subcommand("generate", "Generate samples from a recipe as JSON Lines");
    generate->add_option("recipe", o->recipe, "Recipe file (JSON), - for standard input")
        ->required()
        ->check(CLI::ExistingFile | CLI::IsMember({"-"}));
    generate->add_option("-o,--out", o->out,
                         "Write JSON Lines here instead of stdout (replaced only when the run completes)");
    generate->add_option("-n,--samples", o->samples, "Override the recipe's sample count")
        ->check(CLI::Range(1, 1000000));
    generate->add_option("-s,--seed", o->seed, "Override the recipe's seed (0 to 2^63 - 1)")
        ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
    generate->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
    generate->add_option("-f,--format", o->format, "jsonl (default) or text: one readable line per sample")
        ->check(CLI::IsMember({"jsonl", "text"}));
    commands.add_threads_option(generate);
    auto add_memory_option = [&](CLI::App* command) {
        command
            ->add_option(
                "--max-memory", o->max_memory_mb,
                "Refuse a run whose estimated peak memory exceeds this many MB (default: the machine's memory)")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    };
    add_memory_option(generate);
    commands.list.push_back({generate, [o] {
                                 return with_recipe_errors(o->recipe, [&] {
                                     return cmd_generate(o->recipe, o->out, o->samples, o->seed, o->quiet,
                                                         o->format == "text", o->max_memory_mb);
                                 });
                             }});

    auto* validate = app.add_subcommand("validate", "Check a recipe, its model and its controllers' params");
    validate->add_option("recipe", o->recipe, "Recipe file (JSON), - for standard input")
        ->required()
        ->check(CLI::ExistingFile | CLI::IsMember({"-"}));
    add_memory_option(validate);
    commands.list.push_back(
        {validate,
         [o] { return with_recipe_errors(o->recipe, [&] { return cmd_validate(o->recipe, o->max_memory_mb); }); }});
}

}  // namespace rudder::cli
