// rudder serve's HTTP routes and handlers over cpp-httplib (Debian's libcpp-httplib: chunked responses for
// Server-Sent Events, no other dependency to build) and the Server that owns the rest: http_transport.hpp runs the
// connections (deadlines, the connection cap), access.hpp checks API keys and origins, request.hpp reads a request,
// model_catalog.hpp finds its model among the operator's, generator_cache.hpp loads and keeps generators,
// scheduler.hpp lines jobs up for the workers, job_runner.hpp runs them, answers.hpp keeps answers valid UTF-8 and
// free of server paths, metrics.hpp counts for /metrics (prometheus-cpp's registry and text format).
#include <rudder/serve/server.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <rudder/base/memory.hpp>
#include <rudder/nn/schedule.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>

#include "access.hpp"
#include "answers.hpp"
#include "generator_cache.hpp"
#include "http_transport.hpp"
#include "job_runner.hpp"
#include "memory_release.hpp"
#include "metrics.hpp"
#include "model_catalog.hpp"
#include "openai_api.hpp"
#include "playground_page.hpp"
#include "request.hpp"
#include "scheduler.hpp"
#include "server_internals.hpp"
#include "server_options.hpp"

namespace rudder::serve {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Clock::time_point after(double seconds) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The failures metric's cause for a request answered `status`: a run's failure is the server's (500), a run past
// its deadline a timeout (504), anything else the request's.
const char* failure_cause(int status) {
    if (status == 500) return "run error";
    if (status == 504) return "timeout";
    return "invalid request";
}

}  // namespace

struct Server::State {
    explicit State(ServerOptions o)
        : options(std::move(o)), catalog(options.model_path, options.models, options.allow_client_paths),
          registry(options.plugin_path.empty() ? plugins::Registry::default_search_path() : options.plugin_path),
          generators(options, registry, catalog, metrics), scheduler(options, metrics, generators.cache),
          runner(generators, scheduler, metrics), prompt_tools([this] { metrics.prompt_loads.Increment(); }),
          access(options.api_keys, options.cors_origins, options.allowed_hosts, options.host),
          http(limits(options), [this](ConnectionEvent e) { count(e); }) {
        for (const auto& dir : options.model_path) redact.add(dir, "");
        for (const auto& [name, dir] : options.models) redact.add(dir, name);
        for (const auto& dir : registry.search_path()) redact.add(dir, "");
        for (const auto& [name, file] : options.recipes) redact.add(file.parent_path(), "");
        std::error_code ec;
        redact.add(fs::current_path(ec), ".");
    }

    static ConnectionLimits limits(const ServerOptions& o) {
        return {o.header_timeout_seconds, o.body_timeout_seconds, o.idle_timeout_seconds,
                o.write_timeout_seconds,  o.max_connections,      o.max_body_bytes};
    }

    ServerOptions options;
    ModelCatalog catalog;
    PathRedactor redact;
    plugins::Registry registry;  // scanned once, shared by every request (it locks itself)
    Metrics metrics;
    GeneratorLoader generators;
    Scheduler scheduler;
    JobRunner runner;
    PromptTools prompt_tools;
    Access access;
    HttpServer http;
    int port = -1;
    std::thread stopper;
    std::once_flag stop_once;
    // Freed memory goes back to the system once the server is idle after answering (trimmer).
    std::thread trimmer;
    std::mutex trim_mutex;
    std::condition_variable trim_wake;
    bool trim_stop = false;
    std::atomic<int64_t> answered{0};

    void count(ConnectionEvent e) {
        switch (e) {
            case ConnectionEvent::opened: metrics.connections.Increment(); break;
            case ConnectionEvent::closed: metrics.connections.Decrement(); break;
            case ConnectionEvent::refused: metrics.dropped.Add({{"cause", "refused"}}).Increment(); break;
            case ConnectionEvent::timed_out: metrics.dropped.Add({{"cause", "slow"}}).Increment(); break;
        }
    }

