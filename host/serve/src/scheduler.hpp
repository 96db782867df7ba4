// Who runs when: admitted requests' jobs, the bounded queue they wait in, and the workers that take them, several
// of one recipe together when they may share a run.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <rudder/runtime/generator.hpp>
#include <rudder/serve/server_options.hpp>

#include "generator_cache.hpp"
#include "job_events.hpp"
#include "metrics.hpp"

namespace rudder::serve {

using Clock = std::chrono::steady_clock;

// A request's generation once admitted: what it asks for, and the events its run delivers to the request's thread.
struct Job {
    using Event = JobEvent;        // steps (streamed requests only), samples, then done or an error
    std::string key;               // requests with the same key can share a generator and a run
    JsonDocument recipe;           // the request's recipe, overrides applied, keys in the client's order
    nlohmann::ordered_json order;  // unused, always null (GenerateRequest::order)
    std::filesystem::path base_dir;
    // Built to check the request (a recipe no generator was built for before), else none: the run takes a cached
    // generator of its key or builds one. A shared run uses the first job's; the others go back to the cache, and
    // so does the generator of a job that leaves the queue before its run.
    std::unique_ptr<Generator> generator;
    int64_t samples = 1;
    std::optional<uint64_t> seed;  // fixed by the request or its recipe
    bool shares = false;           // may share a run: no fixed seed, and a recipe whose runs batch well
    bool streams = false;
    Clock::time_point deadline;   // the request's time limit, which a load for its run keeps to as well
    std::string samples_pointer;  // where the request sets its samples, for an answer about them
    // The request's thread has stopped listening (its client went away, or its time ran out): a run stops serving
    // it, and is cancelled once it serves nobody.
    std::atomic<bool> abandoned{false};

    // From the run's thread.
    void deliver(Event event);
    // From the request's thread: the next event, or none if `deadline` passes first.
    std::optional<Event> next(Clock::time_point deadline);

private:
    std::mutex mutex_;
    std::condition_variable arrived_;
    std::deque<Event> events_;
};

// Who runs when: `parallel` workers, each running one reverse loop at a time for the job at the head of the queue
// and, when that job may share, the waiting jobs with the same key that may (up to `batch_samples` samples in all).
// Up to `queue_limit` requests wait beyond the idle workers; none are admitted once draining.
class Scheduler {
public:
    enum class Entry { admitted, full, draining };
    using Run = std::function<void(std::vector<std::shared_ptr<Job>>&)>;

    // `cache` keeps the generators of jobs that leave the queue before their run.
    Scheduler(const ServerOptions& options, Metrics& metrics, GeneratorCache& cache)
        : options_(options), metrics_(metrics), cache_(cache) {}
    ~Scheduler() { stop_workers(); }

    void start_workers(const Run& run);

    // An admitted request's place, given back when destroyed: out of the queue if its job is still there, and its
    // job abandoned if a run still serves it.
    class Place {
    public:
        explicit Place(Scheduler& scheduler) : scheduler_(scheduler) {}
        ~Place() { scheduler_.leave(job_); }
        Place(const Place&) = delete;
        Place& operator=(const Place&) = delete;
        void submit(std::shared_ptr<Job> job) {
            job_ = job;
            scheduler_.submit(std::move(job));
        }

    private:
        Scheduler& scheduler_;
        std::shared_ptr<Job> job_;
    };

    // A place, or (null) why there is none.
    std::unique_ptr<Place> admit(Entry& entry);
    void drain();
    bool draining() const;
    // Whether no admitted request is waiting to be answered.
    bool idle() const;
    // Until every admitted request has been answered.
    void wait_idle();
    void stop_workers();
    // Called by a run before it delivers its last events, so a client that has them finds the worker free.
    void run_ended(size_t jobs);
    // Jobs a worker took but will not run now: first in line again, in their order (those abandoned meanwhile
    // are dropped).
    void put_back(const std::vector<std::shared_ptr<Job>>& jobs);

private:
    void submit(std::shared_ptr<Job> job);
    void leave(const std::shared_ptr<Job>& job);
    void work(const Run& run);
    // The jobs of the next run, out of the queue (which holds one or more; the lock held): its head and, when that
    // may share, the waiting jobs that may share with it.
    std::vector<std::shared_ptr<Job>> take_jobs();
    void update_gauges();

    const ServerOptions& options_;
    Metrics& metrics_;
    GeneratorCache& cache_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::shared_ptr<Job>> queue_;
    int64_t waiting_ = 0;  // admitted, not yet in a run
    int64_t running_ = 0;  // in a run
    int64_t open_ = 0;     // admitted, not yet answered
    int64_t busy_workers_ = 0;
    bool draining_ = false, stopping_ = false;
    std::vector<std::thread> workers_;
};

}  // namespace rudder::serve
