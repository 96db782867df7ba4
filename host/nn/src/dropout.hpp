// Inverted dropout with the mask drawn from `gen` on the CPU, so a seed fixes it on any device (LibTorch's own
// dropout draws from the global generator, which a resumed training run could not restore). No-op when `gen` is
// null (evaluation) or p <= 0. For the networks' .cpp files, which include ATen/ATen.h.
#pragma once

#include <ATen/ATen.h>

namespace rudder::nn {

inline at::Tensor dropout(const at::Tensor& x, double p, at::Generator* gen) {
    if (!gen || p <= 0.0) return x;
    const at::Tensor keep = at::empty(x.sizes(), at::kFloat).bernoulli_(1.0 - p, *gen);
    return x * keep.to(x.device(), x.scalar_type()) * (1.0 / (1.0 - p));
}

}  // namespace rudder::nn
