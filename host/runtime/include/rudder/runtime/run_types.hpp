// What a run reports besides its samples: its counts, and the two ways it stops early. Below both the Generator
// and the diffusion processes that it drives (host/runtime/src/diffusion_process.hpp), so that the processes need
// not include the Generator.
#pragma once

#include <cstdint>
#include <stdexcept>

namespace rudder {

class Cancelled : public std::runtime_error {
public:
    Cancelled() : std::runtime_error("generation cancelled") {}
};

// A run that cannot go on because what it would sample is not a distribution: the model's output is NaN (its
// weights are not finite), or the controlled distribution is. The message says which, and where.
class GenerationFault : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct GenerationStats {
    int64_t denoiser_calls = 0;      // network evaluations (the discrete cache skips some)
    int64_t steps = 0;               // reverse steps taken
    int64_t remasked = 0;            // committed tokens masked again (the analytic sampler's "remask")
    int64_t rows_drawn = 0;          // discrete: positions a token was drawn at, over all steps and sequences
    int64_t redrawn = 0;             // rows drawn again because a COMMIT controller (ABI 1.3) refused their first draw
    int64_t resamplings = 0;         // continuous: steps at which particles were resampled (guidance.particles)
    int64_t denoised_sequences = 0;  // sequences the network evaluated, for the loop and for controllers (cfg): each
                                     // call's batch size, summed (per sample: / samples)
    int threads = 0;                 // the most compute threads the run used (rudder/nn/compute_threads.hpp)
};

}  // namespace rudder
