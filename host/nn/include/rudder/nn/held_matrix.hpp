// A weight matrix as a network holds it for its products: float32; float16 or bfloat16 as the checkpoint stores it
// (widened a slice of rows at a time as it is used); or int8 with a float32 scale per row (weight-only
// quantisation). What the networks of public checkpoints (bidirectional_llm) compute their linear layers with.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <utility>

namespace rudder::nn {

// A matrix [out, in]: `values` float32, float16 or bfloat16 (as the checkpoint stores it), or int8 with `row_scales`
// (quantize_rows_int8: row r stands for row_scales[r] * values[r]).
struct HeldMatrix {
    at::Tensor values;
    at::Tensor row_scales;  // int8 only: [out]

    HeldMatrix() = default;
    HeldMatrix(at::Tensor matrix) : values(std::move(matrix)) {}  // implicit: a float matrix is held as it is
    bool defined() const { return values.defined(); }
    bool is_int8() const { return row_scales.defined(); }
    void to(const at::Device& device);
};

// Symmetric per-row int8 quantisation of a float matrix (any float dtype): scale = max |w_row| / 127 (1 for a row of
// zeros), q = round(w / scale), so every weight is within scale / 2 of its original. Converted a slice of rows at a
// time: a 16-bit matrix is never widened whole.
HeldMatrix quantize_rows_int8(const at::Tensor& w, int64_t slice_elements = int64_t{1} << 20);

// The rows `ids` (int64, any shape) of an embedding table as float32 [..., in]: only those rows are widened.
at::Tensor embedding_rows(const HeldMatrix& table, const at::Tensor& ids);

// x W^T (+ b) for a held W [out, in]. A 16-bit or int8 W:
// - for x of up to `most_rows_in_registers` rows (positions; a sampler's step) on a CPU with AVX2, FMA and F16C, each
//   weight is widened in a register as the product reads it, and the rows of W are shared among the compute threads
//   (rudder::parallel_rows). Each sum runs over the weights in a fixed order, in float32, so one position's output
//   does not depend on the positions computed beside it. The default (-1) is where this path stops paying on
//   Qwen2.5-0.5B's matrices at 1 and 2 threads (make bench-widening, docs/results.md): 48 rows with AVX2's eight
//   lanes, 64 with AVX-512's sixteen (row_products::most_rows);
// - otherwise W is widened a slice of rows of about `slice_elements` at a time (4 MB of float32 by default) for
//   BLAS: the slice is still in the cache when the product reads it (measured on Qwen2.5-0.5B's output projection at
//   128 positions: 447 ms by slices, 742 ms widening the whole matrix first, 468 ms over a matrix widened at load).
// An int8 product is scaled by its rows' scales.
at::Tensor linear_widening(const at::Tensor& x, const HeldMatrix& w, const at::Tensor& b = {},
                           int64_t slice_elements = int64_t{1} << 20, int64_t most_rows_in_registers = -1);

// Whether this CPU runs linear_widening's products in registers (x86-64 with AVX2, FMA and F16C).
bool products_in_registers();

}  // namespace rudder::nn
