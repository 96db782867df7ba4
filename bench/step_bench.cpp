// Time of one reverse step with 0, 1 and 4 no-op controllers at batch 16, length 64, for both families, on exact
// corpus models. `corpus` 64 makes the denoiser cheap so the controllers' dispatch cost shows; `corpus` 4499 is
// the bundled e2e-corpus model. The ratio to 0 controllers is the dispatch overhead.
// Run: make bench   (or build/bin/rudder_bench)
#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>
#include <vector>

#include "corpus_models.hpp"
#include <rudder/runtime/generator.hpp>

namespace {

constexpr int kSteps = 10;

void reverse_step(benchmark::State& state) {
    const bool continuous = state.range(0) == 1;
    const int64_t controllers = state.range(1), corpus = state.range(2);
    std::string list;
    for (int64_t i = 0; i < controllers; ++i)
        list += std::string(i ? "," : "") + R"({"plugin": ")" + RUDDER_BENCH_NOOP + R"("})";
    // The discrete cache is off so that every step runs the denoiser, as the continuous family always does.
    const std::string recipe =
        R"({"model": ")" + rudder::bench::corpus_model(corpus) + R"(", "family": ")" +
        (continuous ? "continuous" : "discrete") + R"(", "sampler": {"name": ")" + (continuous ? "ddim" : "analytic") +
        R"(", "steps": )" + std::to_string(kSteps) + (continuous ? "" : R"(, "cache": false)") +
        R"(}, "samples": 16, "batch_size": 16, "max_length": 64, "controllers": [)" + list + "]}";
    rudder::plugins::Registry registry({});
    rudder::Generator generator(rudder::parse_recipe(recipe, "."), registry);
    generator.generate();  // warm-up: first-call allocations, thread pools, the corpus's per-length cache
    for (auto _ : state) benchmark::DoNotOptimize(generator.generate());
    // One item = one reverse step: items_per_second is steps/s, and Time / kSteps is the time of one step.
    state.SetItemsProcessed(state.iterations() * kSteps);
}

BENCHMARK(reverse_step)
    ->ArgsProduct({{0, 1}, {0, 1, 4}, {64, 4499}})
    ->ArgNames({"continuous", "controllers", "corpus"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
    rudder::keep_freed_memory_in_process();  // as the CLI does
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
