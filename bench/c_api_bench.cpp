// Per-call overhead of the C embedding API against the C++ runtime it wraps: the same recipe generated through
// rudder::Generator::generate() and through rudder_generate() (librudder.so, which links its own copy of the
// runtime), on a tiny workload so that the wrapper's cost shows: a 64-sentence corpus model, 1 sample, length 8,
// 1 or 20 steps, with and without a per-step callback (and with the callback decoding the current text). The two
// calls alternate (in alternating order) and each is timed by the thread's CPU time, so the load of other
// processes cancels out;
// overhead_us is the C API's cost per call.
// Run: build/bin/rudder_c_api_bench
#include <rudder/rudder.h>

#include <benchmark/benchmark.h>

#include <time.h>

#include <stdexcept>
#include <string>

#include "corpus_models.hpp"
#include <rudder/runtime/generator.hpp>

namespace {

std::string recipe(int64_t steps) {
    return R"({"model": ")" + rudder::bench::corpus_model(64) + R"(", "family": "discrete", "sampler": {"steps": )" +
           std::to_string(steps) + R"(, "cache": false}, "samples": 1, "max_length": 8})";
}

int32_t count_steps(const rudder_progress* p, void* user_data) {
    *static_cast<int64_t*>(user_data) += p->step + p->n_texts;
    return 0;
}

// CPU time of this thread, in microseconds: the machine is shared, and other processes' load must not count.
double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// Arguments: steps, callback (0 none, 1 progress only, 2 progress with the current texts). Each iteration makes one
// call through each API, alternating, and times each by the thread's CPU time; the counters are per-call averages.
void overhead(benchmark::State& state) {
    const std::string text = recipe(state.range(0));
    rudder::plugins::Registry registry({});
    rudder::Generator generator(rudder::parse_recipe(text, "."), registry);
    rudder_generator* gen = nullptr;
    if (rudder_generator_create(text.c_str(), nullptr, &gen) != RUDDER_OK)
        throw std::runtime_error(rudder_last_error());

    int64_t seen = 0;
    rudder::ProgressCallback progress;
    rudder_generate_options options = rudder_default_generate_options();
    if (state.range(1) == 1) progress = [&](const rudder::Progress& p) { return (seen += p.step) >= 0; };
    if (state.range(1) == 2)
        progress = [&](const rudder::Progress& p) {
            return (seen += static_cast<int64_t>(p.current_texts().size())) >= 0;
        };
    if (state.range(1) > 0) {
        options.on_progress = count_steps;
        options.user_data = &seen;
        options.progress_text = state.range(1) == 2 ? 1 : 0;
    }
    auto c_call = [&] {
        rudder_results* res = nullptr;
        if (rudder_generate(gen, &options, &res) != RUDDER_OK)
            throw std::runtime_error(rudder_generator_last_error(gen));
        benchmark::DoNotOptimize(rudder_results_text(res, 0));
        rudder_results_free(res);
    };
    generator.generate(progress);  // warm-up both
    c_call();

    double cpp_us = 0, c_us = 0;
    auto timed = [](const auto& call) {
        const double start = thread_cpu_us();
        call();
        return thread_cpu_us() - start;
    };
    auto cpp_call = [&] { benchmark::DoNotOptimize(generator.generate(progress)); };
    bool c_first = false;  // the order alternates, so that whatever the first call leaves warm favours neither
    for (auto _ : state) {
        if (c_first) c_us += timed(c_call);
        cpp_us += timed(cpp_call);
        if (!c_first) c_us += timed(c_call);
        c_first = !c_first;
    }
    rudder_generator_free(gen);
    const auto per_call = benchmark::Counter::kAvgIterations;
    state.counters["cpp_us"] = benchmark::Counter(cpp_us, per_call);
    state.counters["c_api_us"] = benchmark::Counter(c_us, per_call);
    state.counters["overhead_us"] = benchmark::Counter(c_us - cpp_us, per_call);
}

BENCHMARK(overhead)
    ->ArgsProduct({{1, 20}, {0, 1, 2}})
    ->ArgNames({"steps", "callback"})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
    rudder::keep_freed_memory_in_process();  // the executable's allocator serves both copies of the runtime
    rudder_set_log(nullptr, nullptr, RUDDER_LOG_WARN);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
