// The large-vocabulary benchmark: time per reverse step and peak memory at V = 151,936, L = 1,024, B = 1 and 8, with
// no controller, one (vocab_mask) and four (vocab_mask, a candidate delta, length, span), each controller set in the
// dense forms of ABI 1.1 (RUDDER_CONTROL_FORMS=dense; the candidate delta is vocab_boost's dense logit_delta) and in
// the forms of ABI 1.2 (rows, packed bits, candidates; vocab_boost_candidates). The denoiser is synthetic (random
// log-probabilities drawn once per batch shape and reused, bench/synthetic_model.hpp), so a step costs the host's own
// work, the controllers and holding the logits, and no network.
//
// Every configuration runs in a process of its own (peak RSS is then its own: ru_maxrss, and the RSS just before
// generate(), after the model and the controllers are loaded), the configurations interleaved in each round (the
// order reversed every other round) so that drift on a shared machine hits them alike. A run takes `warmup` steps
// (the first draws the logits) and up to `measure` more, each timed from one progress callback to the next, then
// cancels; it stops timing once its timed steps have taken `budget` seconds (at least 2 are timed). Each run has one
// compute thread unless --threads says (0: as the CLI, every core, following the load) and an address-space cap
// (default 90% of the memory available at the start), so a run too big for the machine fails alone and says so.
// The table gives medians over the rounds of each run's median step, and ratios to the no-controller run of the same
// B. RUDDER_BENCH_OPS=1 on a child run (see run_child) prints where its steps' time goes, operator by operator.
//
// Run: build/bin/rudder_large_vocab_bench [--rounds 3] [--batches 1,8] [--configs none,mask,all4 (also boost, length)]
//        [--paths dense,1.2] [--sampler first_hitting | analytic:STEPS] [--warmup 2] [--measure 20] [--budget 15]
//        [--threads 1] [--memory-cap GB]                                        (`make bench-vocab`: the defaults)
#include <rudder/base/memory.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/runtime/generator.hpp>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "synthetic_model.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kVocab = 151936;
constexpr int64_t kLength = 1024;
constexpr int64_t kCandidates = 64;

struct Options {
    int rounds = 3;
    std::vector<int64_t> batches{1, 8};
    std::vector<std::string> configs{"none", "mask", "all4"};
    std::vector<std::string> paths{"dense", "1.2"};
    std::string sampler = "first_hitting";
    int warmup = 2, measure = 20;
    double budget_s = 15;      // a run stops timing steps once they have taken this long (at least 2 are timed)
    double memory_cap_gb = 0;  // 0: 90% of the memory available when the benchmark starts
    int threads = 1;           // one compute thread: on a shared machine a run's thread count would follow the load
};

// The controllers of a configuration, as recipe entries, for one path ("dense" or "rows").
std::string controllers(const std::string& config, bool dense) {
    const std::string mask = R"({"plugin": "vocab_mask"})";
    const std::string boost = dense ? R"({"plugin": "vocab_boost"})" : R"({"plugin": "vocab_boost_candidates"})";
    // Exactly 1,000 tokens: pad fixed at positions 1000-1023, forbidden before.
    const std::string length = R"({"plugin": "length", "params": {"tokens": 1000}})";
    // Three words at the start and one in the middle, all below vocab_mask's free 1,024 ids.
    const std::string span = R"({"plugin": "span", "params": {"prefix": ")" + rudder::bench::synthetic_word(10) + " " +
                             rudder::bench::synthetic_word(11) + " " + rudder::bench::synthetic_word(12) +
                             R"(", "words": [{"position": 500, "text": ")" + rudder::bench::synthetic_word(13) +
                             R"("}]}})";
    if (config == "none") return "";
    if (config == "mask") return mask;
    if (config == "boost") return boost;
    if (config == "length") return length;
    if (config == "all4") return mask + ", " + boost + ", " + length + ", " + span;
    throw std::invalid_argument("unknown configuration '" + config + "' (none, mask, boost, length, all4)");
}

int controller_count(const std::string& config) { return config == "none" ? 0 : config == "all4" ? 4 : 1; }

