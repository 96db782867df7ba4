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
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <cstdint>
#include <thread>

#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/nn/schedule.hpp>

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
        prometheus::BuildGauge().Name("rudder_queue_length").Help("Generations waiting for a turn").Register(registry).Add({});
    prometheus::Gauge& running =
        prometheus::BuildGauge().Name("rudder_generations_running").Help("Generations running").Register(registry).Add({});
    prometheus::Counter& steps =
        prometheus::BuildCounter().Name("rudder_reverse_steps_total").Help("Reverse steps taken, all generations").Register(registry).Add({});
    prometheus::Counter& samples =
        prometheus::BuildCounter().Name("rudder_samples_total").Help("Samples generated").Register(registry).Add({});
    prometheus::Histogram& latency =
        prometheus::BuildHistogram().Name("rudder_generation_seconds").Help("Time from a generation's arrival to its last sample")
            .Register(registry).Add({}, prometheus::Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});

    void answered(const std::string& path, int status) { requests.Add({{"path", path}, {"code", std::to_string(status)}}).Increment(); }
    void failed(const std::string& cause) { failures.Add({{"cause", cause}}).Increment(); }
};

// Who may generate now: `parallel` at a time, `queue_limit` more waiting their turn, none once draining.
class Turns {
public:
    Turns(int64_t parallel, int64_t queue_limit, Metrics& metrics)
        : parallel_(parallel), queue_limit_(queue_limit), metrics_(metrics) {}
    enum class Entry { admitted, full, draining };

    // A place in line, given back when the ticket is destroyed (whether or not its turn came).
    class Ticket {
    public:
        explicit Ticket(Turns& turns) : turns_(turns) {}
        ~Ticket() { turns_.leave(running_); }
        Ticket(const Ticket&) = delete;
        Ticket& operator=(const Ticket&) = delete;
        void wait_turn() {
            turns_.wait_turn();
            running_ = true;
        }

    private:
        Turns& turns_;
        bool running_ = false;
    };

    // A place in line, or (null) why there is none.
    std::unique_ptr<Ticket> enter(Entry& entry) {
        std::lock_guard<std::mutex> lock(mutex_);
        entry = draining_ ? Entry::draining : running_ + waiting_ >= parallel_ + queue_limit_ ? Entry::full : Entry::admitted;
        if (entry != Entry::admitted) return nullptr;
        ++waiting_;
        metrics_.waiting.Set(static_cast<double>(waiting_));
        return std::make_unique<Ticket>(*this);
    }
    void wait_turn() {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return running_ < parallel_; });
        --waiting_;
        ++running_;
        metrics_.waiting.Set(static_cast<double>(waiting_));
        metrics_.running.Set(static_cast<double>(running_));
    }
    void leave(bool running) {
        std::lock_guard<std::mutex> lock(mutex_);
        --(running ? running_ : waiting_);
        metrics_.running.Set(static_cast<double>(running_));
        metrics_.waiting.Set(static_cast<double>(waiting_));
        changed_.notify_all();
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
    void wait_idle() {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return running_ == 0 && waiting_ == 0; });
    }

