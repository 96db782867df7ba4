// Particles of a controlled sample (Feynman-Kac steering, Singhal et al. 2025): several sequences per sample,
// resampled by how much the controls' reward grew, the best one kept.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "composer.hpp"

namespace rudder {

// The rewards of `samples` x `per_sample` sequences, particle j of sample s at row s * per_sample + j. A reward is the
// controllers' weighted log p(c | x) as guidance last reported it. Index tensors are int64 on the CPU.
class Particles {
public:
    Particles(int64_t samples, int64_t per_sample, double scale);

    // Takes the rewards [samples * per_sample] the controllers gave at reverse step `step`. Throws
    // std::runtime_error naming the controller that steered without reporting its log-probability, if any.
    void score(const Reward& reward, int64_t step);
    bool scored() const { return reward_.defined(); }

    // Draws each sample's particles anew from its own, with probabilities proportional to
    // exp(scale * (reward - reward at the last resampling)) (the potential of the reward's gain): row r continues
    // the particle at returned[r]. The rewards follow their particles.
    at::Tensor resample(at::Generator& gen);

    // Each sample's particle with the highest reward (the first before any reward): int64 [samples], rows.
    at::Tensor leaders() const;

    // Each sample's leading row of `sequences` [samples * per_sample, ...] (`sequences` itself with one particle).
    at::Tensor leading(const at::Tensor& sequences) const;
    // The samples: leading(sequences) at the end of a run. Throws std::runtime_error when there are several particles
    // and no reward ever came (no controller steered).
    at::Tensor chosen(const at::Tensor& sequences) const;

private:
    int64_t samples_, per_sample_;
    double scale_;
    at::Tensor reward_, reward_then_;  // float64 [samples * per_sample], on the CPU
};

// The combination over `batch` sequences of `seq_len` positions, restricted to whole sequences: `sequences` (int64
// [B'], indices into the batch) in that order, repeats allowed. Its rows must be every position (or undefined).
Combined select_sequences(const Combined& c, const at::Tensor& sequences, int64_t batch, int64_t seq_len);

}  // namespace rudder