json sampler_json(const std::string& sampler) {
    if (sampler == "first_hitting") return {{"name", "first_hitting"}};
    if (sampler.rfind("analytic:", 0) == 0) return {{"name", "analytic"}, {"steps", std::stoi(sampler.substr(9))}};
    throw std::invalid_argument("--sampler: first_hitting or analytic:STEPS, got '" + sampler + "'");
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string gb(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", bytes / 1e9);
    return text;
}

uint64_t peak_rss_bytes() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux: kilobytes
}

// RUDDER_BENCH_OPS=1: the time of each ATen operator the reverse loop calls on the main thread during the timed
// steps (outermost calls only: an operator inside another counts in its caller), keyed by name and input shapes
// (RUDDER_BENCH_OPS=names: by name alone).
// What is left of the step is the loop's and the controllers' own code.
struct OpClock final : at::ObserverContext {
    std::chrono::steady_clock::time_point start;
    bool outermost = false;
};
struct OpTimes {
    bool recording = false;
    bool names_only = false;  // RUDDER_BENCH_OPS=names: keyed by name alone (steps whose row counts differ)
    std::thread::id thread;
    int depth = 0;
    std::map<std::string, std::pair<double, int64_t>> ms_calls;
};
OpTimes& op_times() {
    static OpTimes t;
    return t;
}

std::string op_key(const at::RecordFunction& fn) {
    std::string key = fn.name();
    if (op_times().names_only) return key;
    for (const c10::IValue& input : fn.inputs()) {
        if (!input.isTensor() || !input.toTensor().defined()) continue;
        key += " [";
        const auto sizes = input.toTensor().sizes();
        for (size_t d = 0; d < sizes.size(); ++d) key += (d ? "," : "") + std::to_string(sizes[d]);
        key += "]";
    }
    return key;
}

void record_operators() {
    op_times().thread = std::this_thread::get_id();
    at::addGlobalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
                OpTimes& t = op_times();
                if (!t.recording || std::this_thread::get_id() != t.thread) return nullptr;
                auto clock = std::make_unique<OpClock>();
                clock->outermost = t.depth++ == 0;
                clock->start = std::chrono::steady_clock::now();
                return clock;
            },
            [](const at::RecordFunction& fn, at::ObserverContext* context) {
                if (context == nullptr) return;
                OpTimes& t = op_times();
                --t.depth;
                const auto* clock = static_cast<OpClock*>(context);
                if (!clock->outermost) return;
                auto& entry = t.ms_calls[op_key(fn)];
                entry.first +=
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - clock->start).count();
                ++entry.second;
            })
            .needsInputs(true)
            .scopes({at::RecordScope::FUNCTION}));
}

void print_operators(int steps, double step_ms) {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [key, entry] : op_times().ms_calls) {
        rows.emplace_back(entry.first / steps, key + "  x" + std::to_string(entry.second / steps));
        total += entry.first / steps;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "operators per step (ms), of %.2f ms per step; outside them: %.2f ms\n", step_ms,
                 step_ms - total);
    double rest = 0;
    int64_t rest_calls = 0;
    for (const auto& [ms, key] : rows) {
        if (ms >= (std::getenv("RUDDER_BENCH_OPS_ALL") ? 0.0 : 0.005) * step_ms) {
            std::fprintf(stderr, "%9.3f  %s\n", ms, key.c_str());
        } else {
            rest += ms;
            ++rest_calls;
        }
    }
    std::fprintf(stderr, "%9.3f  %lld other operator kinds\n", rest, static_cast<long long>(rest_calls));
}

// What one run does; the parent passes it to the child on the command line.
struct RunSpec {
    int64_t batch = 1;
    std::string config = "none";
    bool dense = false;
    std::string sampler = "first_hitting";
    int warmup = 2, measure = 5;
    double budget_s = 20;     // timed steps stop once they have taken this long (at least 2 are taken)
    uint64_t memory_cap = 0;  // address-space limit of the child (0: none)
    int threads = 1;          // compute threads (rudder::set_compute_threads; 0 = every core, following the load)
};

