// rudder serve over cpp-httplib (Debian's libcpp-httplib: a thread per connection from a pool, chunked responses
// for Server-Sent Events, no other dependency to build) with prometheus-cpp's registry and text format for /metrics.
#include <rudder/serve/server.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/nn/schedule.hpp>

#include "playground_page.hpp"

namespace rudder::serve {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The counters a scrape of /metrics reads.
struct Metrics {
    prometheus::Registry registry;
    prometheus::Family<prometheus::Counter>& requests =
        prometheus::BuildCounter().Name("rudder_http_requests_total").Help("HTTP requests answered, by path and status").Register(registry);
    prometheus::Family<prometheus::Counter>& failures =
        prometheus::BuildCounter().Name("rudder_generation_failures_total").Help("Generations that did not finish, by cause").Register(registry);
    prometheus::Gauge& waiting =
        prometheus::BuildGauge().Name("rudder_queue_length").Help("Generations in line for a run, their recipe checked and loaded").Register(registry).Add({});
    prometheus::Gauge& preparing =
        prometheus::BuildGauge().Name("rudder_generations_preparing").Help("Generations admitted whose recipe is still being checked or loaded").Register(registry).Add({});
    prometheus::Gauge& running =
        prometheus::BuildGauge().Name("rudder_generations_running").Help("Generations running").Register(registry).Add({});
    prometheus::Counter& steps =
        prometheus::BuildCounter().Name("rudder_reverse_steps_total").Help("Reverse steps taken, all generations").Register(registry).Add({});
    prometheus::Counter& samples =
        prometheus::BuildCounter().Name("rudder_samples_total").Help("Samples generated").Register(registry).Add({});
    prometheus::Counter& runs =
        prometheus::BuildCounter().Name("rudder_runs_total").Help("Reverse loops run; one run may serve several requests").Register(registry).Add({});
    prometheus::Counter& loads =
        prometheus::BuildCounter().Name("rudder_generator_loads_total").Help("Generators built (a recipe's model and plugins loaded) rather than reused").Register(registry).Add({});
    prometheus::Histogram& latency =
        prometheus::BuildHistogram().Name("rudder_generation_seconds").Help("Time from a generation's arrival to its last sample")
            .Register(registry).Add({}, prometheus::Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});

    void answered(const std::string& path, int status) { requests.Add({{"path", path}, {"code", std::to_string(status)}}).Increment(); }
    void failed(const std::string& cause) { failures.Add({{"cause", cause}}).Increment(); }
};

// A request's generation once admitted: what it asks for, and the events its run delivers to the request's thread.
struct Job {
    struct Event {
        std::string name;  // "step" (streamed requests only), "sample", then "done" or "error"
        json data;
    };
    std::string key;                       // requests with the same key can share a generator and a run
    json recipe;                           // the request's recipe, overrides applied, and where its paths resolve
    fs::path base_dir;
    // Built to check the request (a recipe no generator was built for before), else none: the run takes a cached
    // generator of its key or builds one. A shared run uses the first job's; the others go back to the cache.
    std::unique_ptr<Generator> generator;
    int64_t samples = 1;
    std::optional<uint64_t> seed;          // fixed by the request or its recipe
    bool shares = false;                   // may share a run: no fixed seed, and a recipe whose runs batch well
    bool streams = false;
    // The request's thread has stopped listening (its client went away, or its time ran out): a run stops serving
    // it, and is cancelled once it serves nobody.
    std::atomic<bool> abandoned{false};

    // From the run's thread.
    void deliver(std::string name, json data) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            events_.push_back({std::move(name), std::move(data)});
        }
        arrived_.notify_one();
    }
    // From the request's thread: the next event, or none if `deadline` passes first.
    std::optional<Event> next(Clock::time_point deadline) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!arrived_.wait_until(lock, deadline, [&] { return !events_.empty(); })) return std::nullopt;
        Event e = std::move(events_.front());
        events_.pop_front();
        return e;
    }

private:
    std::mutex mutex_;
    std::condition_variable arrived_;
    std::deque<Event> events_;
};

