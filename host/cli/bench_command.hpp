// `rudder bench`: sampling throughput of models, as users run them (see docs/cli.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rudder::cli {

struct BenchOptions {
    std::vector<std::string> models{"e2e-continuous", "e2e-discrete"};  // bundled names or directories
    std::vector<int64_t> batch_sizes{1, 16, 64};
    int64_t steps = 200;        // reverse steps per sample
    int64_t min_samples = 16;   // samples per measurement: at least this many, and whole batches
    int threads = 0;            // LibTorch intra-op threads; 0 = LibTorch's default
    bool as_json = false;
};

// Generates unconditional samples from each model at each batch size and prints samples/s and ms per step.
// Returns the process exit code.
int run_bench(const BenchOptions& options);

}  // namespace rudder::cli
