#include <rudder/nn/held_matrix.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <vector>

#include <rudder/base/parallel_rows.hpp>

#include "checkpoint_files.hpp"
#include "row_products.hpp"

namespace rudder::nn {
using checkpoint::as_float;

void HeldMatrix::to(const at::Device& device) {
    if (values.defined()) values = values.to(device);
    if (row_scales.defined()) row_scales = row_scales.to(device);
}

namespace {

// Rows of `w` per slice of about `slice_elements` elements.
int64_t rows_per_slice(const at::Tensor& w, int64_t slice_elements) {
    return std::max<int64_t>(1, slice_elements / std::max<int64_t>(1, w.size(1)));
}

// How row_products reads `w`, where it can.
std::optional<row_products::Weights> row_products_of(const HeldMatrix& w) {
    if (!row_products::available() || !w.values.device().is_cpu() || !w.values.is_contiguous()) return std::nullopt;
    if (w.is_int8()) return row_products::Weights::int8;
    if (w.values.scalar_type() == at::kHalf) return row_products::Weights::float16;
    if (w.values.scalar_type() == at::kBFloat16) return row_products::Weights::bfloat16;
    return std::nullopt;
}

}  // namespace

HeldMatrix quantize_rows_int8(const at::Tensor& w, int64_t slice_elements) {
    if (w.dim() != 2 || !at::isFloatingType(w.scalar_type()))
        throw std::invalid_argument("quantize_rows_int8: a float matrix [out, in] is required");
    const int64_t rows = w.size(0), per_slice = rows_per_slice(w, slice_elements);
    HeldMatrix held;
    held.values = at::empty(w.sizes(), w.options().dtype(at::kChar));
    held.row_scales = at::empty({rows}, w.options().dtype(at::kFloat));
    // Every slice is widened into one buffer and computed in place there: no allocation per slice.
    const at::Tensor buffer = at::empty({std::min(per_slice, rows), w.size(1)}, w.options().dtype(at::kFloat));
    for (int64_t start = 0; start < rows; start += per_slice) {
        const int64_t n = std::min(per_slice, rows - start);
        at::Tensor slice = buffer.narrow(0, 0, n);
        slice.copy_(w.narrow(0, start, n));
        const auto [low, high] = at::aminmax(slice, 1);
        at::Tensor scale = at::maximum(low.neg(), high).div_(127.0);
        scale.masked_fill_(scale == 0, 1.0);
        held.row_scales.narrow(0, start, n).copy_(scale);
        held.values.narrow(0, start, n).copy_(slice.div_(scale.unsqueeze(1)).round_().clamp_(-127, 127));
    }
    return held;
}

at::Tensor embedding_rows(const HeldMatrix& table, const at::Tensor& ids) {
    const at::Tensor rows = as_float(at::embedding(table.values, ids));
    return table.is_int8() ? rows * at::embedding(table.row_scales.unsqueeze(1), ids) : rows;
}

bool products_in_registers() { return row_products::available(); }

at::Tensor linear_widening(const at::Tensor& x, const HeldMatrix& w, const at::Tensor& b, int64_t slice_elements,
                           int64_t most_rows_in_registers) {
    const int64_t rows = w.values.size(0), in = w.values.size(1);
    const at::Tensor flat = x.reshape({-1, in});
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = rows;
    const std::optional<row_products::Weights> in_registers = row_products_of(w);
    if (most_rows_in_registers < 0) most_rows_in_registers = row_products::most_rows();
    if (in_registers && flat.size(0) <= most_rows_in_registers && flat.scalar_type() == at::kFloat) {
        // Few positions: every weight widened in a register, the rows shared among the compute threads.
        const at::Tensor dense = flat.contiguous();
        at::Tensor out = at::empty({flat.size(0), rows}, x.options());
        const float* xs = dense.data_ptr<float>();
        const void* ws = w.values.data_ptr();
        float* os = out.data_ptr<float>();
        rudder::parallel_rows(0, rows, 256, [&](int64_t first, int64_t last) {
            row_products::multiply(xs, dense.size(0), in, ws, *in_registers, first, last, os + first, rows);
        });
        if (w.is_int8()) out.mul_(w.row_scales);
        if (b.defined()) out.add_(b);
        return out.view(sizes);
    }
    const int64_t per_slice = w.values.scalar_type() == at::kFloat ? rows : rows_per_slice(w.values, slice_elements);
    if (rows <= per_slice) {
        const at::Tensor weight = as_float(w.values);
        if (!w.is_int8()) return b.defined() ? at::linear(x, weight, b) : at::linear(x, weight);
        at::Tensor out = at::linear(x, weight).mul_(w.row_scales);
        return b.defined() ? out.add_(b) : out;
    }
    at::Tensor out = at::empty({flat.size(0), rows}, x.options());
    // Each slice of rows is widened into one buffer, and its product written straight into its columns of the
    // output (a strided view BLAS writes with its leading dimension), then scaled (int8) and biased there.
    const at::Tensor buffer = at::empty({per_slice, in}, x.options());
    for (int64_t start = 0; start < rows; start += per_slice) {
        const int64_t n = std::min(per_slice, rows - start);
        at::Tensor weight = buffer.narrow(0, 0, n);
        weight.copy_(w.values.narrow(0, start, n));
        at::Tensor columns = out.narrow(1, start, n);
        at::mm_out(columns, flat, weight.t());
        if (w.is_int8()) columns.mul_(w.row_scales.narrow(0, start, n));
        if (b.defined()) columns.add_(b.narrow(0, start, n));
    }
    return out.view(sizes);
}

}  // namespace rudder::nn
