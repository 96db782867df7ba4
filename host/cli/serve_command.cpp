// `rudder serve`: the HTTP server of rudder/serve/server.hpp until SIGINT or SIGTERM, which drain it: running and
// waiting generations finish, new ones are refused (503), then the process exits.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <rudder/base/memory.hpp>
#include <rudder/serve/server.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal_number) { g_stop_signal = signal_number; }

// NAME=VALUE items of a repeatable option, by name.
std::map<std::string, std::string> named_items(const std::vector<std::string>& items, const std::string& option) {
    std::map<std::string, std::string> out;
    for (const auto& item : items) {
        const auto equals = item.find('=');
        if (equals == std::string::npos || equals == 0 || equals + 1 == item.size())
            throw CLI::ValidationError(option, "expected NAME=" + std::string(option == "--recipe" ? "FILE" : "PATH") +
                                                   ", got '" + item + "'");
        out[item.substr(0, equals)] = item.substr(equals + 1);
    }
    return out;
}

// API keys: the file's lines (blank ones and '#' comments skipped) and $RUDDER_API_KEYS (separated by commas or
// spaces). Never from the command line, which other users of the machine can read (ps).
std::vector<std::string> api_keys(const std::string& file) {
    std::vector<std::string> keys;
    const auto take = [&](std::string key, const std::string& where) {
        key.erase(0, key.find_first_not_of(" \t\r"));
        key.erase(key.find_last_not_of(" \t\r") + 1);
        if (key.empty() || key[0] == '#') return;
        if (key.size() < 16 || std::any_of(key.begin(), key.end(), [](unsigned char c) { return c <= ' ' || c > '~'; }))
            throw CLI::ValidationError("--api-keys",
                                       "a key in " + where + " is shorter than 16 characters or not printable ASCII");
        keys.push_back(key);
    };
    if (!file.empty()) {
        std::ifstream in(file);
        if (!in) throw CLI::ValidationError("--api-keys", "cannot read '" + file + "'");
        for (std::string line; std::getline(in, line);) take(line, "'" + file + "'");
        if (keys.empty()) throw CLI::ValidationError("--api-keys", "'" + file + "' holds no key");
    }
    if (const char* env = std::getenv("RUDDER_API_KEYS")) {
        std::string list = env;
        std::replace(list.begin(), list.end(), ',', ' ');
        std::istringstream words(list);
        for (std::string key; words >> key;) take(key, "$RUDDER_API_KEYS");
    }
    return keys;
}

// Who may ask what of the server, and how long a connection may take: docs/serving.md, "Security".
void add_security_options(CLI::App* serve, serve::ServerOptions& server, std::vector<std::string>& models,
                          std::string& api_keys_file) {
    serve->add_option("--models", server.model_path,
                      "A folder of models requests may name, each by its folder's name (repeatable; default: "
                      "$RUDDER_MODEL_PATH and the bundled models)");
    serve->add_option("--model", models, "NAME=PATH: a model requests may name (repeatable)");
    serve->add_flag("--allow-client-paths", server.allow_client_paths,
                    "Let requests give models and plugins by path on this machine (trusted clients only)");
    serve
        ->add_option("--isolation", server.isolation,
                     "Where controllers run unless a request asks for a process of their own: in_process or "
                     "process (default: $RUDDER_ISOLATION, else in_process); requests may not ask for less")
        ->check(CLI::IsMember({"in_process", "process"}));
    serve->add_option("--api-keys", api_keys_file,
                      "A file of API keys, one a line, that requests must bring as 'Authorization: Bearer KEY' "
                      "(also $RUDDER_API_KEYS; default: none, no authentication)");
    serve->add_option("--cors-origin", server.cors_origins,
                      "An origin whose web pages may call the API, e.g. https://app.example.com, or * (repeatable; "
                      "default: none, only the server's own page)");
    serve->add_option("--allowed-host", server.allowed_hosts,
                      "A name a keyless server answers to in the Host header besides localhost, the loopback "
                      "addresses and the address it listens on, e.g. rudder.internal, or * (repeatable; defeats DNS "
                      "rebinding: other names are refused)");
    serve
        ->add_option("--max-connections", server.max_connections,
                     "Connections open at once; more are answered 503 (default 256)")
        ->check(CLI::Range(int64_t{1}, int64_t{100000}));
    serve
        ->add_option("--header-timeout", server.header_timeout_seconds,
                     "Seconds for a request's line and headers to arrive from its first byte (default 10)")
        ->check(CLI::Range(0.1, 3600.0));
    serve
        ->add_option("--body-timeout", server.body_timeout_seconds,
                     "Seconds for a request's body to arrive after its headers (default 60)")
        ->check(CLI::Range(0.1, 3600.0));
    serve
        ->add_option("--idle-timeout", server.idle_timeout_seconds,
                     "Seconds a kept-alive connection waits for its next request (default 5)")
        ->check(CLI::Range(0.1, 3600.0));
    serve
        ->add_option("--write-timeout", server.write_timeout_seconds,
                     "Seconds a client may leave an answer unread before the write fails (default 10)")
        ->check(CLI::Range(0.1, 3600.0));
}

}  // namespace