    // An answer: JSON that is valid UTF-8 whatever it holds, its error messages without server paths.
    void reply(httplib::Response& res, int status, json body) const {
        res.status = status;
        if (status >= 400) redact.scrub(body);
        res.set_content(dump_json(body) + "\n", "application/json");
    }

    void trim_when_idle() {
        int64_t trimmed_at = 0;
        std::unique_lock<std::mutex> lock(trim_mutex);
        while (!trim_stop) {
            trim_wake.wait_for(lock, std::chrono::seconds(1));
            const int64_t now = answered.load();
            if (now != trimmed_at && scheduler.idle()) {
                trimmed_at = now;
                release_free_memory();
            }
        }
    }

    // A request's job in line and its generator loaded (or known), so its run will take it: RequestError with the
    // status to answer (400 for the recipe's problems, 503 when the queue is full or the server drains, 504 when the
    // load outlasts the deadline), counted in the metrics.
    struct Started {
        std::shared_ptr<Scheduler::Place> place;
        std::shared_ptr<Job> job;
    };
    // A place in line, taken before the request is read: a refused request costs nothing, and what reading costs
    // (a chat template rendered, a prompt encoded) is counted by --queue and seen by the drain.
    std::shared_ptr<Scheduler::Place> take_place() {
        Scheduler::Entry entry = Scheduler::Entry::admitted;
        std::shared_ptr<Scheduler::Place> place = scheduler.admit(entry);
        if (!place) {
            metrics.failed(entry == Scheduler::Entry::full ? "queue full" : "draining");
            throw RequestError{
                503,
                entry == Scheduler::Entry::full
                    ? "the queue is full (" + std::to_string(options.queue_limit) + " waiting); try again later"
                    : std::string("the server is shutting down"),
                {}};
        }
        return place;
    }

    Started start(std::shared_ptr<Scheduler::Place> place, const GenerateRequest& request, Clock::time_point deadline) {
        // Checked here, so that a request the run could not serve is answered 400 before it waits. The generator
        // built to check it (none for a recipe checked before) goes with its job to the run: it is built once.
        auto job = std::make_shared<Job>();
        job->key = share_key(request);
        job->recipe = request.recipe;
        job->base_dir = request.base_dir;
        job->deadline = deadline;
        job->samples_pointer = request.samples_pointer;
        try {
            job->generator = generators.load_before(request, job->key, &job->samples, /*unless_known=*/true, deadline);
        } catch (const RequestError& e) {
            metrics.failed(failure_cause(e.status));
            throw;
        }
        job->seed = request.seed;
        job->shares =
            !request.seed &&
            (job->generator ? job->generator->batching_pays()
                            : generators.cache.known(job->key).value_or(GeneratorCache::Known{}).batching_pays);
        job->streams = request.stream;
        place->submit(job);
        return {std::move(place), std::move(job)};
    }

    std::string timeout_message() const {
        std::ostringstream limit;  // 600, 0.5: no trailing zeros
        limit << options.timeout_seconds;
        return "the generation ran past the server's limit of " + limit.str() + " s";
    }

    // A job's samples once its run is done, and the run's description (`run`); RequestError for a run that failed
    // (500, or the runner's status when the request is to blame) or ran past the deadline (504).
    std::vector<json> collect(Job& job, Clock::time_point deadline, json& run) {
        std::vector<json> samples;
        for (;;) {
            std::optional<Job::Event> event = job.next(deadline);
            if (!event) {
                metrics.failed("timeout");
                throw RequestError{504, timeout_message(), {}};
            }
            if (auto* sample = std::get_if<SampleEvent>(&*event)) {
                samples.push_back(std::move(sample->sample));
            } else if (auto* done = std::get_if<DoneEvent>(&*event)) {
                run = std::move(done->run);
                return samples;
            } else if (auto* failed = std::get_if<ErrorEvent>(&*event)) {
                // A run's failure is the server's answer (500) unless the runner says it is the request's.
                metrics.failed(failure_cause(failed->error.status));
                throw std::move(failed->error);
            }
        }
    }

