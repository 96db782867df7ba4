// The DiT's forward pass (the network of nn/dit_checkpoint.hpp), shared by the loaded checkpoint (DitNetwork) and
// the trainable DiT (nn/dit_trainable.hpp), so that what `rudder train` learns is what the runtime runs.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <rudder/nn/dit_checkpoint.hpp>

namespace rudder::nn {

// The states [B, L, H] at positions start .. start + L - 1 of `tokens` [B, L] after the output layer's modulated
// LayerNorm; the raw output is at::linear(states, w.head_w, w.head_b). `past` and `present` as in
// DitNetwork::forward_segment. `dropout` > 0 with a generator: MDLM's training dropout on each residual branch
// (before its gate), drawn from `gen`; none otherwise. Throws std::invalid_argument for inputs the network cannot
// take.
at::Tensor dit_states(const DitConfig& c, const DitWeights& w, const at::Tensor& tokens, int64_t start,
                      const at::Tensor& sigma, const DitKeyValues* past, DitKeyValues* present, double dropout = 0.0,
                      at::Generator* gen = nullptr);

}  // namespace rudder::nn