void add_serve_command(CLI::App& app, Commands& commands) {
    struct Options {
        serve::ServerOptions server;
        std::vector<std::string> recipes;
        std::vector<std::string> models;
        std::string api_keys_file;
        int64_t max_memory_mb = 0;
    };
    auto o = std::make_shared<Options>();
    auto* serve = app.add_subcommand("serve", kServeSummary);
    serve->add_option("--host", o->server.host, "Address to listen on (default 127.0.0.1: this machine only)");
    serve->add_option("--port", o->server.port, "Port (default 8080; 0: any free port, printed)")
        ->check(CLI::Range(0, 65535));
    serve->add_option("--parallel", o->server.parallel, "Generations that run at once (default 1)")
        ->check(CLI::Range(1, 256));
    serve
        ->add_option("--queue", o->server.queue_limit,
                     "Generations that may wait; more are refused with 503 (default 64)")
        ->check(CLI::Range(0, 100000));
    serve
        ->add_option("--batch", o->server.batch_samples,
                     "Most samples one run serves for waiting requests of the same recipe without a fixed seed "
                     "(default 32; 1: no sharing)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    serve
        ->add_option(
            "--cache", o->server.cached_generators,
            "Loaded generators kept for requests of the same recipe (default 8; 0: each request loads its own)")
        ->check(CLI::Range(int64_t{0}, int64_t{4096}));
    serve->add_option("--max-body", o->server.max_body_bytes, "Largest request body in bytes (default 1 MiB)")
        ->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
    serve
        ->add_option("--timeout", o->server.timeout_seconds,
                     "Seconds a generation may take from its arrival (default 600)")
        ->check(CLI::Range(0.001, 1e7));
    serve->add_option("--recipe", o->recipes,
                      "NAME=FILE: a recipe requests may name instead of sending one (repeatable)");
    serve
        ->add_option(
            "--max-memory", o->max_memory_mb,
            "Refuse a request whose estimated peak memory exceeds this many MB (default: what the server holds at "
            "its start plus 3/4 of the memory available to it, shared by the --parallel runs)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    add_security_options(serve, o->server, o->models, o->api_keys_file);
    commands.add_threads_option(serve);
    commands.list.push_back(
        {serve, [o] {
             for (const auto& [name, item] : named_items(o->recipes, "--recipe")) {
                 const std::filesystem::path file = item;
                 if (!std::filesystem::is_regular_file(file))
                     throw CLI::ValidationError("--recipe", "no recipe file '" + file.string() + "'");
                 o->server.recipes[name] = std::filesystem::absolute(file);
             }
             for (const auto& [name, dir] : named_items(o->models, "--model")) {
                 if (!std::filesystem::is_directory(dir))
                     throw CLI::ValidationError("--model", "no model folder '" + dir + "'");
                 o->server.models[name] = std::filesystem::absolute(dir);
             }
             o->server.api_keys = api_keys(o->api_keys_file);
             o->server.limits.max_memory_bytes = static_cast<uint64_t>(o->max_memory_mb) * 1000 * 1000;
             std::signal(SIGPIPE, SIG_IGN);  // a client that goes away is a failed write, not the end of the server
#if defined(__GLIBC__)
             // glibc gives each of the many connection threads an arena of its own, and freed memory stays in the
             // process (main.cpp): under load the server's memory grew half as fast with two arenas as with the default
             // (docs/serving.md, "Load"). The reverse loops run on the workers, so a few arenas are enough.
             mallopt(M_ARENA_MAX, static_cast<int>(std::min<int64_t>(o->server.parallel + 1, 64)));
#endif
             serve::Server server(o->server);
             server.listen();
             std::fprintf(
                 stderr,
                 "rudder serve: listening on http://%s:%d (%lld at a time, %lld may wait, up to %lld samples a run)\n",
                 o->server.host.c_str(), server.port(), static_cast<long long>(o->server.parallel),
                 static_cast<long long>(o->server.queue_limit), static_cast<long long>(o->server.batch_samples));
             std::fprintf(
                 stderr,
                 "rudder serve: controllers run %s; client paths %s; API keys %s; a request's run may use "
                 "up to %s\n",
                 server.options().isolation == "process" ? "in a process of their own (requests may not ask for less)"
                                                         : "in process (a request may ask for a process of their own)",
                 o->server.allow_client_paths ? "allowed" : "refused", o->server.api_keys.empty() ? "off" : "required",
                 memory_text(server.options().limits.max_memory_bytes).c_str());
             std::fflush(stderr);
             std::signal(SIGINT, on_stop_signal);
             std::signal(SIGTERM, on_stop_signal);
             std::atomic<bool> done{false};
             std::thread watcher([&] {
                 while (!done && g_stop_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
                 if (g_stop_signal != 0) {
                     std::fprintf(stderr, "rudder serve: stopping; running and waiting generations finish first\n");
                     server.stop();
                 }
             });
             server.run();
             done = true;
             watcher.join();
             std::fprintf(stderr, "rudder serve: stopped\n");
             return kExitOk;
         }});
}

}  // namespace rudder::cli