    void reply_error(httplib::Response& res, const RequestError& e, json body) {
        if (e.status == 503) res.set_header("Retry-After", std::to_string(options.retry_after_seconds));
        reply(res, e.status, std::move(body));
    }

    static const GenerateRequest& generation_of(const GenerateRequest& r) { return r; }
    static const GenerateRequest& generation_of(const CompletionRequest& r) { return r.generate; }

    // The request read (`read` makes it) and its job started; false when neither could be, the error answered in the
    // route's shape (`shape`) and counted.
    template <class Request, class Read, class Shape>
    bool admitted(Request& request, Started& started, Read&& read, Shape&& shape, Clock::time_point deadline,
                  httplib::Response& res) {
        try {
            std::shared_ptr<Scheduler::Place> place = take_place();
            try {
                request = read();
            } catch (const RequestError& e) {
                metrics.failed(failure_cause(e.status));  // a render stopped at the deadline is a timeout
                throw;
            }
            started = start(std::move(place), generation_of(request), deadline);
            return true;
        } catch (const RequestError& e) {
            reply_error(res, e, shape(e, request));
            return false;
        }
    }

    void handle_generate(const httplib::Request& req, httplib::Response& res) {
        const auto arrived = Clock::now();
        const auto deadline = after(options.timeout_seconds);
        GenerateRequest request;
        Started started;
        const auto read = [&] { return read_request(req.body, options); };
        const auto shape = [](const RequestError& e, const GenerateRequest&) { return error_json(e); };
        if (!admitted(request, started, read, shape, deadline, res)) return;
        if (request.stream) return stream_events(res, std::move(started.place), std::move(started.job), arrived);
        try {
            json run;
            std::vector<json> samples = collect(*started.job, deadline, run);
            metrics.latency.Observe(seconds_since(arrived));
            reply(res, 200, {{"samples", samples}, {"run", run}});
        } catch (const RequestError& e) {
            reply_error(res, e, error_json(e));
        }
    }

