// A public checkpoint's network at batch 1: the mapped load (time, and resident memory after it, anonymous against
// file-backed), then the forward of a reverse step (the clean-token log-probabilities over every position, all
// masked) repeated, and the peak resident memory. One JSON object on stdout; bench/checkpoint_eager.py runs this
// against the same network in PyTorch eager, interleaved.
// With DIR/reference.safetensors (the fixtures' public-size checkpoints write one: "tokens" and the network's float64
// "logits" from their plain-PyTorch implementation), also the largest difference from it and the share of positions
// whose arg-max is the reference's. WEIGHTS int8 quantises a LLaDA/Dream network's matrices after the load (the
// recipe's "weights": "int8"; the time it takes is quantize_s).
//   rudder_checkpoint_bench DIR [POSITIONS=1024] [REPEATS=3] [WEIGHTS=stored|int8]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include <rudder/nn/bidirectional_llm.hpp>
#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>

namespace {

// A field of /proc/self/status in MB (VmRSS, RssAnon, RssFile, VmHWM).
double status_mb(const std::string& field) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(field + ":", 0) == 0) return std::atof(line.c_str() + field.size() + 1) / 1024.0;
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DIR [POSITIONS] [REPEATS]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const int64_t positions = argc > 2 ? std::atoll(argv[2]) : 1024;
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
    const std::string weights = argc > 4 ? argv[4] : "stored";
    if (weights != "stored" && weights != "int8") {
        std::fprintf(stderr, "rudder_checkpoint_bench: WEIGHTS is stored or int8, not '%s'\n", weights.c_str());
        return 2;
    }
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point since) { return std::chrono::duration<double>(clock::now() - since).count(); };
    nlohmann::json out = {{"positions", positions}, {"threads", at::get_num_threads()}, {"weights", weights}};
    try {
        const nlohmann::json config = rudder::read_json_file(std::filesystem::path(dir) / "config.json");
        c10::InferenceMode inference;
        const std::filesystem::path reference_file = std::filesystem::path(dir) / "reference.safetensors";
        auto run = [&](auto&& load, auto&& step, auto&& logits) {
            auto start = clock::now();
            const auto net = load();
            out["load_s"] = seconds(start);
            out["rss_after_load_mb"] = {{"anon", status_mb("RssAnon")}, {"file", status_mb("RssFile")}};
            if (std::filesystem::exists(reference_file)) {
                const rudder::SafeTensors reference = rudder::load_safetensors(reference_file);
                const at::Tensor mine = logits(net, *reference.find("tokens"));
                out["max_difference_from_reference"] = (mine - *reference.find("logits")).abs().max().item<double>();
                out["reference_max_abs"] = reference.find("logits")->abs().max().item<double>();
                out["argmax_same_as_reference"] =
                    mine.argmax(-1).eq(reference.find("logits")->argmax(-1)).to(at::kDouble).mean().item<double>();
            }
            for (int i = 0; i < repeats; ++i) {
                start = clock::now();
                const at::Tensor logp = step(net);
                out["forward_s"].push_back(seconds(start));
                if (!logp.isfinite().all().item<bool>()) throw std::runtime_error("a non-finite output");
                // The same sum from the eager implementation shows it computed the same network.
                out["checksum"] =
                    logp.narrow(1, 0, std::min<int64_t>(8, positions)).narrow(2, 0, 1000).sum().item<double>();
            }
            out["rss_after_forward_mb"] = {{"anon", status_mb("RssAnon")}, {"file", status_mb("RssFile")}};
        };
        if (rudder::nn::is_dit_checkpoint_config(config)) {
            if (weights != "stored") throw std::runtime_error("int8 weights apply to LLaDA and Dream checkpoints");
            run([&] { return rudder::nn::DitNetwork::load(dir); },
                [&](const rudder::nn::DitNetwork& net) {
                    const at::Tensor tokens = at::full({1, positions}, net.config().mask_id(), at::kLong);
                    return net.clean_log_probs(tokens, at::full({1}, net.sigma_at(0.5), at::kFloat));
                },
                [](const rudder::nn::DitNetwork& net, const at::Tensor& tokens) {
                    return net.forward(tokens, at::zeros({tokens.size(0)}, at::kFloat));
                });
        } else if (rudder::nn::is_bidirectional_llm_config(config)) {
            run(
                [&] {
                    rudder::nn::BidirectionalLlm net = rudder::nn::BidirectionalLlm::load(dir);
                    if (weights == "int8") {
                        const auto start = clock::now();
                        net.quantize_int8();
                        out["quantize_s"] = seconds(start);
                    }
                    return net;
                },
                [&](const rudder::nn::BidirectionalLlm& net) {
                    const at::Tensor tokens = at::full({1, positions}, net.config().mask_id, at::kLong);
                    return net.clean_log_probs(tokens, net.config().vocab_size);
                },
                [](const rudder::nn::BidirectionalLlm& net, const at::Tensor& tokens) { return net.forward(tokens); });
        } else {
            throw std::runtime_error(dir + " is neither an MDLM/SEDD nor a LLaDA/Dream checkpoint");
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rudder_checkpoint_bench: %s\n", e.what());
        return 1;
    }
    out["peak_rss_mb"] = status_mb("VmHWM");
    std::cout << out.dump() << "\n";
    return 0;
}