// Generators kept between requests, so a recipe's model and controllers load once; beyond `capacity` the least
// recently used is dropped. A generator whose run failed or was cancelled is not kept. The cache also remembers
// the keys generators were built for (their recipes passed every check), so a request of a known recipe is not
// checked by building another generator while it waits.
class GeneratorCache {
public:
    explicit GeneratorCache(int64_t capacity) : capacity_(static_cast<size_t>(capacity)) {}
    // For a known key, whether its runs batch well (Generator::batching_pays); nothing for a key not known.
    std::optional<bool> known(const std::string& key) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [k, batching_pays] : known_)
            if (k == key) return batching_pays;
        return std::nullopt;
    }
    void remember(const std::string& key, const Generator& generator) {
        std::lock_guard<std::mutex> lock(mutex_);
        known_.remove_if([&](const auto& entry) { return entry.first == key; });
        known_.emplace_front(key, generator.batching_pays());
        if (known_.size() > kKnownKeys) known_.pop_back();
    }
    std::unique_ptr<Generator> take(const std::string& key) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = idle_.begin(); it != idle_.end(); ++it)
            if (it->first == key) {
                auto generator = std::move(it->second);
                idle_.erase(it);
                return generator;
            }
        return nullptr;
    }
    void give_back(const std::string& key, std::unique_ptr<Generator> generator) {
        std::vector<std::unique_ptr<Generator>> dropped;  // unloaded outside the lock
        std::lock_guard<std::mutex> lock(mutex_);
        if (generator) idle_.emplace_front(key, std::move(generator));
        while (idle_.size() > capacity_) {
            dropped.push_back(std::move(idle_.back().second));
            idle_.pop_back();
        }
    }

private:
    static constexpr size_t kKnownKeys = 256;
    const size_t capacity_;
    std::mutex mutex_;
    std::list<std::pair<std::string, std::unique_ptr<Generator>>> idle_;  // most recently used first
    std::list<std::pair<std::string, bool>> known_;                       // most recently built first
};

// Who runs when: `parallel` workers, each running one reverse loop at a time for the job at the head of the queue
// and, when that job may share, the waiting jobs with the same key that may (up to `batch_samples` samples in all).
// Up to `queue_limit` requests wait beyond the idle workers; none are admitted once draining.
class Scheduler {
public:
    enum class Entry { admitted, full, draining };
    using Run = std::function<void(std::vector<std::shared_ptr<Job>>&)>;

    Scheduler(const ServerOptions& options, Metrics& metrics) : options_(options), metrics_(metrics) {}
    ~Scheduler() { stop_workers(); }

    void start_workers(const Run& run) {
        for (int64_t i = 0; i < options_.parallel; ++i) workers_.emplace_back([this, run] { work(run); });
    }

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
    std::unique_ptr<Place> admit(Entry& entry) {
        std::lock_guard<std::mutex> lock(mutex_);
        const int64_t idle_workers = options_.parallel - busy_workers_;
        entry = draining_ ? Entry::draining : waiting_ >= options_.queue_limit + idle_workers ? Entry::full : Entry::admitted;
        if (entry != Entry::admitted) return nullptr;
        ++waiting_;
        ++open_;
        update_gauges();
        return std::make_unique<Place>(*this);
    }
    void drain() {
        std::lock_guard<std::mutex> lock(mutex_);
        draining_ = true;
        changed_.notify_all();
    }
    bool draining() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return draining_;
    }
    // Until every admitted request has been answered.
    void wait_idle() {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return open_ == 0; });
    }
    void stop_workers() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
            changed_.notify_all();
        }
        for (auto& worker : workers_)
            if (worker.joinable()) worker.join();
    }
    // Called by a run before it delivers its last events, so a client that has them finds the worker free.
    void run_ended(size_t jobs) {
        std::lock_guard<std::mutex> lock(mutex_);
        --busy_workers_;
        running_ -= static_cast<int64_t>(jobs);
        update_gauges();
    }
    // Jobs a worker took but will not run now: first in line again, in their order (those abandoned meanwhile
    // are dropped).
    void put_back(const std::vector<std::shared_ptr<Job>>& jobs) {
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

private:
    void submit(std::shared_ptr<Job> job) {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(job));
        update_gauges();
        changed_.notify_all();
    }
    void leave(const std::shared_ptr<Job>& job) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (job) job->abandoned = true;
        const auto queued = job ? std::find(queue_.begin(), queue_.end(), job) : queue_.end();
        if (!job || queued != queue_.end()) --waiting_;  // not yet submitted, or still waiting for a run
        if (queued != queue_.end()) queue_.erase(queued);
        --open_;
        update_gauges();
        changed_.notify_all();
    }
    void work(const Run& run) {
        for (;;) {
            std::vector<std::shared_ptr<Job>> jobs;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
                if (queue_.empty()) return;
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
            }
            run(jobs);
        }
    }
    void update_gauges() {
        // In line only once submitted: requests are lined up in the order their recipes finished loading.
        metrics_.waiting.Set(static_cast<double>(queue_.size()));
        metrics_.preparing.Set(static_cast<double>(waiting_ - static_cast<int64_t>(queue_.size())));
        metrics_.running.Set(static_cast<double>(running_));
    }

    const ServerOptions& options_;
    Metrics& metrics_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::shared_ptr<Job>> queue_;
    int64_t waiting_ = 0;       // admitted, not yet in a run
    int64_t running_ = 0;       // in a run
    int64_t open_ = 0;          // admitted, not yet answered
    int64_t busy_workers_ = 0;
    bool draining_ = false, stopping_ = false;
    std::vector<std::thread> workers_;
};

