#include "job_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

namespace rudder::serve {

using json = nlohmann::json;

void JobRunner::run(std::vector<std::shared_ptr<Job>>& jobs) {
    std::unique_ptr<Generator> generator = std::move(jobs[0]->generator);
    for (size_t i = 1; i < jobs.size(); ++i) generators_.cache.give_back(jobs[i]->key, std::move(jobs[i]->generator));
    if (!generator) generator = generators_.cache.take(jobs[0]->key);
    if (!generator) {
        // A recipe that passed every check when a generator was last built for it; if it no longer does (a model
        // or plugin file changed), every job hears why.
        try {
            GenerateRequest request;
            request.recipe = jobs[0]->recipe;
            request.order = jobs[0]->order;
            request.base_dir = jobs[0]->base_dir;
            int64_t samples = 0;
            // The load serves every job of the run: it may go on until the last of them has to be answered.
            const auto deadline =
                std::max_element(jobs.begin(), jobs.end(),
                                 [](const auto& a, const auto& b) { return a->deadline < b->deadline; })
                    ->get()
                    ->deadline;
            generator = generators_.load_before(request, jobs[0]->key, &samples, false, deadline);
        } catch (const RequestError& e) {
            std::string message = e.message;
            for (const auto& issue : e.issues) message += "; " + issue.pointer + ": " + issue.message;
            scheduler_.run_ended(jobs.size());
            // Its load running past the jobs' deadlines is a timeout (504), not the server's failure.
            const RequestError error{e.status == 504 ? 504 : 500, message, {}};
            for (auto& job : jobs) job->deliver(ErrorEvent{error});
            return;
        }
    }
    // Shared rows past the recipe's memory limit: the last jobs wait again, first in line, for the next run.
    int64_t total = 0;
    for (const auto& job : jobs) total += job->samples;
    std::vector<std::shared_ptr<Job>> later;
    while (jobs.size() > 1 && !generator->fits_memory_limit(total)) {
        total -= jobs.back()->samples;
        later.insert(later.begin(), jobs.back());
        jobs.pop_back();
    }
    if (!later.empty()) scheduler_.put_back(later);
    // One request's samples past the limit now (what the process holds has grown since its check): the request's
    // problem, answered 400 at its samples, as the check would have (generate() would refuse it with no pointer).
    const Recipe& recipe = generator->recipe();
    if (std::min(recipe.batch_size, total) > std::min(recipe.batch_size, recipe.samples) &&
        !generator->fits_memory_limit(total)) {
        generators_.cache.give_back(jobs[0]->key, std::move(generator));
        scheduler_.run_ended(jobs.size());
        jobs[0]->deliver(ErrorEvent{
            {400,
             "invalid request",
             {{jobs[0]->samples_pointer, "a batch of " + std::to_string(std::min(recipe.batch_size, total)) +
                                             " samples of this recipe is over this server's memory limit for a "
                                             "request now; ask for fewer samples"}}}});
        return;
    }
    run_one(std::move(generator), jobs);
}

void JobRunner::run_one(std::unique_ptr<Generator> generator, std::vector<std::shared_ptr<Job>>& jobs) {
    std::vector<int64_t> first(jobs.size());  // each job's first row in the run
    int64_t total = 0;
    bool streams = false;
    for (size_t i = 0; i < jobs.size(); ++i) {
        first[i] = total;
        total += jobs[i]->samples;
        streams = streams || jobs[i]->streams;
    }
    const uint64_t seed = jobs[0]->seed ? *jobs[0]->seed : std::random_device{}() & 0x7fffffffu;
    const auto job_of = [&](int64_t row) {
        return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), row) - first.begin() - 1);
    };
    metrics_.runs.Increment();
    std::string error;
    bool finished = false;
    try {
        generator->generate(
            [&](const Progress& p) {
                metrics_.steps.Increment();
                if (std::all_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->abandoned.load(); }))
                    return false;
                if (!streams) return true;
                const std::vector<std::string> texts = p.current_texts();  // rows samples_done.. of the run
                const int64_t rows = static_cast<int64_t>(texts.size());
                for (size_t i = 0; i < jobs.size(); ++i) {
                    if (!jobs[i]->streams || jobs[i]->abandoned) continue;
                    const int64_t begin = std::max(first[i], p.samples_done);
                    const int64_t end = std::min(first[i] + jobs[i]->samples, p.samples_done + rows);
                    if (begin >= end) continue;  // none of its rows in this batch
                    StepEvent step;
                    step.batch = p.batch;
                    step.batches = p.batches;
                    step.step = p.step;
                    step.steps = p.steps;
                    step.t = std::round(p.t * 1e9) / 1e9;  // as the schedule means it: 0.45, not 0.44999999999999996
                    step.first = begin - first[i];
                    step.texts.assign(texts.begin() + (begin - p.samples_done), texts.begin() + (end - p.samples_done));
                    jobs[i]->deliver(std::move(step));
                }
                return true;
            },
            [&](const SampleResult& s) {
                metrics_.samples.Increment();
                const size_t i = job_of(s.index);
                json sample = sample_json(s);
                sample["index"] = s.index - first[i];
                jobs[i]->deliver(SampleEvent{std::move(sample)});
            },
            RunOverrides{total, seed});
        finished = true;
    } catch (const Cancelled&) {
        error = "the generation was cancelled";  // every job abandoned: nobody listens
    } catch (const std::exception& e) {
        error = e.what();
    }
    // A generator whose run did not finish may hold a controller's failed state: it is not reused.
    if (finished) generators_.cache.give_back(jobs[0]->key, std::move(generator));
    scheduler_.run_ended(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (!finished) {
            jobs[i]->deliver(ErrorEvent{{500, error, {}}});
            continue;
        }
        jobs[i]->deliver(
            DoneEvent{{{"seed", seed}, {"samples", total}, {"requests", jobs.size()}, {"first", first[i]}}});
    }
}

}  // namespace rudder::serve