// One configuration in this process: prints one JSON line (with "error" if the run failed).
int run_child(const RunSpec& r) {
    if (r.memory_cap > 0) {
        // Past the cap an allocation fails and the run reports it, instead of the kernel killing a process of the
        // machine when it runs out.
        const rlimit limit{r.memory_cap, r.memory_cap};
        setrlimit(RLIMIT_AS, &limit);
    }
    rudder::keep_freed_memory_in_process();  // as the CLI does
    rudder::set_compute_threads(r.threads);
    json out = {{"batch", r.batch}, {"config", r.config}, {"path", r.dense ? "dense" : "rows"}};
    try {
        const json recipe_json = {{"model", "synthetic"},
                                  {"sampler", sampler_json(r.sampler)},
                                  {"samples", r.batch},
                                  {"batch_size", r.batch},
                                  {"max_length", kLength},
                                  {"candidates", kCandidates},
                                  {"seed", 1}};
        std::string text = recipe_json.dump();
        text.pop_back();
        text += R"(, "controllers": [)" + controllers(r.config, r.dense) + "]}";
        rudder::RecipeLimits limits;
        limits.max_memory_bytes = uint64_t{1} << 50;  // measured here, not refused: the estimate is printed beside it
        rudder::plugins::Registry registry(
            {fs::path(RUDDER_BENCH_VOCAB_PLUGIN).parent_path(), fs::path(RUDDER_PLUGIN_DIR)});
        rudder::Generator g(rudder::parse_recipe(text, ".", limits), rudder::bench::synthetic_model(kVocab, 7),
                            registry);
        out["estimate"] = g.estimated_peak_bytes();

        const char* ops = std::getenv("RUDDER_BENCH_OPS");
        const bool by_operator = ops != nullptr && (std::strcmp(ops, "1") == 0 || std::strcmp(ops, "names") == 0);
        op_times().names_only = by_operator && std::strcmp(ops, "names") == 0;
        if (by_operator) record_operators();
        out["rss_before"] = rudder::resident_bytes();
        std::vector<double> step_ms;
        double timed_ms = 0;
        auto last = std::chrono::steady_clock::now();
        try {
            g.generate([&](const rudder::Progress& p) {
                const auto now = std::chrono::steady_clock::now();
                const double ms = std::chrono::duration<double, std::milli>(now - last).count();
                last = now;
                if (p.step > r.warmup) {
                    step_ms.push_back(ms);
                    timed_ms += ms;
                }
                const bool more =
                    p.step < r.warmup + 2 || (p.step < r.warmup + r.measure && timed_ms < r.budget_s * 1000);
                op_times().recording = by_operator && more && p.step >= r.warmup;
                return more;
            });
        } catch (const rudder::Cancelled&) {
        }
        if (by_operator)
            print_operators(static_cast<int>(step_ms.size()), timed_ms / static_cast<double>(step_ms.size()));
        out["step_ms"] = step_ms;
    } catch (const std::exception& e) {
        out["error"] = e.what();
    }
    out["peak_rss"] = peak_rss_bytes();
    std::printf("%s\n", out.dump().c_str());
    return 0;
}

