// Per-call overhead of the C embedding API against the C++ runtime it wraps: the same recipe generated through
// rudder::Generator::generate() and through rudder_generate() (librudder.so, which links its own copy of the
// runtime), on a tiny workload so that the wrapper's cost shows: a 64-sentence corpus model, 1 sample, length 8,
// 1 or 20 steps, with and without a per-step callback (and with the callback decoding the current text).
// The difference of the two times is the C API's overhead per call.
// Run: build/bin/rudder_c_api_bench
#include <rudder/rudder.h>

#include <benchmark/benchmark.h>

#include <stdexcept>
#include <string>

#include "corpus_models.hpp"
#include "generator.hpp"

namespace {

std::string recipe(int64_t steps) {
    return R"({"model": ")" + rudder::bench::corpus_model(64) + R"(", "family": "discrete", "sampler": {"steps": )" +
           std::to_string(steps) + R"(, "cache": false}, "samples": 1, "max_length": 8})";
}

// Arguments: steps, callback (0 none, 1 progress only, 2 progress with the current texts).
void cpp_generate(benchmark::State& state) {
    rudder::plugins::Registry registry({});
    rudder::Generator generator(rudder::parse_recipe(recipe(state.range(0)), "."), registry);
    int64_t seen = 0;
    rudder::ProgressCallback progress;
    if (state.range(1) == 1) progress = [&](const rudder::Progress& p) { return (seen += p.step) >= 0; };
    if (state.range(1) == 2)
        progress = [&](const rudder::Progress& p) { return (seen += static_cast<int64_t>(p.current_texts().size())) >= 0; };
    generator.generate(progress);  // warm-up
    for (auto _ : state) benchmark::DoNotOptimize(generator.generate(progress));
}

int32_t count_steps(const rudder_progress* p, void* user_data) {
    *static_cast<int64_t*>(user_data) += p->step + p->n_texts;
    return 0;
}

void c_generate(benchmark::State& state) {
    rudder_generator* gen = nullptr;
    if (rudder_generator_create(recipe(state.range(0)).c_str(), nullptr, &gen) != RUDDER_OK)
        throw std::runtime_error(rudder_last_error());
    int64_t seen = 0;
    rudder_generate_options options = rudder_default_generate_options();
    if (state.range(1) > 0) {
        options.on_progress = count_steps;
        options.user_data = &seen;
        options.progress_text = state.range(1) == 2 ? 1 : 0;
    }
    auto once = [&] {
        rudder_results* res = nullptr;
        if (rudder_generate(gen, &options, &res) != RUDDER_OK) throw std::runtime_error(rudder_generator_last_error(gen));
        benchmark::DoNotOptimize(rudder_results_text(res, 0));
        rudder_results_free(res);
    };
    once();  // warm-up
    for (auto _ : state) once();
    rudder_generator_free(gen);
}

void configure(benchmark::internal::Benchmark* b) {
    b->ArgsProduct({{1, 20}, {0, 1, 2}})->ArgNames({"steps", "callback"})->Unit(benchmark::kMicrosecond)->MinTime(1.0);
}
BENCHMARK(cpp_generate)->Apply(configure);
BENCHMARK(c_generate)->Apply(configure);

}  // namespace

int main(int argc, char** argv) {
    rudder::keep_freed_memory_in_process();  // the executable's allocator serves both copies of the runtime
    rudder_set_log(nullptr, nullptr, RUDDER_LOG_LEVEL_WARN);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
