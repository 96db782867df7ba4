// rudder serve: controlled generation over HTTP (docs/serving.md).
//
//   rudder::serve::ServerOptions options;
//   options.port = 8080;
//   rudder::serve::Server server(options);
//   server.listen();          // binds (port 0: any free port; port() says which)
//   server.run();             // serves until stop() (from another thread or a signal watcher)
//
// Endpoints: POST /v1/generate (JSON, or Server-Sent Events with "stream": true), POST /v1/validate,
// GET /v1/models, GET /v1/plugins, GET /healthz, GET /metrics (Prometheus text format).
//
// Generations run on `parallel` workers, one reverse loop each at a time; up to `queue_limit` more requests wait,
// and a request beyond that is answered 503 with Retry-After. A worker that takes a request without a fixed seed,
// of a recipe whose runs batch well (Generator::batching_pays), takes with it the waiting requests of the same
// recipe (seed and samples aside), up to `batch_samples` samples, and serves them all from one run. Generators (a
// recipe's model and controllers, loaded) are kept for the next request of the same recipe, `cached_generators` of
// them. stop() drains: new generations are refused with 503, the running and waiting ones finish, then the listener
// closes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rudder/runtime/recipe.hpp>

namespace rudder::serve {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                   // 0: any free port
    int64_t parallel = 1;              // generations that run at once
    int64_t queue_limit = 16;          // generations that may wait for a turn; more are refused with 503
    int64_t batch_samples = 32;        // the most samples one run serves for requests that share it (1: none share)
    int64_t cached_generators = 8;     // idle generators kept for requests that follow (0: each request loads)
    int64_t max_body_bytes = 1 << 20;  // a larger request body is refused with 413
    double timeout_seconds = 600;      // a generation running longer is cancelled (504, or an error event)
    int64_t retry_after_seconds = 5;   // the Retry-After of a 503
    RecipeLimits limits;               // applied to every recipe, as `rudder generate` applies its own
    std::map<std::string, std::filesystem::path> recipes;  // recipes a request may name instead of giving one
    std::vector<std::filesystem::path> model_path;         // empty: default_model_path()
    std::vector<std::filesystem::path> plugin_path;        // empty: Registry::default_search_path()
};

class Server {
public:
    explicit Server(ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds the listening socket; throws std::runtime_error naming host and port when that fails.
    void listen();
    int port() const;
    // Serves until stop(); returns once the listener has closed.
    void run();
    // Drains (see above) and closes the listener. Safe from any thread; returns at once, run() returns when done.
    void stop();
    bool draining() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace rudder::serve
