// The per-step cost of process isolation: one reverse step at batch 16, length 48 (the bundled models' longest) with 1
// and 4 no-op controllers (LOGIT_DELTA: each step's x0_logits go once into the shared input file, each child is handed
// a delta and writes nothing), in-process against "isolation": "process", on the bundled e2e-discrete and
// e2e-continuous models. The two modes are timed interleaved (one generate() of each per round, order alternating) so
// that drift on a shared machine hits both; the report is the median ms per step of each mode and their ratio. Run:
// build/bin/rudder_isolation_bench [ROUNDS]   (default 7)
#include <rudder/runtime/generator.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

constexpr int kSteps = 20;
// The bundled e2e models handle at most 48 positions (their trained length), so the issue's length 64 is 48 here;
// RUDDER_BENCH_LENGTH changes it for models that take more.
const int kLength = std::getenv("RUDDER_BENCH_LENGTH") != nullptr ? std::atoi(std::getenv("RUDDER_BENCH_LENGTH")) : 48;

std::string recipe(const std::string& model, bool continuous, int controllers, const char* isolation) {
    std::string list;
    for (int i = 0; i < controllers; ++i)
        list += std::string(i ? "," : "") + R"({"plugin": ")" + RUDDER_BENCH_NOOP + R"("})";
    // The discrete cache is off so that every step runs the denoiser and every controller, as in step_bench.
    return R"({"model": ")" + model + R"(", "sampler": {"steps": )" + std::to_string(kSteps) +
           (continuous ? "" : R"(, "cache": false)") + R"(}, "samples": 16, "batch_size": 16, "max_length": )" +
           std::to_string(kLength) + ", " + +R"("seed": 1, "isolation": ")" + isolation + R"(", "controllers": [)" +
           list + "]}";
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    rudder::keep_freed_memory_in_process();  // as the CLI does
    const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
    std::printf("%-16s %11s %14s %14s %8s\n", "model", "controllers", "in_process ms", "process ms", "ratio");
    for (const bool continuous : {false, true}) {
        const std::string model = continuous ? "e2e-continuous" : "e2e-discrete";
        for (const int controllers : {1, 4}) {
            rudder::plugins::Registry registry({std::filesystem::path(RUDDER_BENCH_NOOP).parent_path()});
            rudder::Generator in_process(
                rudder::parse_recipe(recipe(model, continuous, controllers, "in_process"), "."), registry);
            rudder::Generator process(rudder::parse_recipe(recipe(model, continuous, controllers, "process"), "."),
                                      registry);
            in_process.generate();  // warm-up: first-call allocations, thread pools
            process.generate();
            std::vector<double> a, b;
            for (int r = 0; r < rounds; ++r) {
                for (int k = 0; k < 2; ++k) {
                    const bool first_in_process = (r + k) % 2 == 0;
                    rudder::Generator& g = first_in_process ? in_process : process;
                    const auto start = std::chrono::steady_clock::now();
                    g.generate();
                    const double ms =
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                        kSteps;
                    (first_in_process ? a : b).push_back(ms);
                }
            }
            const double ma = median(a), mb = median(b);
            std::printf("%-16s %11d %14.2f %14.2f %8.3f\n", model.c_str(), controllers, ma, mb, mb / ma);
            std::fflush(stdout);
        }
    }
    return 0;
}
