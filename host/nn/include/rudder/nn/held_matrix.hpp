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

// x W^T (+ b) for a held W [out, in]. A 16-bit or int8 W is widened a slice of rows of about `slice_elements` at a
// time (4 MB of float32 by default): the slice is still in the cache when the product reads it, so the widening costs
// little (measured on Qwen2.5-0.5B's output projection at 128 positions: 447 ms by slices, 742 ms widening the whole
// matrix first, 468 ms over a matrix widened at load). An int8 slice's product is scaled by its rows' scales.
at::Tensor linear_widening(const at::Tensor& x, const HeldMatrix& w, const at::Tensor& b = {},
                           int64_t slice_elements = int64_t{1} << 20);

}  // namespace rudder::nn