// A request that cannot be served, with the status to answer and, for recipe problems, their pointers.
struct RequestError {
    int status;
    std::string message;
    std::vector<RecipeIssue> issues;
};

json error_json(const RequestError& e) {
    json j = {{"error", e.message}};
    if (!e.issues.empty()) {
        j["issues"] = json::array();
        for (const auto& issue : e.issues) j["issues"].push_back({{"pointer", issue.pointer}, {"message", issue.message}});
    }
    return j;
}

json read_json_file(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw RequestError{500, "the server cannot read its recipe '" + file.string() + "'", {}};
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw RequestError{500, "the server's recipe '" + file.string() + "' is not valid JSON: " + e.what(), {}};
    }
}

// What a POST /v1/generate or /v1/validate body asks for: a recipe with the request's overrides applied.
struct GenerateRequest {
    json recipe;
    fs::path base_dir = ".";
    std::string pointer_prefix;  // "/recipe" for an inline recipe: where its problems are in the request
    bool stream = false;
    std::optional<uint64_t> seed;  // the request's, else the recipe's; none: each run draws one
};

// Requests whose recipes differ only in seed and samples share generators, and runs.
std::string share_key(const GenerateRequest& request) {
    json shape = request.recipe;
    shape.erase("seed");
    shape.erase("samples");
    return request.base_dir.string() + "\n" + shape.dump();
}

