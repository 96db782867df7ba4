// linear_widening's two paths for 16-bit and int8 weights, on the matrices of Qwen2.5-0.5B's shape (Dream-0.5B and
// the LLaDA-layout bench checkpoint): products in registers against BLAS over slices widened in memory, for the row
// counts a reverse step has (a block of a cached sampler, a prompt and its answer, a whole sequence). Where the two
// cross is what linear_widening's most_rows_in_registers is set from (docs/results.md). Random weights: the time of a
// product does not depend on its values.
// Run: make bench-widening   (or build/bin/rudder_widening_bench --benchmark_enable_random_interleaving=true)
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <limits>
#include <map>
#include <tuple>

#include <rudder/nn/held_matrix.hpp>

namespace {

// Qwen2.5-0.5B's linear layers as [out, in]: the attention's query (and output) projection, the MLP's gate (and up)
// and down projections, and the output layer over the vocabulary.
constexpr int64_t kShapes[][2] = {{896, 896}, {4864, 896}, {896, 4864}, {151936, 896}};

enum Weights : int64_t { kBfloat16 = 0, kInt8 = 1 };
enum Path : int64_t { kSlices = 0, kRegisters = 1 };

// One matrix per shape and precision, made once: the output layer is 270 MB in bfloat16.
const rudder::nn::HeldMatrix& matrix(int64_t shape, Weights weights) {
    static std::map<std::tuple<int64_t, int64_t>, rudder::nn::HeldMatrix> made;
    auto found = made.find({shape, weights});
    if (found != made.end()) return found->second;
    c10::InferenceMode inference;
    at::manual_seed(0);
    const at::Tensor w = at::randn({kShapes[shape][0], kShapes[shape][1]}).mul_(0.02).to(at::kBFloat16);
    rudder::nn::HeldMatrix held = weights == kInt8 ? rudder::nn::quantize_rows_int8(w) : rudder::nn::HeldMatrix(w);
    return made.emplace(std::make_tuple(shape, int64_t{weights}), std::move(held)).first->second;
}

void widening(benchmark::State& state) {
    const int64_t shape = state.range(0), rows = state.range(1);
    const auto weights = static_cast<Weights>(state.range(2));
    const auto path = static_cast<Path>(state.range(3));
    if (path == kRegisters && !rudder::nn::products_in_registers()) {
        state.SkipWithError("this CPU has no AVX2, FMA and F16C");
        return;
    }
    const rudder::nn::HeldMatrix& w = matrix(shape, weights);
    c10::InferenceMode inference;
    const at::Tensor x = at::randn({rows, kShapes[shape][1]});
    const int64_t most_rows_in_registers = path == kRegisters ? std::numeric_limits<int64_t>::max() : 0;
    for (auto _ : state)
        benchmark::DoNotOptimize(rudder::nn::linear_widening(x, w, {}, int64_t{1} << 20, most_rows_in_registers));
    state.counters["weights_GB/s"] =
        benchmark::Counter(static_cast<double>(state.iterations()) * w.values.numel() * w.values.element_size() / 1e9,
                           benchmark::Counter::kIsRate);
}

BENCHMARK(widening)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 8, 16, 32, 46, 64, 96, 128}, {kBfloat16, kInt8}, {kSlices, kRegisters}})
    ->ArgNames({"shape", "rows", "int8", "registers"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
