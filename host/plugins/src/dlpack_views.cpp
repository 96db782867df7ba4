#include "dlpack_views.hpp"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace rudder::plugins {

DLDevice to_dl_device(const c10::Device& device) {
    switch (device.type()) {
        case c10::DeviceType::CPU: return DLDevice{kDLCPU, 0};
        case c10::DeviceType::CUDA: return DLDevice{kDLCUDA, device.has_index() ? device.index() : 0};
        default: throw std::invalid_argument("device " + device.str() + " cannot be handed to plugins");
    }
}

DLDataType to_dl_dtype(at::ScalarType type) {
    switch (type) {
        case at::kFloat: return DLDataType{kDLFloat, 32, 1};
        case at::kLong: return DLDataType{kDLInt, 64, 1};
        case at::kByte: return DLDataType{kDLUInt, 8, 1};
        default:
            throw std::invalid_argument(std::string("dtype ") + c10::toString(type) +
                                        " has no place in the plugin ABI");
    }
}

at::ScalarType aten_dtype(DLDataType dtype) {
    if (dtype.code == kDLFloat && dtype.bits == 32) return at::kFloat;
    if (dtype.code == kDLInt && dtype.bits == 64) return at::kLong;
    if (dtype.code == kDLUInt && dtype.bits == 8) return at::kByte;
    if (dtype.code == kDLUInt && dtype.bits == 32) return at::kInt;
    throw std::invalid_argument("DLPack dtype code " + std::to_string(dtype.code) + " bits " +
                                std::to_string(dtype.bits) + " has no place in the plugin ABI");
}

std::string shape_text(at::IntArrayRef sizes) {
    std::string text = "[";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(sizes[i]);
    return text + "]";
}

}  // namespace rudder::plugins