GenerateRequest read_request(const std::string& body, const ServerOptions& options) {
    json j;
    try {
        j = json_input::parse(body);
    } catch (const std::exception& e) {
        throw RequestError{400, std::string("the request body is not valid JSON: ") + e.what(), {}};
    }
    std::vector<RecipeIssue> issues;
    json_input::ObjectReader r(j, "", issues);
    if (!r.is_object()) throw RequestError{400, "the request body must be a JSON object", {}};
    GenerateRequest out;
    const json* recipe = r.any("recipe", json_input::kRequired, "a recipe object, or the name of one the server has");
    if (recipe != nullptr && recipe->is_object()) {
        out.recipe = *recipe;
        out.pointer_prefix = "/recipe";
    } else if (recipe != nullptr && recipe->is_string()) {
        const auto found = options.recipes.find(recipe->get<std::string>());
        if (found == options.recipes.end()) {
            std::string known;
            for (const auto& [name, file] : options.recipes) known += (known.empty() ? "" : ", ") + name;
            r.issue("recipe", "no recipe named '" + recipe->get<std::string>() + "' on this server (" +
                                  (known.empty() ? std::string("it was started with none") : "it has: " + known) + ")");
        } else {
            out.recipe = read_json_file(found->second);
            out.base_dir = found->second.parent_path();
        }
    } else if (recipe != nullptr) {
        r.issue("recipe", "expected a recipe object, or the name of one the server has");
    }
    const auto seed = r.integer("seed", 0, INT64_MAX);
    const auto samples = r.integer("samples", 1, options.limits.max_samples);
    const auto max_length = r.integer("max_length", 1, options.limits.max_length);
    const json params = r.object("params").value_or(json::object());
    out.stream = r.boolean("stream").value_or(false);
    r.reject_unknown_keys();
    if (out.recipe.is_object()) {
        if (seed) out.recipe["seed"] = *seed;
        // A recipe's seed that is not a valid one is an issue parse_recipe reports.
        if (out.recipe.contains("seed") && out.recipe["seed"].is_number_integer() && out.recipe["seed"].get<int64_t>() >= 0)
            out.seed = out.recipe["seed"].get<uint64_t>();
        if (samples) out.recipe["samples"] = *samples;
        if (max_length) out.recipe["max_length"] = *max_length;
        // Params by controller name (or plugin), merged over the recipe's.
        for (const auto& [name, value] : params.items()) {
            bool found = false;
            if (out.recipe.contains("controllers") && out.recipe["controllers"].is_array())
                for (auto& c : out.recipe["controllers"]) {
                    // A controller is named by its "name", else its "plugin"; a malformed one is the recipe's issue.
                    const char* key = c.is_object() && c.contains("name") ? "name" : "plugin";
                    if (!c.is_object() || !c.contains(key) || c[key] != name) continue;
                    found = true;
                    if (!value.is_object()) continue;
                    if (!c.contains("params") || !c["params"].is_object()) c["params"] = json::object();
                    c["params"].update(value);
                }
            const std::string pointer = "/params/" + name;
            if (!found) issues.push_back({pointer, "the recipe has no controller named '" + name + "'"});
            else if (!value.is_object()) issues.push_back({pointer, "expected an object of params"});
        }
    }
    if (!issues.empty()) throw RequestError{400, "invalid request", issues};
    return out;
}

}  // namespace

struct Server::State {
    explicit State(ServerOptions o)
        : options(std::move(o)),
          model_path(options.model_path.empty() ? default_model_path() : options.model_path),
          registry(options.plugin_path.empty() ? plugins::Registry::default_search_path() : options.plugin_path),
          cache(options.cached_generators),
          scheduler(options, metrics) {}

    ServerOptions options;
    std::vector<fs::path> model_path;
    plugins::Registry registry;  // scanned once, shared by every request (it locks itself)
    Metrics metrics;
    GeneratorCache cache;
    Scheduler scheduler;
    httplib::Server http;
    int port = -1;
    std::thread stopper;
    std::once_flag stop_once;

    // The recipe of a request, checked and loaded: every problem (the request's, the recipe's, its model's and
    // controllers') at once, with pointers into the request. A recipe that differs from a cached generator's only
    // in seed and samples (which parse_recipe checks) takes that generator; with `unless_known`, a recipe a
    // generator was built for before gets none (it passed every check then). `samples`: the recipe's.
    std::unique_ptr<Generator> generator_for(const GenerateRequest& request, const std::string& key, int64_t* samples,
                                             bool unless_known = false) {
        std::vector<RecipeIssue> issues;
        const auto prefixed = [&](std::vector<RecipeIssue> found) {
            for (auto& issue : found) issue.pointer = request.pointer_prefix + issue.pointer;
            return found;
        };
        try {
            Recipe recipe = parse_recipe(request.recipe.dump(), request.base_dir, options.limits, &issues);
            *samples = recipe.samples;
            if (issues.empty()) {
                if (unless_known && cache.known(key).has_value()) return nullptr;
                if (auto cached = cache.take(key)) return cached;
            }
            auto generator = std::make_unique<Generator>(std::move(recipe), registry, model_path, std::move(issues));
            metrics.loads.Increment();
            cache.remember(key, *generator);
            return generator;
        } catch (const RecipeError& e) {
            throw RequestError{400, "invalid recipe", prefixed(e.issues())};
        }
    }

    void reply(httplib::Response& res, int status, const json& body) {
        res.status = status;
        res.set_content(body.dump() + "\n", "application/json");
    }

