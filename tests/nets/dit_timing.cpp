// Not a test: loads an MDLM/SEDD checkpoint folder (e.g. dit_checkpoint_fixture.py --real-size's) and times its
// load and the forward of clean_log_probs at batch 1 over the given number of positions.
//   rudder_dit_timing DIR [POSITIONS=1024] [REPEATS=3]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <rudder/nn/dit_checkpoint.hpp>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DIR [POSITIONS] [REPEATS]\n", argv[0]);
        return 2;
    }
    const int64_t positions = argc > 2 ? std::atoll(argv[2]) : 1024;
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point since) { return std::chrono::duration<double>(clock::now() - since).count(); };
    auto start = clock::now();
    const auto net = rudder::nn::DitNetwork::load(argv[1]);
    std::printf("load: %.2f s (%lld blocks, hidden %lld, vocabulary %lld), %d intra-op threads\n", seconds(start),
                static_cast<long long>(net.config().n_blocks), static_cast<long long>(net.config().hidden_size),
                static_cast<long long>(net.config().vocab_size), at::get_num_threads());
    c10::InferenceMode inference;
    const at::Tensor tokens = at::full({1, positions}, net.config().mask_id(), at::kLong);
    const at::Tensor sigma = at::full({1}, net.sigma_at(0.5), at::kFloat);
    for (int i = 0; i < repeats; ++i) {
        start = clock::now();
        const at::Tensor out = net.clean_log_probs(tokens, sigma);
        std::printf("forward, batch 1, %lld positions: %.2f s (finite: %s)\n", static_cast<long long>(positions),
                    seconds(start), out.isfinite().all().item<bool>() ? "yes" : "no");
    }
}
