// Rotary position embedding's half rotation, (x1, x2) -> (-x2, x1) over the last dimension, as GPT-NeoX, LLaMA and
// MDLM's DiT apply it: q * cos + rotate_half(q) * sin. For the networks' .cpp files, which include ATen/ATen.h.
#pragma once

#include <ATen/ATen.h>

namespace rudder::nn {

inline at::Tensor rotate_half(const at::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

}  // namespace rudder::nn
