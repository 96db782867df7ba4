// rudder serve: controlled generation over HTTP (docs/serving.md).
//
//   rudder::serve::ServerOptions options;
//   options.port = 8080;
//   rudder::serve::Server server(options);
//   server.listen();          // binds (port 0: any free port; port() says which)
//   server.run();             // serves until stop() (from another thread or a signal watcher)
//
// Endpoints: POST /v1/generate (JSON, or Server-Sent Events with "stream": true), POST /v1/validate, OpenAI's
// POST /v1/completions and POST /v1/chat/completions (the prompt as a span prefix, a model's chat template; streamed as
// OpenAI streams), GET /v1/models and /v1/models/{id} (OpenAI's shape), GET /v1/plugins, GET /healthz, GET /metrics
// (Prometheus text format). What a client can and cannot
// make the server do: docs/serving.md, "Security".
//
// Generations run on `parallel` workers, one reverse loop each at a time; up to `queue_limit` more requests wait,
// and a request beyond that is answered 503 with Retry-After. A worker that takes a request without a fixed seed,
// of a recipe whose runs batch well (Generator::batching_pays), takes with it the waiting requests of the same
// recipe (seed and samples aside), up to `batch_samples` samples, and serves them all from one run. Generators (a
// recipe's model and controllers, loaded) are kept for the next request of the same recipe, `cached_generators` of
// them. stop() drains: new generations are refused with 503, the running and waiting ones finish, then the listener
// closes.
#pragma once

#include <memory>

#include <rudder/serve/server_options.hpp>

namespace rudder::serve {

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
    // The options with every default decided (isolation, the memory limit, the model folders).
    const ServerOptions& options() const;

private:
    friend struct ServerInternals;  // the fuzz target's way in (src/server_internals.hpp)
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace rudder::serve