private:
    const int64_t parallel_, queue_limit_;
    Metrics& metrics_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    int64_t running_ = 0, waiting_ = 0;
    bool draining_ = false;
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
};

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
          turns(options.parallel, options.queue_limit, metrics) {}

    ServerOptions options;
    std::vector<fs::path> model_path;
    plugins::Registry registry;  // scanned once, shared by every request (it locks itself)
    Metrics metrics;
    Turns turns;
    httplib::Server http;
    int port = -1;
    std::thread stopper;
    std::once_flag stop_once;

    // The recipe of a request, checked and loaded: every problem (the request's, the recipe's, its model's and
    // controllers') at once, with pointers into the request.
    std::unique_ptr<Generator> generator_for(const GenerateRequest& request) {
        std::vector<RecipeIssue> issues;
        const auto prefixed = [&](std::vector<RecipeIssue> found) {
            for (auto& issue : found) issue.pointer = request.pointer_prefix + issue.pointer;
            return found;
        };
        try {
            Recipe recipe = parse_recipe(request.recipe.dump(), request.base_dir, options.limits, &issues);
            return std::make_unique<Generator>(std::move(recipe), registry, model_path, std::move(issues));
        } catch (const RecipeError& e) {
            throw RequestError{400, "invalid recipe", prefixed(e.issues())};
        }
    }

    void reply(httplib::Response& res, int status, const json& body) {
        res.status = status;
        res.set_content(body.dump() + "\n", "application/json");
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
        Turns::Entry entry = Turns::Entry::admitted;
        std::shared_ptr<Turns::Ticket> ticket = turns.enter(entry);
        if (!ticket) {
            metrics.failed(entry == Turns::Entry::full ? "queue full" : "draining");
            res.set_header("Retry-After", std::to_string(options.retry_after_seconds));
            return reply(res, 503, {{"error", entry == Turns::Entry::full
                                                  ? "the queue is full (" + std::to_string(options.queue_limit) + " waiting); try again later"
                                                  : std::string("the server is shutting down")}});
        }
        std::shared_ptr<Generator> generator;
        try {
            generator = generator_for(request);
        } catch (const RequestError& e) {
            metrics.failed("invalid request");
            return reply(res, e.status, error_json(e));
        }
        const double limit = options.timeout_seconds;
        const auto past_limit = [arrived, limit] { return std::chrono::duration<double>(Clock::now() - arrived).count() > limit; };
        const std::string timeout_message = "the generation ran past the server's limit of " + std::to_string(limit) + " s";
        if (!request.stream) {
            ticket->wait_turn();
            json samples = json::array();
            try {
                generator->generate(
                    [&](const Progress&) {
                        metrics.steps.Increment();
                        return !past_limit();
                    },
                    [&](const SampleResult& s) {
                        samples.push_back(sample_json(s));
                        metrics.samples.Increment();
                    });
            } catch (const Cancelled&) {
                metrics.failed("timeout");
                return reply(res, 504, {{"error", timeout_message}});
            } catch (const std::exception& e) {
                metrics.failed("run error");
                return reply(res, 500, {{"error", e.what()}});
            }
            metrics.latency.Observe(std::chrono::duration<double>(Clock::now() - arrived).count());
            return reply(res, 200, {{"samples", samples}});
        }
        // Streamed: the run happens as the response is written, on this connection's thread. An event per reverse
        // step (each sample's current best text), one per sample, then "done"; a failed write (the client went away)
        // cancels the run at that step. The ticket goes with the response, so its place is given back even when
        // the response is never written.
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, ticket, generator, arrived, past_limit, timeout_message](size_t, httplib::DataSink& sink) {
                const auto send = [&](const char* event, const json& data) {
                    const std::string text = std::string("event: ") + event + "\ndata: " + data.dump() + "\n\n";
                    return sink.write(text.data(), text.size());
                };
                ticket->wait_turn();
                bool gone = false;
                try {
                    generator->generate(
                        [&](const Progress& p) {
                            metrics.steps.Increment();
                            gone = !send("step", {{"batch", p.batch}, {"batches", p.batches}, {"step", p.step},
                                                  {"steps", p.steps}, {"t", p.t}, {"texts", p.current_texts()}});
                            return !gone && !past_limit();
                        },
                        [&](const SampleResult& s) {
                            metrics.samples.Increment();
                            gone = gone || !send("sample", sample_json(s));
                        });
                    // Observed before "done", so a client that has read the stream finds the run in the metrics.
                    const double seconds = std::chrono::duration<double>(Clock::now() - arrived).count();
                    metrics.latency.Observe(seconds);
                    if (!gone) send("done", {{"seconds", seconds}});
                } catch (const Cancelled&) {
                    metrics.failed(gone ? "disconnected" : "timeout");
                    if (!gone) send("error", {{"error", timeout_message}});
                } catch (const std::exception& e) {
                    metrics.failed("run error");
                    send("error", {{"error", e.what()}});
                }
                sink.done();
                return true;
            },
            [ticket](bool) mutable { ticket.reset(); });
    }

    void handle_validate(const httplib::Request& req, httplib::Response& res) {
        try {
            const GenerateRequest request = read_request(req.body, options);
            const auto generator = generator_for(request);
            reply(res, 200, {{"valid", true},
                             {"model", generator->model().name},
                             {"family", family_name(generator->model().family)},
                             {"sampler", generator->recipe().sampler.name},
                             {"controllers", generator->recipe().controllers.size()},
                             {"estimated_peak_bytes", generator->estimated_peak_bytes()}});
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
        // A thread per connection: the running and waiting generations, and a few for health, metrics and refusals.
        const size_t threads = static_cast<size_t>(options.parallel + options.queue_limit + 4);
        http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
        http.Post("/v1/generate", [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res); });
        http.Post("/v1/validate", [this](const httplib::Request& req, httplib::Response& res) { handle_validate(req, res); });
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json models = json::array();
            for (const auto& name : list_models(model_path)) models.push_back(name);
            reply(res, 200, {{"models", models}});
        });
        http.Get("/v1/plugins", [this](const httplib::Request&, httplib::Response& res) { handle_plugins(res); });
        http.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
            const bool draining = turns.draining();
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
            static const std::set<std::string> known = {"/v1/generate", "/v1/validate", "/v1/models", "/v1/plugins",
                                                        "/healthz", "/metrics"};
            metrics.answered(known.count(req.path) ? req.path : "other", res.status);
        });
    }
};

Server::Server(ServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
    if (state_->options.parallel < 1) throw std::invalid_argument("serve: parallel must be at least 1");
    if (state_->options.queue_limit < 0) throw std::invalid_argument("serve: the queue limit must be 0 or more");
    state_->routes();
}

Server::~Server() {
    stop();
    if (state_->stopper.joinable()) state_->stopper.join();
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
        s.turns.drain();
        s.stopper = std::thread([&s] {
            s.turns.wait_idle();
            s.http.stop();
        });
    });
}

bool Server::draining() const { return state_->turns.draining(); }

}  // namespace rudder::serve
