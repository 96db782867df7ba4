// Fast-dLLM's speed-ups against the plain authors' sampler on one model: each sampler object of CONFIG runs the same
// prompt (a span prefix) to the same length, round after round, the samplers interleaved within a round so that the
// machine's noise falls on all of them alike. Per sampler: network calls, seconds and generated tokens per second per
// sample (the median over the rounds), the generated tokens of the last round, and the share of them equal to the
// first sampler's (the plain one, at temperature 0 the same in every round). With several "devices", each sampler runs
// on each, and the share of its tokens equal to those it wrote on the first device says whether the devices agree
// (scripts/gpu-check.sh). One JSON object on stdout.
//   rudder_decode_bench CONFIG
//   CONFIG: {"model": DIR, "prompt": TEXT, "gen_length": N, "rounds": R, "threads": T, "plugins": DIR,
//            "devices": ["cpu"], "samplers": [{"label": ..., "sampler": {...}, "weights": "stored"|"int8"}, ...]}
//   (a sampler's "weights" is the recipe's: int8 runs the network over int8 matrices; default stored)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>

namespace {
using json = nlohmann::json;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CONFIG.json\n", argv[0]);
        return 2;
    }
    try {
        json config;
        std::ifstream(argv[1]) >> config;
        rudder::set_compute_threads(config.value("threads", 2));
        const std::string dir = config.at("model");
        const std::string prompt = config.at("prompt");
        const int64_t gen_length = config.at("gen_length");
        const int rounds = config.value("rounds", 1);
        rudder::plugins::Registry registry({config.at("plugins").get<std::string>()});
        const int64_t prompt_length =
            static_cast<int64_t>(rudder::load_model(dir, std::nullopt).tokenizer->encode(prompt).size());

        struct Row {
            std::string label, device;
            json sampler;
            std::string weights;
            std::vector<double> seconds;
            int64_t calls = 0, steps = 0;
            int threads = 0;
            std::vector<int64_t> tokens;
        };
        std::vector<Row> rows;
        const std::vector<std::string> devices = config.value("devices", std::vector<std::string>{"cpu"});
        for (const std::string& device : devices)
            for (const json& s : config.at("samplers"))
                rows.push_back({s.at("label"), device, s.at("sampler"), s.value("weights", "stored"), {}, 0, 0, 0, {}});
        for (int round = 0; round < rounds; ++round)
            for (Row& row : rows) {
                const json recipe = {{"model", dir},
                                     {"max_length", prompt_length + gen_length},
                                     {"seed", 1},
                                     {"device", row.device},
                                     {"weights", row.weights},
                                     {"sampler", row.sampler},
                                     {"controllers", {{{"plugin", "span"}, {"params", {{"prefix", prompt}}}}}}};
                rudder::Generator generator(rudder::parse_recipe(recipe.dump(), "."), registry);
                const auto start = std::chrono::steady_clock::now();
                const auto samples = generator.generate();
                row.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
                row.calls = generator.stats().denoiser_calls;
                row.steps = generator.stats().steps;
                row.threads = std::max(row.threads, generator.stats().threads);
                row.tokens = samples.at(0).tokens;
                std::fprintf(stderr, "round %d %-28s %-6s %.2f s, %lld calls\n", round + 1, row.label.c_str(),
                             row.device.c_str(), row.seconds.back(), static_cast<long long>(row.calls));
            }
        json out = {{"model", dir},
                    {"prompt_tokens", prompt_length},
                    {"gen_length", gen_length},
                    {"rounds", rounds},
                    {"samplers", json::array()}};
        const size_t per_device = config.at("samplers").size();
        // The share of the generated tokens of `a` equal to `b`'s.
        const auto same = [&](const Row& a, const Row& b) {
            int64_t n = 0;
            for (int64_t i = prompt_length; i < static_cast<int64_t>(a.tokens.size()); ++i)
                n += a.tokens[static_cast<size_t>(i)] == b.tokens[static_cast<size_t>(i)];
            return static_cast<double>(n) / static_cast<double>(gen_length);
        };
        for (size_t k = 0; k < rows.size(); ++k) {
            const Row& row = rows[k];
            const Row& plain = rows[k - k % per_device];  // the first sampler on this device
            const Row& first_device = rows[k % per_device];
            const double s = median(row.seconds);
            out["samplers"].push_back(
                {{"label", row.label},
                 {"device", row.device},
                 {"sampler", row.sampler},
                 {"weights", row.weights},
                 {"network_calls", row.calls},
                 {"steps", row.steps},
                 {"threads", row.threads},
                 {"seconds_per_sample", s},
                 {"tokens_per_second", static_cast<double>(gen_length) / s},
                 {"speedup", median(plain.seconds) / s},
                 {"same_as_plain", same(row, plain)},
                 {"same_as_first_device", same(row, first_device)},
                 {"generated", std::vector<int64_t>(row.tokens.begin() + prompt_length, row.tokens.end())}});
        }
        std::cout << out.dump(2) << "\n";
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rudder_decode_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
