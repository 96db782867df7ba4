// rudder serve's HTTP routes and handlers over cpp-httplib (Debian's libcpp-httplib: a thread per connection from a
// pool, chunked responses for Server-Sent Events, no other dependency to build), and the Server that owns the rest:
// request.hpp reads a request, generator_cache.hpp loads and keeps generators, scheduler.hpp lines jobs up for the
// workers, job_runner.hpp runs them, metrics.hpp counts for /metrics (prometheus-cpp's registry and text format).
#include <rudder/serve/server.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <rudder/nn/schedule.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>

#include "generator_cache.hpp"
#include "job_runner.hpp"
#include "metrics.hpp"
#include "playground_page.hpp"
#include "request.hpp"
#include "scheduler.hpp"

namespace rudder::serve {
namespace {

using json = nlohmann::json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump() + "\n", "application/json");
}

}  // namespace

struct Server::State {
    explicit State(ServerOptions o)
        : options(std::move(o)),
          registry(options.plugin_path.empty() ? plugins::Registry::default_search_path() : options.plugin_path),
          generators(options, registry, options.model_path.empty() ? default_model_path() : options.model_path,
                     metrics),
          scheduler(options, metrics, generators.cache), runner(generators, scheduler, metrics) {}

    ServerOptions options;
    plugins::Registry registry;  // scanned once, shared by every request (it locks itself)
    Metrics metrics;
    GeneratorLoader generators;
    Scheduler scheduler;
    JobRunner runner;
    httplib::Server http;
    int port = -1;
    std::thread stopper;
    std::once_flag stop_once;

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
            return reply(res, 503,
                         {{"error", entry == Scheduler::Entry::full
                                        ? "the queue is full (" + std::to_string(options.queue_limit) +
                                              " waiting); try again later"
                                        : std::string("the server is shutting down")}});
        }
        // Checked here, so that a request the run could not serve is answered 400 before it waits. The generator
        // built to check it (none for a recipe checked before) goes with its job to the run: it is built once.
        auto job = std::make_shared<Job>();
        job->key = share_key(request);
        job->recipe = request.recipe;
        job->base_dir = request.base_dir;
        try {
            job->generator = generators.load(request, job->key, &job->samples, /*unless_known=*/true);
        } catch (const RequestError& e) {
            metrics.failed("invalid request");
            return reply(res, e.status, error_json(e));
        }
        job->seed = request.seed;
        job->shares = !request.seed && (job->generator ? job->generator->batching_pays()
                                                       : generators.cache.known(job->key).value_or(false));
        job->streams = request.stream;
        place->submit(job);

        const auto deadline = arrived + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(options.timeout_seconds));
        const std::string timeout_message =
            "the generation ran past the server's limit of " + std::to_string(options.timeout_seconds) + " s";
        if (request.stream)
            return stream_events(res, std::move(place), std::move(job), arrived, deadline, timeout_message);
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
                metrics.latency.Observe(seconds_since(arrived));
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
    void stream_events(httplib::Response& res, std::shared_ptr<Scheduler::Place> place, std::shared_ptr<Job> job,
                       Clock::time_point arrived, Clock::time_point deadline, const std::string& timeout_message) {
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, place, job, arrived, deadline, timeout_message](size_t, httplib::DataSink& sink) {
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
                        const double seconds = seconds_since(arrived);
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
            std::unique_ptr<Generator> generator = generators.load(request, key, &samples);
            reply(res, 200,
                  {{"valid", true},
                   {"model", generator->model().name},
                   {"family", family_name(generator->model().family)},
                   {"sampler", generator->recipe().sampler.name},
                   {"controllers", generator->recipe().controllers.size()},
                   {"estimated_peak_bytes", generator->estimated_peak_bytes()}});
            // A generation of this recipe that follows finds it loaded.
            generators.cache.give_back(key, std::move(generator));
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
        for (const auto& r : registry.rejections())
            j["rejected"].push_back({{"file", r.path.string()}, {"reason", r.reason}});
        reply(res, 200, j);
    }

    void routes() {
        http.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
        // cpp-httplib closes a kept-alive connection after 5 requests by default: a client sending many then opens a
        // connection every 5, through a listen backlog of 5 (compiled into Debian's library).
        http.set_keep_alive_max_count(1000);
        // A thread per connection: the requests waiting (at most the queue and one per idle worker), those in runs
        // (at most a run's samples per worker), and a few for health, metrics and refusals.
        const size_t threads =
            static_cast<size_t>(options.queue_limit + options.parallel * (1 + options.batch_samples) + 4);
        http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
        http.Post("/v1/generate",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res); });
        http.Post("/v1/validate",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_validate(req, res); });
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json models = json::array();
            for (const auto& name : list_models(generators.model_path())) models.push_back(name);
            reply(res, 200, {{"models", models}});
        });
        http.Get("/v1/plugins", [this](const httplib::Request&, httplib::Response& res) { handle_plugins(res); });
        http.Get("/", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(playground_page(), "text/html; charset=utf-8");
        });
        http.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
            const bool draining = scheduler.draining();
            reply(res, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
        });
        http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(prometheus::TextSerializer().Serialize(metrics.registry.Collect()),
                            "text/plain; version=0.0.4");
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
                res.set_content(
                    json({{"error", "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path}})
                            .dump() +
                        "\n",
                    "application/json");
        });
        // Paths outside the API are counted together: a scan of random paths must not grow the metrics.
        http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            static const std::set<std::string> known = {"/",           "/v1/generate", "/v1/validate", "/v1/models",
                                                        "/v1/plugins", "/healthz",     "/metrics"};
            metrics.answered(known.count(req.path) ? req.path : "other", res.status);
        });
    }
};

Server::Server(ServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
    if (state_->options.parallel < 1) throw std::invalid_argument("serve: parallel must be at least 1");
    if (state_->options.queue_limit < 0) throw std::invalid_argument("serve: the queue limit must be 0 or more");
    if (state_->options.batch_samples < 1) throw std::invalid_argument("serve: a run must hold at least 1 sample");
    if (state_->options.cached_generators < 0)
        throw std::invalid_argument("serve: the generator cache must hold 0 or more");
    state_->routes();
    State* s = state_.get();
    s->scheduler.start_workers([s](std::vector<std::shared_ptr<Job>>& jobs) { s->runner.run(jobs); });
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
