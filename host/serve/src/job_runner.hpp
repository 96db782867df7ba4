// The runs the workers make of the jobs they take: one reverse loop serving one job, or several of one recipe.
#pragma once

#include <memory>
#include <vector>

#include <rudder/runtime/generator.hpp>

#include "generator_cache.hpp"
#include "metrics.hpp"
#include "scheduler.hpp"

namespace rudder::serve {

class JobRunner {
public:
    JobRunner(GeneratorLoader& generators, Scheduler& scheduler, Metrics& metrics)
        : generators_(generators), scheduler_(scheduler), metrics_(metrics) {}

    // The jobs a worker took (one, or several of one recipe that may share): one run for them all, or for as many
    // as the recipe's memory limit allows. Runs on the worker's thread.
    void run(std::vector<std::shared_ptr<Job>>& jobs);

private:
    // One reverse loop for `jobs`: their samples are consecutive rows of one run, in the order of `jobs`.
    void run_one(std::unique_ptr<Generator> generator, std::vector<std::shared_ptr<Job>>& jobs);

    GeneratorLoader& generators_;
    Scheduler& scheduler_;
    Metrics& metrics_;
};

}  // namespace rudder::serve