    // POST /v1/completions and /v1/chat/completions (openai_api.hpp).
    void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
        const auto arrived = Clock::now();
        const auto deadline = after(options.timeout_seconds);
        CompletionRequest request;
        Started started;
        // The chat template renders in this thread, after the request took its place in line: its deadline and a
        // drain stop it (a template is the model folder's, third-party content).
        RenderLimits render_limits;
        render_limits.cancelled = [this, deadline] { return Clock::now() >= deadline || scheduler.draining(); };
        const auto read = [&] {
            try {
                return read_completion_request(req.body, chat, options, catalog, prompt_tools, render_limits);
            } catch (const RequestError& e) {
                // A render stopped by the deadline or the drain is that, not the client's mistake.
                if (Clock::now() >= deadline) throw RequestError{504, timeout_message(), {}};
                if (scheduler.draining()) throw RequestError{503, "the server is shutting down", {}};
                throw;
            }
        };
        const auto shape = [](const RequestError& e, const CompletionRequest& r) { return openai_error(e, &r); };
        if (!admitted(request, started, read, shape, deadline, res)) return;
        const std::string id = completion_id(chat);
        const int64_t created = static_cast<int64_t>(std::time(nullptr));
        if (request.generate.stream)
            return stream_completion(res, std::move(started), std::move(request), id, created, arrived);
        try {
            json run;
            std::vector<Choice> choices;
            for (const auto& sample : collect(*started.job, deadline, run))
                choices.push_back(choice_of(request, sample));
            metrics.latency.Observe(seconds_since(arrived));
            reply(res, 200, completion_json(request, id, created, choices, run));
        } catch (const RequestError& e) {
            reply_error(res, e, openai_error(e, &request));
        }
    }

    // A completion streamed as OpenAI streams one: each choice as a chunk when its sample is done (a diffusion model
    // writes every position at once, so there is no earlier text to send), then its finish reason; the usage if
    // asked for; then "data: [DONE]". While the run goes on, an SSE comment per step keeps the connection alive and
    // shows progress ("step 12/64"); clients skip comments. A failed run ends the stream with an error chunk.
    void stream_completion(httplib::Response& res, Started started, CompletionRequest request, const std::string& id,
                           int64_t created, Clock::time_point arrived) {
        res.set_header("Cache-Control", "no-cache");
        auto shared = std::make_shared<CompletionRequest>(std::move(request));
        auto place = started.place;
        auto job = started.job;
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, job, shared, id, created, arrived](size_t, httplib::DataSink& sink) {
                const CompletionRequest& request = *shared;
                const auto send = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
                const auto data = [&](const json& j) { return send("data: " + dump_json(j) + "\n\n"); };
                int64_t completion_tokens = 0;
                bool open = true;
                while (open) {
                    std::optional<Job::Event> event = job->next(job->deadline);
                    if (!event) {
                        job->abandoned = true;
                        metrics.failed("timeout");
                        data(openai_error(RequestError{504, timeout_message(), {}}, &request));
                        break;
                    }
                    if (const auto* step = std::get_if<StepEvent>(&*event)) {
                        open =
                            send(": step " + std::to_string(step->step) + "/" + std::to_string(step->steps) + "\n\n");
                    } else if (const auto* sample = std::get_if<SampleEvent>(&*event)) {
                        const Choice c = choice_of(request, sample->sample);
                        completion_tokens += c.completion_tokens;
                        const int64_t index = sample->sample.value("index", 0);
                        open = data(chunk_json(request, id, created, index, c.text, "", true)) &&
                               data(chunk_json(request, id, created, index, "", c.finish_reason, false));
                    } else if (std::holds_alternative<DoneEvent>(*event)) {
                        metrics.latency.Observe(seconds_since(arrived));
                        if (request.include_usage) data(usage_chunk_json(request, id, created, completion_tokens));
                        send("data: [DONE]\n\n");
                        break;
                    } else if (const auto* failed = std::get_if<ErrorEvent>(&*event)) {
                        metrics.failed(failure_cause(failed->error.status));
                        // The message alone, without the issues, as this chunk has always been written.
                        json body =
                            openai_error(RequestError{failed->error.status, failed->error.message, {}}, &request);
                        redact.scrub(body);
                        data(body);
                        break;
                    }
                    if (!open) {
                        job->abandoned = true;
                        metrics.failed("disconnected");
                    }
                }
                sink.done();
                return true;
            },
            [place](bool) mutable { place.reset(); });
    }

    // Streamed: the run's events are written as they arrive, on this connection's thread: a step event per
    // reverse step (each of its samples' current best text), one per sample, then "done". A failed write (the
    // client went away) abandons the job, which cancels its run at the next step when it serves nobody else.
    // The place goes with the response, so it is given back even when the response is never written.
    void stream_events(httplib::Response& res, std::shared_ptr<Scheduler::Place> place, std::shared_ptr<Job> job,
                       Clock::time_point arrived) {
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, place, job, arrived](size_t, httplib::DataSink& sink) {
                const auto send = [&](const char* event, const json& data) {
                    const std::string text = "event: " + std::string(event) + "\ndata: " + dump_json(data) + "\n\n";
                    return sink.write(text.data(), text.size());
                };
                // An error event: error_json's {"error", "issues"?}, free of server paths (its status is not sent).
                const auto send_error = [&](const RequestError& e) {
                    json data = error_json(e);
                    redact.scrub(data);
                    return send(ErrorEvent::name, data);
                };
                for (;;) {
                    std::optional<Job::Event> event = job->next(job->deadline);
                    if (!event) {
                        job->abandoned = true;
                        metrics.failed("timeout");
                        send_error(RequestError{504, timeout_message(), {}});
                        break;
                    }
                    if (const auto* done = std::get_if<DoneEvent>(&*event)) {
                        // Observed before "done" is written, so a client that has read the stream finds the run
                        // in the metrics.
                        const double seconds = seconds_since(arrived);
                        metrics.latency.Observe(seconds);
                        send(DoneEvent::name, {{"seconds", seconds}, {"run", done->run}});
                        break;
                    }
                    if (const auto* failed = std::get_if<ErrorEvent>(&*event)) {
                        metrics.failed(failure_cause(failed->error.status));
                        if (!send_error(failed->error)) job->abandoned = true;
                        break;
                    }
                    const auto* step = std::get_if<StepEvent>(&*event);
                    const bool sent = step ? send(StepEvent::name, step_json(*step))
                                           : send(SampleEvent::name, std::get<SampleEvent>(*event).sample);
                    if (!sent) {
                        job->abandoned = true;
                        metrics.failed("disconnected");
                        break;
                    }
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
            std::unique_ptr<Generator> generator =
                generators.load_before(request, key, &samples, false, after(options.timeout_seconds));
            reply(res, 200,
                  {{"valid", true},
                   {"model", generator->model().name},
                   {"family", family_name(generator->model().family)},
                   {"sampler", generator->recipe().sampler.name},
                   {"controllers", generator->recipe().controllers.size()},
                   // For the request's samples: a cached generator's recipe may have had others.
                   {"estimated_peak_bytes", generator->estimated_peak_bytes(samples)}});
            // A generation of this recipe that follows finds it loaded.
            generators.cache.give_back(key, std::move(generator));
        } catch (const RequestError& e) {
            json body = error_json(e);
            body["valid"] = false;
            reply(res, e.status, body);
        }
    }

    // Rudder's extension marks the default model, which pickers (the playground) offer first.
    static json model_entry(const std::string& name) {
        return {{"id", name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "rudder"},
                {"rudder", {{"default", name == kDefaultModel}}}};
    }

    void handle_plugins(httplib::Response& res) {
        json j = {{"controllers", json::array()}, {"rejected", json::array()}};
        for (const auto& c : registry.controllers()) {
            json schema = nullptr;
            try {
                const std::string text = registry.resolve(c.id, ".").params_schema();
                if (!text.empty()) schema = json::parse(text);
            } catch (const std::exception& e) {
                schema = {{"error", redact(e.what())}};
            }
            j["controllers"].push_back({{"id", c.id},
                                        {"version", c.version},
                                        {"abi", std::to_string(c.abi_major) + "." + std::to_string(c.abi_minor)},
                                        {"capabilities", plugins::capability_names(c.capabilities)},
                                        {"description", c.description},
                                        {"params_schema", schema}});
        }
        // A rejected library by its file's name: where the server keeps its plugins is not the client's business.
        for (const auto& r : registry.rejections())
            j["rejected"].push_back({{"file", r.path.filename().string()}, {"reason", redact(r.reason)}});
        redact.scrub(j);
        reply(res, 200, j);
    }

    void routes() {
        // cpp-httplib closes a kept-alive connection after 5 requests by default: a client sending many then opens a
        // connection every 5, through a listen backlog of 5 (compiled into Debian's library).
        http.set_keep_alive_max_count(1000);
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            // The body's framing first: nothing of a body the server will not read is read.
            if (const std::optional<FramingRefusal> refusal = http.frame_body(req)) {
                refuse_in_route_shape(req, res, refusal->status, refusal->message);
                res.set_header("Connection", "close");
                return httplib::Server::HandlerResponse::Handled;
            }
            return access.answered(req, res) ? httplib::Server::HandlerResponse::Handled
                                             : httplib::Server::HandlerResponse::Unhandled;
        });
        http.set_post_routing_handler(
            [this](const httplib::Request& req, httplib::Response& res) { access.decorate(req, res); });
        http.Post("/v1/generate",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res); });
        http.Post("/v1/validate",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_validate(req, res); });
        http.Post("/v1/completions",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, false); });
        http.Post("/v1/chat/completions",
                  [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, true); });
        // OpenAI's shape: {"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}, the models
        // a request can sample from (the classifiers and judges controllers load are not listed).
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json data = json::array();
            for (const auto& name : catalog.names()) {
                std::filesystem::path dir;
                try {
                    dir = catalog.find(name, ".");
                } catch (const std::exception&) {
                    continue;  // a folder that cannot be served: refused when a request names it
                }
                if (is_generator(dir)) data.push_back(model_entry(name));
            }
            reply(res, 200, {{"object", "list"}, {"data", data}});
        });
        http.Get(R"(/v1/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
            const std::string name = req.matches[1];
            const std::vector<std::string> names = catalog.names();
            if (std::find(names.begin(), names.end(), name) == names.end())
                return reply(res, 404,
                             openai_error(RequestError{404,
                                                       "no model named '" + quoted(name) +
                                                           "' on this server (GET /v1/models lists them)",
                                                       {}},
                                          nullptr));
            reply(res, 200, model_entry(name));
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
        error_routes();
    }

    // A refusal in the route's shape: OpenAI's routes answer in OpenAI's error object, the others in Rudder's.
    void refuse_in_route_shape(const httplib::Request& req, httplib::Response& res, int status,
                               const std::string& message) const {
        const RequestError e{status, message, {}};
        const bool openai = req.path == "/v1/completions" || req.path == "/v1/chat/completions";
        reply(res, status, openai ? openai_error(e, nullptr) : error_json(e));
    }

    void error_routes() {
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
        // The path and method are the client's: quoted cut short, and any bytes (%FF) replaced.
        http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            if (const std::optional<FramingRefusal> cut = http.body_cut_off()) {
                res.set_header("Connection", "close");
                return refuse_in_route_shape(req, res, cut->status, cut->message);
            }
            // httplib's own limit on form-encoded bodies (compiled into Debian's library), which curl -d sends
            // (every other body's limit is frame_body's).
            if (res.status == 413)
                return refuse_in_route_shape(
                    req, res, 413,
                    "a form-encoded body (Content-Type: application/x-www-form-urlencoded, curl -d's default) is "
                    "limited to 8192 bytes by this server's HTTP library; send the JSON with Content-Type: "
                    "application/json");
            reply(res, res.status,
                  {{"error",
                    "HTTP " + std::to_string(res.status) + " for " + quoted(req.method) + " " + quoted(req.path)}});
        });
        // Paths outside the API are counted together: a scan of random paths must not grow the metrics.
        http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            static const std::set<std::string> known = {"/",          "/v1/generate",    "/v1/validate",
                                                        "/v1/models", "/v1/plugins",     "/healthz",
                                                        "/metrics",   "/v1/completions", "/v1/chat/completions"};
            const bool model = req.path.rfind("/v1/models/", 0) == 0;
            metrics.answered(known.count(req.path) ? req.path : model ? "/v1/models/{id}" : "other", res.status);
            answered.fetch_add(1);
        });
    }
};

