// Products of float32 activations with weight rows read as a checkpoint stores them (bfloat16, float16) or as
// quantize_rows_int8 holds them: each weight is widened in a register, never written out as float32. What
// linear_widening runs for the few positions a sampler's step has, where BLAS over slices widened in memory spends
// more on the widening and its own packing than on the products. x86-64 with AVX2, FMA and F16C (sixteen lanes where
// the CPU has AVX-512F); elsewhere available() is false and linear_widening keeps its slices.
#pragma once

#include <cstdint>

namespace rudder::nn::row_products {

enum class Weights { bfloat16, float16, int8 };

// Whether this CPU runs the products (checked once).
bool available();

// The most rows of x for which these products beat BLAS over widened slices, for the kernel this CPU runs: 48 with
// AVX2's eight lanes, 64 with AVX-512's sixteen (make bench-widening on Qwen2.5-0.5B's matrices, 1 and 2 threads;
// docs/results.md). linear_widening's default.
int64_t most_rows();

// out[m * ldo + r - first] = sum_k x[m * K + k] * w[r * K + k] for m < M and rows r in [first, last) of `w` [N, K]
// (row-major, `weights` elements): float32 sums in chunks of K, on the widest vectors this CPU has. out is written,
// not added to. Each sum's order is fixed for a given instruction set, whatever M and rows are computed.
void multiply(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last,
              float* out, int64_t ldo);

// The kernel per instruction set (row_products_kernel.hpp), which multiply chooses between; the tests run each the
// CPU has. avx512 only where avx512_available().
bool avx512_available();
namespace isa {
void avx2(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last, float* out,
          int64_t ldo);
void avx512(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last,
            float* out, int64_t ldo);
}  // namespace isa

}  // namespace rudder::nn::row_products
