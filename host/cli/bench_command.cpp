
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <rudder/base/output_file.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/runtime/generator.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

struct BenchOptions {
    std::vector<std::string> models{"e2e-continuous", "e2e-discrete"};  // bundled names or directories
    std::vector<int64_t> batch_sizes{1, 16, 64};
    int64_t steps = 200;       // reverse steps per sample
    int64_t min_samples = 16;  // samples per measurement: at least this many, and whole batches
    bool as_json = false;
};

using json = nlohmann::json;

struct Measurement {
    std::string model, family, sampler;
    int64_t batch_size = 0, samples = 0, steps = 0, denoiser_calls = 0;
    int threads = 0;  // the most compute threads the run used
    double seconds = 0;
    double samples_per_second() const { return static_cast<double>(samples) / seconds; }
    // Wall time of one reverse step of one batch.
    double ms_per_step() const {
        const int64_t batches = (samples + batch_size - 1) / batch_size;
        return 1e3 * seconds / static_cast<double>(batches * steps);
    }
};

Generator make_generator(const std::string& model, int64_t batch_size, int64_t samples, int64_t steps,
                         plugins::Registry& registry) {
    const json recipe = {{"model", model},
                         {"sampler", {{"steps", steps}}},
                         {"samples", samples},
                         {"batch_size", batch_size},
                         {"seed", 0}};
    return Generator(parse_recipe(recipe.dump(), std::filesystem::current_path()), registry);
}

// Generates unconditional samples from each model at each batch size and prints samples/s and ms per step.
// Returns the process exit code.
int run_bench(const BenchOptions& options) {
    plugins::Registry registry = plugin_registry();
    std::vector<Measurement> rows;
    if (!options.as_json)
        std::fprintf(results_stream(), "%-16s %-10s %-8s %6s %8s %8s %10s %10s %12s\n", "model", "family", "sampler",
                     "batch", "samples", "threads", "seconds", "samples/s", "ms/step");
    for (const auto& model : options.models) {
        // One short untimed run first: the first call into a network pays one-time setup (allocator, kernels).
        make_generator(model, 1, 1, 2, registry).generate();
        for (const int64_t batch : options.batch_sizes) {
            const int64_t samples = (std::max(batch, options.min_samples) + batch - 1) / batch * batch;
            Generator generator = make_generator(model, batch, samples, options.steps, registry);
            const auto start = std::chrono::steady_clock::now();
            generator.generate();
            Measurement m;
            m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            m.model = generator.model().name;
            m.family = family_name(generator.model().family);
            m.sampler = generator.recipe().sampler.name;  // the model's recommended one when it has one
            m.batch_size = batch;
            m.samples = samples;
            m.steps = options.steps;
            m.denoiser_calls = generator.stats().denoiser_calls;
            m.threads = generator.stats().threads;
            if (!options.as_json)
                std::fprintf(results_stream(), "%-16s %-10s %-8s %6lld %8lld %8d %10.2f %10.2f %12.2f\n",
                             m.model.c_str(), m.family.c_str(), m.sampler.c_str(), static_cast<long long>(batch),
                             static_cast<long long>(samples), m.threads, m.seconds, m.samples_per_second(),
                             m.ms_per_step());
            std::fflush(results_stream());
            rows.push_back(m);
        }
    }
    if (options.as_json) {
        json out = {
            {"threads_setting", compute_threads_setting()}, {"steps", options.steps}, {"results", json::array()}};
        for (const auto& m : rows)
            out["results"].push_back({{"model", m.model},
                                      {"family", m.family},
                                      {"sampler", m.sampler},
                                      {"batch_size", m.batch_size},
                                      {"samples", m.samples},
                                      {"threads", m.threads},
                                      {"seconds", m.seconds},
                                      {"samples_per_second", m.samples_per_second()},
                                      {"ms_per_step", m.ms_per_step()},
                                      {"denoiser_calls", m.denoiser_calls}});
        std::cout << out.dump(2) << "\n";
    } else {
        std::fprintf(
            results_stream(),
            "(%lld reverse steps per sample, unconditional, no controllers; threads: the most a run used, of %s)\n",
            static_cast<long long>(options.steps),
            compute_threads_setting() > 0 ? ("at most " + std::to_string(compute_threads_setting())).c_str()
                                          : ("every core (" + std::to_string(available_cores()) + ")").c_str());
    }
    return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Commands& commands) {
    auto o = std::make_shared<BenchOptions>();
    auto* bench = app.add_subcommand("bench", "Sampling throughput (samples/s) of models at several batch sizes");
    bench->add_option("-m,--model", o->models,
                      "Models: bundled names or directories (default: e2e-continuous e2e-discrete)");
    bench->add_option("-b,--batch-sizes", o->batch_sizes, "Batch sizes (default 1 16 64)")
        ->check(CLI::Range(1, 4096))
        ->delimiter(',');
    bench->add_option("--steps", o->steps, "Reverse steps per sample (default 200)")->check(CLI::Range(1, 100000));
    bench->add_option("--min-samples", o->min_samples, "Samples per measurement, at least (default 16)")
        ->check(CLI::Range(1, 100000));
    commands.add_threads_option(bench);
    bench->add_flag("--json", o->as_json, "Machine-readable output");
    commands.list.push_back({bench, [o] { return run_bench(*o); }});
}

}  // namespace rudder::cli