Server::Server(ServerOptions options) : state_(std::make_unique<State>(resolved_options(std::move(options)))) {
    state_->routes();
    State* s = state_.get();
    s->scheduler.start_workers([s](std::vector<std::shared_ptr<Job>>& jobs) { s->runner.run(jobs); });
    s->trimmer = std::thread([s] { s->trim_when_idle(); });
}

Server::~Server() {
    stop();
    if (state_->stopper.joinable()) state_->stopper.join();
    state_->scheduler.stop_workers();  // before the cache and metrics the workers use are destroyed
    {
        std::lock_guard<std::mutex> lock(state_->trim_mutex);
        state_->trim_stop = true;
    }
    state_->trim_wake.notify_all();
    state_->trimmer.join();
    // A load that never ends (left behind by its request's deadline) still uses the state: it is left to the
    // process's exit rather than destroyed under that load (and kept reachable, so it is not reported as a leak).
    static std::atomic<void*> left_behind{nullptr};
    if (!state_->generators.wait_for_loads(std::chrono::seconds(2))) left_behind = state_.release();
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

const ServerOptions& Server::options() const { return state_->options; }

std::string ServerInternals::exchange(Server& server, const std::string& input) {
    return server.state_->http.exchange(input);
}

}  // namespace rudder::serve
