#include "scheduler.hpp"

#include "memory_release.hpp"

#include <algorithm>
#include <iterator>

namespace rudder::serve {

void Job::deliver(Event event) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        events_.push_back(std::move(event));
    }
    arrived_.notify_one();
}

std::optional<Job::Event> Job::next(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!arrived_.wait_until(lock, deadline, [&] { return !events_.empty(); })) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
}

void Scheduler::start_workers(const Run& run) {
    for (int64_t i = 0; i < options_.parallel; ++i) workers_.emplace_back([this, run] { work(run); });
}

std::unique_ptr<Scheduler::Place> Scheduler::admit(Entry& entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t idle_workers = options_.parallel - busy_workers_;
    entry = draining_                                         ? Entry::draining
            : waiting_ >= options_.queue_limit + idle_workers ? Entry::full
                                                              : Entry::admitted;
    if (entry != Entry::admitted) return nullptr;
    ++waiting_;
    ++open_;
    update_gauges();
    return std::make_unique<Place>(*this);
}

void Scheduler::drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    changed_.notify_all();
}

bool Scheduler::draining() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return draining_;
}

bool Scheduler::idle() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return open_ == 0;
}

void Scheduler::wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return open_ == 0; });
}

void Scheduler::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        changed_.notify_all();
    }
    for (auto& worker : workers_)
        if (worker.joinable()) worker.join();
}

void Scheduler::run_ended(size_t jobs) {
    std::lock_guard<std::mutex> lock(mutex_);
    --busy_workers_;
    running_ -= static_cast<int64_t>(jobs);
    update_gauges();
}

void Scheduler::put_back(const std::vector<std::shared_ptr<Job>>& jobs) {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ -= static_cast<int64_t>(jobs.size());
    auto at = queue_.begin();
    for (const auto& job : jobs) {
        if (job->abandoned) continue;
        at = std::next(queue_.insert(at, job));
        ++waiting_;
    }
    update_gauges();
    changed_.notify_all();
}

void Scheduler::submit(std::shared_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
    update_gauges();
    changed_.notify_all();
}

void Scheduler::leave(const std::shared_ptr<Job>& job) {
    std::unique_ptr<Generator> unused;  // built to check a job that leaves before its run: kept for the next
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (job) job->abandoned = true;
        const auto queued = job ? std::find(queue_.begin(), queue_.end(), job) : queue_.end();
        if (!job || queued != queue_.end()) --waiting_;  // not yet submitted, or still waiting for a run
        if (queued != queue_.end()) {
            unused = std::move(job->generator);  // no worker has taken the job: nobody else touches it
            queue_.erase(queued);
        }
        --open_;
        update_gauges();
        changed_.notify_all();
    }
    if (unused) cache_.give_back(job->key, std::move(unused));
}

std::vector<std::shared_ptr<Job>> Scheduler::take_jobs() {
    std::vector<std::shared_ptr<Job>> jobs;
    jobs.push_back(queue_.front());
    queue_.pop_front();
    int64_t samples = jobs[0]->samples;
    if (jobs[0]->shares)
        for (auto it = queue_.begin(); it != queue_.end();) {
            const Job& j = **it;
            if (j.key == jobs[0]->key && j.shares && samples + j.samples <= options_.batch_samples) {
                samples += j.samples;
                jobs.push_back(*it);
                it = queue_.erase(it);
            } else {
                ++it;
            }
        }
    waiting_ -= static_cast<int64_t>(jobs.size());
    running_ += static_cast<int64_t>(jobs.size());
    ++busy_workers_;
    update_gauges();
    return jobs;
}

void Scheduler::work(const Run& run) {
    for (;;) {
        std::vector<std::shared_ptr<Job>> jobs;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;
            jobs = take_jobs();
        }
        run(jobs);
        jobs.clear();
        release_thread_cache();
    }
}

void Scheduler::update_gauges() {
    // In line only once submitted: requests are lined up in the order their recipes finished loading.
    metrics_.waiting.Set(static_cast<double>(queue_.size()));
    metrics_.preparing.Set(static_cast<double>(waiting_ - static_cast<int64_t>(queue_.size())));
    metrics_.running.Set(static_cast<double>(running_));
}

}  // namespace rudder::serve
