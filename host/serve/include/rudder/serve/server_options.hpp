// What a rudder::serve::Server is told, as an application (or `rudder serve`'s command line) sets it: the listening
// address, the workers and the queue, the limits, the recipes, models and plugins requests may name, and what a
// client must bring (rudder/serve/server.hpp; docs/serving.md). Server's constructor decides every default left open.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <rudder/runtime/recipe.hpp>

namespace rudder::serve {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;       // 0: any free port
    int64_t parallel = 1;  // generations that run at once
    // Generations that may wait for a turn; more are refused with 503. 64: 32 clients each waiting on its answer are
    // all served (a waiting request of a recipe seen before holds no generator of its own).
    int64_t queue_limit = 64;
    int64_t batch_samples = 32;        // the most samples one run serves for requests that share it (1: none share)
    int64_t cached_generators = 8;     // idle generators kept for requests that follow (0: each request loads)
    int64_t max_body_bytes = 1 << 20;  // a larger request body is refused with 413
    // A generation running longer from its arrival is cancelled (504, or an error event); so is the loading of its
    // recipe's model and plugins.
    double timeout_seconds = 600;
    int64_t retry_after_seconds = 5;  // the Retry-After of a 503
    // Applied to every recipe, as `rudder generate` applies its own. max_memory_bytes 0: default_request_memory().
    RecipeLimits limits;
    std::map<std::string, std::filesystem::path> recipes;  // recipes a request may name instead of giving one
    // The models requests may name: those in these folders (empty: default_model_path()), by their folder's name,
    // and those named one by one.
    std::vector<std::filesystem::path> model_path;
    std::map<std::string, std::filesystem::path> models;
    // Whether a request may give a model's or a plugin's path on the server instead of a name (trusted clients only:
    // a path reaches any folder the server can read).
    bool allow_client_paths = false;
    // Where controllers run when a request does not ask for more isolation: "in_process" or "process" (a request
    // may ask for "process", never for "in_process" when this is "process"). "": $RUDDER_ISOLATION, else in_process.
    std::string isolation;
    std::vector<std::filesystem::path> plugin_path;  // empty: Registry::default_search_path()
    // Connections: a request's line and headers must arrive within header_timeout_seconds of its first byte, its
    // body within body_timeout_seconds after them; a kept-alive connection waits idle_timeout_seconds for its next
    // request; a write the client does not take for write_timeout_seconds fails; connections beyond
    // max_connections are answered 503 at once.
    double header_timeout_seconds = 10;
    double body_timeout_seconds = 60;
    double idle_timeout_seconds = 5;
    double write_timeout_seconds = 10;
    int64_t max_connections = 256;
    // API keys a request must bring as `Authorization: Bearer KEY` (none: no authentication; /healthz and the
    // playground page stay open), and the origins whose web pages may call the API ("*": any; none: only the
    // server's own page).
    std::vector<std::string> api_keys;
    std::vector<std::string> cors_origins;
    // The names a keyless server answers to in the Host header, besides the loopback names (localhost, *.localhost,
    // 127.0.0.0/8, [::1]) and the address it listens on: a keyless server refuses other names (421), so that a web
    // page whose own name an attacker points at 127.0.0.1 (DNS rebinding) cannot call it. "*": any name. A server
    // with API keys answers to any name (the page has no key).
    std::vector<std::string> allowed_hosts;
};

// The memory one request's run may use when the operator gives no limit: what this process holds now, plus three
// quarters of the memory available to it (the machine's available memory, or its cgroup's limit less its usage,
// whichever is less) shared by the `parallel` runs.
uint64_t default_request_memory(int64_t parallel);

}  // namespace rudder::serve
