// BD3-LM's key/value cache of finished blocks against recomputing the whole sequence at every network call: a
// BD3-LM checkpoint's denoiser decoding as its first-hitting sampler does (one position a call, left to right, block
// by block), both ways, call by call interleaved on the same states, at batch 1. One JSON object on stdout: the median
// milliseconds per call of each, their ratio, and the largest difference between the two at the current block.
//   rudder_bd3lm_cache_bench DIR [POSITIONS=1024] [CALLS=32]
// The calls decode positions POSITIONS / 2 onwards (the first half given, as a prompt or as decoded blocks), so each
// call has half the sequence before it: the uncached call's cost grows with the prefix, the cached one's with the
// block.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <rudder/nn/dit_checkpoint.hpp>

#include "dit_checkpoint_denoiser.hpp"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DIR [POSITIONS] [CALLS]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const int64_t positions = argc > 2 ? std::atoll(argv[2]) : 1024;
    const int64_t calls = argc > 3 ? std::atoll(argv[3]) : 32;
    using clock = std::chrono::steady_clock;
    auto ms = [](clock::time_point since) {
        return std::chrono::duration<double, std::milli>(clock::now() - since).count();
    };
    nlohmann::json out = {{"positions", positions}, {"calls", calls}, {"threads", at::get_num_threads()}};
    try {
        const auto net = std::make_shared<rudder::nn::DitNetwork>(rudder::nn::DitNetwork::load(dir));
        const rudder::nn::DitConfig& c = net->config();
        if (c.block_size == 0) throw std::runtime_error(dir + " is not a BD3-LM checkpoint (no block_size)");
        if (positions < 2 || positions > c.max_length)
            throw std::runtime_error("POSITIONS must be 2 to the model's length");
        rudder::DitCheckpointDenoiser cached(net), plain(net, false);
        if (!cached.caches_blocks()) throw std::runtime_error("this checkpoint is time-conditioned: no cache applies");
        const int64_t mask = c.mask_id();
        at::manual_seed(3);
        at::Tensor x = at::full({1, positions}, mask, at::kLong);
        const int64_t start = positions / 2;
        x.narrow(1, 0, start).copy_(at::randint(0, mask, {1, start}, at::kLong));
        std::vector<double> cached_ms, plain_ms;
        double largest_difference = 0.0;
        for (int64_t call = 0; call <= calls && start + call < positions; ++call) {
            const int64_t p = start + call;
            const int64_t begin = p / c.block_size * c.block_size, end = std::min(begin + c.block_size, positions);
            // Interleaved, and the order alternates, so neither side always runs on a warmer cache.
            at::Tensor a, b;
            for (int side = 0; side < 2; ++side) {
                const bool cached_side = (side == 0) == (call % 2 == 0);
                auto since = clock::now();
                const at::Tensor logits = (cached_side ? cached : plain).denoise(x, 0.5, {}).logits;
                const double took = ms(since);
                if (call > 0) (cached_side ? cached_ms : plain_ms).push_back(took);  // call 0 fills the cache
                (cached_side ? a : b) = logits.narrow(1, begin, end - begin);
            }
            largest_difference = std::max(largest_difference, (a - b).abs().max().item<double>());
            x[0][p] = at::randint(0, mask, {1}, at::kLong).item<int64_t>();
        }
        out["cached_ms_per_call"] = median(cached_ms);
        out["uncached_ms_per_call"] = median(plain_ms);
        out["speedup"] = median(plain_ms) / median(cached_ms);
        out["max_difference_at_the_current_block"] = largest_difference;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rudder_bd3lm_cache_bench: %s\n", e.what());
        return 1;
    }
    std::cout << out.dump() << "\n";
    return 0;
}
