// DLPack views of ATen tensors, as the guarded adapter (controller_instance.cpp) and the run-service bridge hand them
// to plugins. Built here, not with ATen's DLConvertor, whose bundled dlpack.h clashes with the system one.
#pragma once

#include "step_forms.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace rudder::plugins {

constexpr size_t kMaxDims = 4;  // the ABI's tensors have at most 4 dimensions ([n, B, L, V])

// Throw std::invalid_argument for a device or dtype the ABI has no place for.
DLDevice to_dl_device(const c10::Device& device);
DLDataType to_dl_dtype(at::ScalarType type);

// The ATen dtype that holds a DLPack dtype of the ABI. ATen 1.13 has no uint32: token bits live in int32 tensors
// and the plugin is told uint32.
at::ScalarType aten_dtype(DLDataType dtype);

inline std::vector<int64_t> sizes_of(const forms::Dims& dims) {
    return std::vector<int64_t>(dims.size, dims.size + dims.ndim);
}

// "[2, 3]", as messages print a shape.
std::string shape_text(at::IntArrayRef sizes);

// A compact DLTensor over a contiguous tensor, plus a copy of the header as handed out so that a plugin that
// rewrote it (instead of writing the data in place) is caught. Not movable: dl.shape points into this object.
struct TensorView {
    at::Tensor tensor;  // keeps the storage alive while the plugin holds the view
    std::array<int64_t, kMaxDims> shape{};
    DLTensor dl{};
    DLTensor original{};
    std::array<int64_t, kMaxDims> original_shape{};

    TensorView() = default;
    TensorView(const TensorView&) = delete;
    TensorView& operator=(const TensorView&) = delete;

    DLTensor* bind(const at::Tensor& contiguous) { return bind(contiguous, to_dl_dtype(contiguous.scalar_type())); }
    // With the dtype the plugin is told, where ATen holds it in another of the same width (uint32 in int32).
    DLTensor* bind(const at::Tensor& contiguous, DLDataType dtype) {
        tensor = contiguous;
        const auto sizes = contiguous.sizes();
        std::copy(sizes.begin(), sizes.end(), shape.begin());
        dl.data = contiguous.data_ptr();
        dl.device = to_dl_device(contiguous.device());
        dl.ndim = static_cast<int32_t>(sizes.size());
        dl.dtype = dtype;
        dl.shape = shape.data();
        dl.strides = nullptr;
        dl.byte_offset = 0;
        original = dl;
        original_shape = shape;
        return &dl;
    }

    // What the plugin changed in the header, or nullptr if nothing.
    const char* changed_field() const {
        return forms::changed_header_field(dl, original, shape.data(), original_shape.data());
    }
};

}  // namespace rudder::plugins
