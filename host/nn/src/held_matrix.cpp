#include <rudder/nn/held_matrix.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "checkpoint_files.hpp"

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

}  // namespace

HeldMatrix quantize_rows_int8(const at::Tensor& w, int64_t slice_elements) {
    if (w.dim() != 2 || !at::isFloatingType(w.scalar_type()))
        throw std::invalid_argument("quantize_rows_int8: a float matrix [out, in] is required");
    const int64_t rows = w.size(0), per_slice = rows_per_slice(w, slice_elements);
    HeldMatrix held;
    held.values = at::empty(w.sizes(), w.options().dtype(at::kChar));
    held.row_scales = at::empty({rows}, w.options().dtype(at::kFloat));
    for (int64_t start = 0; start < rows; start += per_slice) {
        const int64_t n = std::min(per_slice, rows - start);
        const at::Tensor slice = as_float(w.narrow(0, start, n));
        at::Tensor scale = slice.abs().amax(1) / 127.0;
        scale.masked_fill_(scale == 0, 1.0);
        held.row_scales.narrow(0, start, n).copy_(scale);
        held.values.narrow(0, start, n).copy_(at::round(slice / scale.unsqueeze(1)).clamp_(-127, 127));
    }
    return held;
}

at::Tensor embedding_rows(const HeldMatrix& table, const at::Tensor& ids) {
    const at::Tensor rows = as_float(at::embedding(table.values, ids));
    return table.is_int8() ? rows * at::embedding(table.row_scales.unsqueeze(1), ids) : rows;
}

at::Tensor linear_widening(const at::Tensor& x, const HeldMatrix& w, const at::Tensor& b, int64_t slice_elements) {
    // The product of one slice of rows [start, start + n): an int8 slice's scaled before its bias is added.
    const auto product = [&](int64_t start, int64_t n) {
        const bool whole = start == 0 && n == w.values.size(0);
        const at::Tensor weight = as_float(whole ? w.values : w.values.narrow(0, start, n));
        const at::Tensor bias = b.defined() && !whole ? b.narrow(0, start, n) : b;
        if (!w.is_int8()) return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
        at::Tensor out = at::linear(x, weight).mul_(whole ? w.row_scales : w.row_scales.narrow(0, start, n));
        return bias.defined() ? out.add_(bias) : out;
    };
    const int64_t rows = w.values.size(0);
    if (w.values.scalar_type() == at::kFloat) return product(0, rows);
    const int64_t per_slice = rows_per_slice(w.values, slice_elements);
    if (rows <= per_slice) return product(0, rows);
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = rows;
    at::Tensor out = at::empty(sizes, x.options());
    for (int64_t start = 0; start < rows; start += per_slice) {
        const int64_t n = std::min(per_slice, rows - start);
        out.narrow(-1, start, n).copy_(product(start, n));
    }
    return out;
}

}  // namespace rudder::nn