    // The jobs a worker took (one, or several of one recipe that may share): one run for them all, or for as many
    // as the recipe's memory limit allows. Runs on the worker's thread.
    void run(std::vector<std::shared_ptr<Job>>& jobs) {
        std::unique_ptr<Generator> generator = std::move(jobs[0]->generator);
        for (size_t i = 1; i < jobs.size(); ++i) cache.give_back(jobs[i]->key, std::move(jobs[i]->generator));
        if (!generator) generator = cache.take(jobs[0]->key);
        if (!generator) {
            // A recipe that passed every check when a generator was last built for it; if it no longer does (a model
            // or plugin file changed), every job hears why.
            try {
                GenerateRequest request;
                request.recipe = jobs[0]->recipe;
                request.base_dir = jobs[0]->base_dir;
                int64_t samples = 0;
                generator = generator_for(request, jobs[0]->key, &samples);
            } catch (const RequestError& e) {
                std::string message = e.message;
                for (const auto& issue : e.issues) message += "; " + issue.pointer + ": " + issue.message;
                scheduler.run_ended(jobs.size());
                for (auto& job : jobs) job->deliver("error", {{"error", message}});
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
        if (!later.empty()) scheduler.put_back(later);
        run_one(std::move(generator), jobs);
    }

    // One reverse loop for `jobs`: their samples are consecutive rows of one run, in the order of `jobs`.
    void run_one(std::unique_ptr<Generator> generator, std::vector<std::shared_ptr<Job>>& jobs) {
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
        metrics.runs.Increment();
        std::string error;
        bool finished = false;
        try {
            generator->generate(
                [&](const Progress& p) {
                    metrics.steps.Increment();
                    if (std::all_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->abandoned.load(); })) return false;
                    if (!streams) return true;
                    const std::vector<std::string> texts = p.current_texts();  // rows samples_done.. of the run
                    const int64_t rows = static_cast<int64_t>(texts.size());
                    for (size_t i = 0; i < jobs.size(); ++i) {
                        if (!jobs[i]->streams || jobs[i]->abandoned) continue;
                        const int64_t begin = std::max(first[i], p.samples_done);
                        const int64_t end = std::min(first[i] + jobs[i]->samples, p.samples_done + rows);
                        if (begin >= end) continue;  // none of its rows in this batch
                        jobs[i]->deliver("step", {{"batch", p.batch}, {"batches", p.batches}, {"step", p.step},
                                                  {"steps", p.steps}, {"t", p.t}, {"first", begin - first[i]},
                                                  {"texts", std::vector<std::string>(texts.begin() + (begin - p.samples_done),
                                                                                     texts.begin() + (end - p.samples_done))}});
                    }
                    return true;
                },
                [&](const SampleResult& s) {
                    metrics.samples.Increment();
                    const size_t i = job_of(s.index);
                    json sample = sample_json(s);
                    sample["index"] = s.index - first[i];
                    jobs[i]->deliver("sample", std::move(sample));
                },
                RunOverrides{total, seed});
            finished = true;
        } catch (const Cancelled&) {
            error = "the generation was cancelled";  // every job abandoned: nobody listens
        } catch (const std::exception& e) {
            error = e.what();
        }
        // A generator whose run did not finish may hold a controller's failed state: it is not reused.
        if (finished) cache.give_back(jobs[0]->key, std::move(generator));
        scheduler.run_ended(jobs.size());
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (!finished) {
                jobs[i]->deliver("error", {{"error", error}});
                continue;
            }
            jobs[i]->deliver("done", {{"run", {{"seed", seed}, {"samples", total}, {"requests", jobs.size()}, {"first", first[i]}}}});
        }
    }

    void handle_generate(const httplib::Request& req, httplib::Response& res) {
        const auto arrived = Clock::now();
        GenerateRequest request;
        try {
            request = read_request(req.body, options);
        } catch (const RequestError& e) {
            metrics.failed("invalid request");
            return reply(res, e.status, error_json(e));
        }
        // A place in line before the recipe's model and plugins are loaded: a refused request costs nothing.
        Scheduler::Entry entry = Scheduler::Entry::admitted;
        std::shared_ptr<Scheduler::Place> place = scheduler.admit(entry);
        if (!place) {
            metrics.failed(entry == Scheduler::Entry::full ? "queue full" : "draining");
            res.set_header("Retry-After", std::to_string(options.retry_after_seconds));
            return reply(res, 503, {{"error", entry == Scheduler::Entry::full
                                                  ? "the queue is full (" + std::to_string(options.queue_limit) + " waiting); try again later"
                                                  : std::string("the server is shutting down")}});
        }
        auto job = std::make_shared<Job>();
        job->key = share_key(request);
        job->recipe = request.recipe;
        job->base_dir = request.base_dir;
        try {
            job->generator = generator_for(request, job->key, &job->samples, /*unless_known=*/true);
        } catch (const RequestError& e) {
            metrics.failed("invalid request");
            return reply(res, e.status, error_json(e));
        }
        job->seed = request.seed;
        job->shares = !request.seed && (job->generator ? job->generator->batching_pays() : cache.known(job->key).value_or(false));
        job->streams = request.stream;
        place->submit(job);

        const auto deadline = arrived + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_seconds));
        const std::string timeout_message = "the generation ran past the server's limit of " + std::to_string(options.timeout_seconds) + " s";
        const auto seconds_since_arrival = [arrived] { return std::chrono::duration<double>(Clock::now() - arrived).count(); };
        if (!request.stream) {
            json samples = json::array();
            for (;;) {
                std::optional<Job::Event> event = job->next(deadline);
                if (!event) {
                    metrics.failed("timeout");
                    return reply(res, 504, {{"error", timeout_message}});
                }
                if (event->name == "sample") {
                    samples.push_back(std::move(event->data));
                } else if (event->name == "done") {
                    metrics.latency.Observe(seconds_since_arrival());
                    return reply(res, 200, {{"samples", samples}, {"run", event->data["run"]}});
                } else if (event->name == "error") {
                    metrics.failed("run error");
                    return reply(res, 500, event->data);
                }
            }
        }
        // Streamed: the run's events are written as they arrive, on this connection's thread: a step event per
        // reverse step (each of its samples' current best text), one per sample, then "done". A failed write (the
        // client went away) abandons the job, which cancels its run at the next step when it serves nobody else.
        // The place goes with the response, so it is given back even when the response is never written.
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, place, job, deadline, timeout_message, seconds_since_arrival](size_t, httplib::DataSink& sink) {
                const auto send = [&](const std::string& event, const json& data) {
                    const std::string text = "event: " + event + "\ndata: " + data.dump() + "\n\n";
                    return sink.write(text.data(), text.size());
                };
                for (;;) {
                    std::optional<Job::Event> event = job->next(deadline);
                    if (!event) {
                        job->abandoned = true;
                        metrics.failed("timeout");
                        send("error", {{"error", timeout_message}});
                        break;
                    }
                    if (event->name == "done") {
                        // Observed before "done" is written, so a client that has read the stream finds the run
                        // in the metrics.
                        const double seconds = seconds_since_arrival();
                        metrics.latency.Observe(seconds);
                        send("done", {{"seconds", seconds}, {"run", event->data["run"]}});
                        break;
                    }
                    if (event->name == "error") metrics.failed("run error");
                    if (!send(event->name, event->data)) {
                        job->abandoned = true;
                        if (event->name != "error") metrics.failed("disconnected");
                        break;
                    }
                    if (event->name == "error") break;
                }
                sink.done();
                return true;
            },
            [place](bool) mutable { place.reset(); });
    }

    void handle_validate(const httplib::Request& req, httplib::Response& res) {
        try {
            const GenerateRequest request = read_request(req.body, options);
            const std::string key = share_key(request);
            int64_t samples = 0;
            std::unique_ptr<Generator> generator = generator_for(request, key, &samples);
            reply(res, 200, {{"valid", true},
                             {"model", generator->model().name},
                             {"family", family_name(generator->model().family)},
                             {"sampler", generator->recipe().sampler.name},
                             {"controllers", generator->recipe().controllers.size()},
                             {"estimated_peak_bytes", generator->estimated_peak_bytes()}});
            cache.give_back(key, std::move(generator));  // a generation of this recipe that follows finds it loaded
        } catch (const RequestError& e) {
            json body = error_json(e);
            body["valid"] = false;
            reply(res, e.status, body);
        }
    }

    void handle_plugins(httplib::Response& res) {
        json j = {{"controllers", json::array()}, {"rejected", json::array()}};
        for (const auto& c : registry.controllers()) {
            json schema = nullptr;
            try {
                const std::string text = registry.resolve(c.id, ".").params_schema();
                if (!text.empty()) schema = json::parse(text);
            } catch (const std::exception& e) {
                schema = {{"error", e.what()}};
            }
            j["controllers"].push_back({{"id", c.id},
                                        {"version", c.version},
                                        {"abi", std::to_string(c.abi_major) + "." + std::to_string(c.abi_minor)},
                                        {"capabilities", plugins::capability_names(c.capabilities)},
                                        {"description", c.description},
                                        {"params_schema", schema}});
        }
        for (const auto& r : registry.rejections()) j["rejected"].push_back({{"file", r.path.string()}, {"reason", r.reason}});
        reply(res, 200, j);
    }

    void routes() {
        http.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
        // cpp-httplib closes a kept-alive connection after 5 requests by default: a client sending many then opens a
        // connection every 5, through a listen backlog of 5 (compiled into Debian's library).
        http.set_keep_alive_max_count(1000);
        // A thread per connection: the requests waiting (at most the queue and one per idle worker), those in runs
        // (at most a run's samples per worker), and a few for health, metrics and refusals.
        const size_t threads = static_cast<size_t>(options.queue_limit + options.parallel * (1 + options.batch_samples) + 4);
        http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
        http.Post("/v1/generate", [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res); });
        http.Post("/v1/validate", [this](const httplib::Request& req, httplib::Response& res) { handle_validate(req, res); });
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json models = json::array();
            for (const auto& name : list_models(model_path)) models.push_back(name);
            reply(res, 200, {{"models", models}});
        });
        http.Get("/v1/plugins", [this](const httplib::Request&, httplib::Response& res) { handle_plugins(res); });
        http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(playground_page(), "text/html; charset=utf-8"); });
        http.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
            const bool draining = scheduler.draining();
            reply(res, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
        });
        http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(prometheus::TextSerializer().Serialize(metrics.registry.Collect()), "text/plain; version=0.0.4");
        });
        http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            metrics.failed("server error");
            reply(res, 500, {{"error", what}});
        });
        http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (res.body.empty())
                res.set_content(json({{"error", "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path}}).dump() + "\n",
                                "application/json");
        });
        // Paths outside the API are counted together: a scan of random paths must not grow the metrics.
        http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            static const std::set<std::string> known = {"/", "/v1/generate", "/v1/validate", "/v1/models", "/v1/plugins",
                                                        "/healthz", "/metrics"};
            metrics.answered(known.count(req.path) ? req.path : "other", res.status);
        });
    }
};