// Runs one configuration in a child process; the child's JSON object, or a json string saying why there is none.
json spawn(const char* self, const RunSpec& r) {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    const pid_t pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        if (r.dense)
            setenv("RUDDER_CONTROL_FORMS", "dense", 1);
        else
            unsetenv("RUDDER_CONTROL_FORMS");
        const std::string args[] = {std::to_string(r.batch),    r.config,
                                    r.dense ? "dense" : "rows", r.sampler,
                                    std::to_string(r.warmup),   std::to_string(r.measure),
                                    std::to_string(r.budget_s), std::to_string(r.memory_cap),
                                    std::to_string(r.threads)};
        execl(self, self, "--child", args[0].c_str(), args[1].c_str(), args[2].c_str(), args[3].c_str(),
              args[4].c_str(), args[5].c_str(), args[6].c_str(), args[7].c_str(), args[8].c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    close(fds[1]);
    std::string output;
    char buffer[4096];
    for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) output.append(buffer, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "exit status " + std::to_string(WEXITSTATUS(status));
    const size_t start = output.rfind("\n{");
    try {
        return json::parse(start == std::string::npos ? output : output.substr(start + 1));
    } catch (const std::exception&) {
        return "no result";
    }
}

// A failed run's error in one line: an allocation past the memory cap says so, with the peak and what was asked.
std::string why_failed(const std::string& error, double peak_rss, uint64_t cap) {
    const bool memory =
        error.find("can't allocate memory") != std::string::npos || error.find("bad_alloc") != std::string::npos;
    if (!memory) return error.substr(0, error.find('\n')).substr(0, 200);
    std::string text =
        "out of memory: over the " + gb(static_cast<double>(cap)) + " GB cap (peak RSS " + gb(peak_rss) + " GB";
    const std::string asked = "you tried to allocate ";
    if (const size_t at = error.find(asked); at != std::string::npos)
        text += " when " + gb(std::atof(error.c_str() + at + asked.size())) + " GB more was asked for";
    return text + ")";
}

// MemAvailable from /proc/meminfo, in bytes; 0 if unknown.
uint64_t available_memory() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (f == nullptr) return 0;
    char line[256];
    uint64_t kb = 0;
    while (std::fgets(line, sizeof line, f) != nullptr)
        if (std::sscanf(line, "MemAvailable: %lu kB", &kb) == 1) break;
    std::fclose(f);
    return kb * 1024;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc == 11 && std::strcmp(argv[1], "--child") == 0) {
            RunSpec r;
            r.batch = std::atoll(argv[2]);
            r.config = argv[3];
            r.dense = std::strcmp(argv[4], "dense") == 0;
            r.sampler = argv[5];
            r.warmup = std::atoi(argv[6]);
            r.measure = std::atoi(argv[7]);
            r.budget_s = std::atof(argv[8]);
            r.memory_cap = std::strtoull(argv[9], nullptr, 10);
            r.threads = std::atoi(argv[10]);
            return run_child(r);
        }
        Options o;
        for (int i = 1; i + 1 < argc; i += 2) {
            const std::string key = argv[i], value = argv[i + 1];
            if (key == "--rounds")
                o.rounds = std::max(1, std::stoi(value));
            else if (key == "--batches") {
                o.batches.clear();
                for (const auto& b : split(value)) o.batches.push_back(std::stoll(b));
            } else if (key == "--configs")
                o.configs = split(value);
            else if (key == "--paths")
                o.paths = split(value);
            else if (key == "--sampler")
                o.sampler = value;
            else if (key == "--warmup")
                o.warmup = std::max(1, std::stoi(value));
            else if (key == "--measure")
                o.measure = std::max(2, std::stoi(value));
            else if (key == "--budget")
                o.budget_s = std::stod(value);
            else if (key == "--memory-cap")
                o.memory_cap_gb = std::stod(value);
            else if (key == "--threads")
                o.threads = std::max(0, std::stoi(value));
            else
                throw std::invalid_argument("unknown option " + key);
        }
        for (const auto& c : o.configs) controllers(c, true);  // unknown names fail before any run
        sampler_json(o.sampler);
        // Default cap: 90% of the memory available now, so a run too big for the machine fails alone.
        const uint64_t cap =
            o.memory_cap_gb > 0 ? static_cast<uint64_t>(o.memory_cap_gb * 1e9) : available_memory() / 10 * 9;

        std::vector<RunSpec> runs;
        for (int64_t b : o.batches)
            for (const auto& c : o.configs)
                for (bool dense : {true, false}) {
                    if (c == "none" && dense) continue;  // no controller: no forms to choose
                    const std::string path = dense ? "dense" : "1.2";
                    if (c != "none" && std::find(o.paths.begin(), o.paths.end(), path) == o.paths.end()) continue;
                    RunSpec r;
                    r.batch = b;
                    r.config = c;
                    r.dense = dense;
                    r.sampler = o.sampler;
                    r.warmup = o.warmup;
                    r.measure = o.measure;
                    r.budget_s = o.budget_s;
                    r.memory_cap = cap;
                    r.threads = o.threads;
                    runs.push_back(r);
                }
        std::printf(
            "V = %lld, L = %lld, k = %lld, sampler %s; per run %d warm-up steps, then %d timed (fewer past %.0f s, "
            "at least 2); %d rounds of %zu runs; memory cap %s GB per run; %d compute thread(s)\n",
            static_cast<long long>(kVocab), static_cast<long long>(kLength), static_cast<long long>(kCandidates),
            o.sampler.c_str(), o.warmup, o.measure, o.budget_s, o.rounds, runs.size(),
            gb(static_cast<double>(cap)).c_str(), o.threads);
        std::fflush(stdout);
        std::map<std::string, std::vector<json>> results;  // key: batch/config/path
        bool broken = false;  // a run failed otherwise than by needing more memory than the cap
        std::map<std::string, std::vector<std::string>> failures;
        auto key = [](const RunSpec& r) {
            return std::to_string(r.batch) + "/" + r.config + "/" + (r.dense ? "dense" : "rows");
        };
        for (int round = 0; round < o.rounds; ++round) {
            std::vector<RunSpec> order = runs;
            if (round % 2 == 1) std::reverse(order.begin(), order.end());
            for (const auto& r : order) {
                const json result = spawn(argv[0], r);
                std::string failure;
                if (result.is_string()) {
                    failure = result.get<std::string>();
                    broken = true;
                } else if (result.contains("error")) {
                    failure = why_failed(result["error"].get<std::string>(), result["peak_rss"].get<double>(), cap);
                    broken = broken || failure.rfind("out of memory", 0) != 0;
                }
                if (!failure.empty()) {
                    failures[key(r)].push_back(failure);
                    std::fprintf(stderr, "round %d %s: %s\n", round + 1, key(r).c_str(), failure.c_str());
                    continue;
                }
                results[key(r)].push_back(result);
                std::fprintf(stderr, "round %d %s: %.1f ms/step (%zu steps), peak %s GB\n", round + 1, key(r).c_str(),
                             median(result["step_ms"].get<std::vector<double>>()), result["step_ms"].size(),
                             gb(result["peak_rss"].get<double>()).c_str());
            }
        }

        std::printf("\n%2s %-6s %-5s %2s %10s %7s %8s %7s %7s %7s %8s %7s %6s\n", "B", "config", "path", "n", "ms/step",
                    "x none", "peak-pre", "x none", "peak", "x none", "estimate", "sd ms", "rounds");
        for (int64_t b : o.batches) {
            double none_ms = 0, none_delta = 0, none_peak = 0;
            for (const auto& r : runs) {
                if (r.batch != b) continue;
                const std::string k = key(r);
                const char* path = r.config == "none" ? "-" : r.dense ? "dense" : "1.2";
                if (results[k].empty()) {
                    std::printf("%2lld %-6s %-5s %2d  failed: %s\n", static_cast<long long>(b), r.config.c_str(), path,
                                controller_count(r.config), failures[k].front().c_str());
                    continue;
                }
                std::vector<double> ms, delta, peak, estimate;
                for (const auto& x : results[k]) {
                    ms.push_back(median(x["step_ms"].get<std::vector<double>>()));
                    peak.push_back(x["peak_rss"].get<double>());
                    delta.push_back(x["peak_rss"].get<double>() - x["rss_before"].get<double>());
                    estimate.push_back(x["estimate"].get<double>());
                }
                const double m = median(ms), d = median(delta), p = median(peak);
                if (r.config == "none") none_ms = m, none_delta = d, none_peak = p;
                double spread = 0;  // standard deviation of the rounds' medians
                for (double v : ms) spread += (v - m) * (v - m);
                spread = ms.size() > 1 ? std::sqrt(spread / static_cast<double>(ms.size() - 1)) : 0;
                auto ratio = [](double x, double base) { return base > 0 ? x / base : 0.0; };
                std::printf("%2lld %-6s %-5s %2d %10.2f %7.3f %8s %7.3f %7s %7.3f %8s %7.2f %3zu/%zu\n",
                            static_cast<long long>(b), r.config.c_str(), path, controller_count(r.config), m,
                            ratio(m, none_ms), gb(d).c_str(), ratio(d, none_delta), gb(p).c_str(), ratio(p, none_peak),
                            gb(median(estimate)).c_str(), spread, ms.size(), ms.size() + failures[k].size());
            }
        }
        std::printf(
            "\nms/step: median over the rounds of each run's median step; x none: ratio to the run without "
            "controllers at the same B; peak-pre: peak RSS less the RSS just before generate() (GB); peak: peak "
            "RSS (GB); estimate: Generator::estimated_peak_bytes (GB); sd ms: standard deviation of the rounds' "
            "medians\n");
        return broken ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rudder_large_vocab_bench: %s\n", e.what());
        return 2;
    }
}
