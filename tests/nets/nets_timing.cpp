// Training speed of the denoiser networks at their default sizes (or a JSON config given as argument 2):
//   rudder_nets_timing [vocab_size=3000] ['{"dim": 96}'] [batch=64] [steps=10] [threads=2]
// Prints parameters, weights-file size (float32) and Adam steps per second for each family, on the CPU, with the
// process set up as `rudder train` runs (freed memory kept in the process, `threads` intra-op threads). A
// measurement tool, not a test.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/text/tokenizer.hpp>

int main(int argc, char** argv) {
    using namespace rudder;
    const int64_t V = argc > 1 ? std::atoll(argv[1]) : 3000;
    const nlohmann::json extra = argc > 2 ? nlohmann::json::parse(argv[2]) : nlohmann::json::object();
    const int64_t B = argc > 3 ? std::atoll(argv[3]) : 64;
    const int64_t steps = argc > 4 ? std::atoll(argv[4]) : 10;
    at::set_num_threads(argc > 5 ? std::atoi(argv[5]) : 2);
    // Without this every [B, L, V] tensor comes back page-faulted: a third of a step on a virtual machine.
    keep_freed_memory_in_process();

    // A vocabulary of V tokens: the three specials and V - 3 made-up words.
    std::vector<std::string> words;
    for (int64_t i = 3; i < V; ++i) words.push_back("w" + std::to_string(i));
    std::string line;
    for (const auto& w : words) line += w + " ";
    const WordTokenizer tokenizer = WordTokenizer::build({line});

    for (const std::string family : {"continuous", "discrete"}) {
        nlohmann::json config = {{"family", family}};
        for (const auto& item : extra.items()) config[item.key()] = item.value();
        at::manual_seed(0);
        const auto net = nn::make_denoiser_net(config, tokenizer);
        const auto& c = net->denoiser_config();
        int64_t params = 0;
        for (const auto& p : net->parameters()) params += p.numel();

        auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
        // E2E-like batches: texts of 10-40 tokens then pads (the network sees every position either way); meaning
        // representations of 20-45 word tokens (E2E's average is 30, its longest 49).
        at::Tensor tokens = at::randint(3, V, {B, c.max_length}, gen, at::kLong);
        const at::Tensor lengths = at::randint(10, 41, {B, 1}, gen, at::kLong);
        tokens.masked_fill_(at::arange(c.max_length, at::kLong).unsqueeze(0).ge(lengths), tokenizer.pad_id());
        at::Tensor condition;
        if (c.max_condition_length > 0) {
            condition = at::randint(3, V, {B, c.max_condition_length}, gen, at::kLong);
            const at::Tensor cl = at::randint(20, 46, {B, 1}, gen, at::kLong);
            condition.masked_fill_(at::arange(c.max_condition_length, at::kLong).unsqueeze(0).ge(cl),
                                   tokenizer.pad_id());
        }
        torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
        net->train();
        using clock = std::chrono::steady_clock;
        double forward = 0, backward = 0, update = 0;
        auto step = [&] {
            const auto t0 = clock::now();
            adam.zero_grad();
            const at::Tensor loss = net->loss({tokens, condition}, gen);
            const auto t1 = clock::now();
            loss.backward();
            const auto t2 = clock::now();
            adam.step();
            const auto t3 = clock::now();
            forward += std::chrono::duration<double>(t1 - t0).count();
            backward += std::chrono::duration<double>(t2 - t1).count();
            update += std::chrono::duration<double>(t3 - t2).count();
        };
        step();  // warm-up
        forward = backward = update = 0;
        for (int64_t i = 0; i < steps; ++i) step();
        const double seconds = forward + backward + update;
        std::printf(
            "%-10s V=%lld dim=%lld layers=%lld heads=%lld ff=%lld L=%lld C=%lld: %lld parameters (%.2f MB "
            "float32), batch %lld: %.2f steps/s (forward %.0f%%, backward %.0f%%, Adam %.0f%%)\n",
            family.c_str(), (long long)V, (long long)c.dim, (long long)c.layers, (long long)c.heads,
            (long long)c.ff_dim, (long long)c.max_length, (long long)c.max_condition_length, (long long)params,
            static_cast<double>(params) * 4.0 / 1e6, (long long)B, static_cast<double>(steps) / seconds,
            100 * forward / seconds, 100 * backward / seconds, 100 * update / seconds);
    }
    return 0;
}