Server::Server(ServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
    if (state_->options.parallel < 1) throw std::invalid_argument("serve: parallel must be at least 1");
    if (state_->options.queue_limit < 0) throw std::invalid_argument("serve: the queue limit must be 0 or more");
    if (state_->options.batch_samples < 1) throw std::invalid_argument("serve: a run must hold at least 1 sample");
    if (state_->options.cached_generators < 0) throw std::invalid_argument("serve: the generator cache must hold 0 or more");
    state_->routes();
    State* s = state_.get();
    s->scheduler.start_workers([s](std::vector<std::shared_ptr<Job>>& jobs) { s->run(jobs); });
}

Server::~Server() {
    stop();
    if (state_->stopper.joinable()) state_->stopper.join();
    state_->scheduler.stop_workers();  // before the cache and metrics the workers use are destroyed
}

void Server::listen() {
    State& s = *state_;
    s.port = s.options.port == 0 ? s.http.bind_to_any_port(s.options.host) : s.options.port;
    if (s.port < 0 || (s.options.port != 0 && !s.http.bind_to_port(s.options.host, s.options.port)))
        throw std::runtime_error("serve: cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                                 " (in use, or not an address of this machine)");
}

int Server::port() const { return state_->port; }

void Server::run() {
    if (state_->port < 0) listen();
    state_->http.listen_after_bind();
}

void Server::stop() {
    State& s = *state_;
    std::call_once(s.stop_once, [&s] {
        s.scheduler.drain();
        s.stopper = std::thread([&s] {
            s.scheduler.wait_idle();
            s.scheduler.stop_workers();
            s.http.stop();
        });
    });
}

bool Server::draining() const { return state_->scheduler.draining(); }

}  // namespace rudder::serve
