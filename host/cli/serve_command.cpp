// `rudder serve`: the HTTP server of rudder/serve/server.hpp until SIGINT or SIGTERM, which drain it: running and
// waiting generations finish, new ones are refused (503), then the process exits.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <rudder/serve/server.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal_number) { g_stop_signal = signal_number; }

}  // namespace

void add_serve_command(CLI::App& app, Commands& commands) {
    struct Options {
        serve::ServerOptions server;
        std::vector<std::string> recipes;
        int64_t max_memory_mb = 0;
    };
    auto o = std::make_shared<Options>();
    auto* serve = app.add_subcommand("serve", "Serve controlled generation over HTTP (docs/serving.md)");
    serve->add_option("--host", o->server.host, "Address to listen on (default 127.0.0.1: this machine only)");
    serve->add_option("--port", o->server.port, "Port (default 8080; 0: any free port, printed)")
        ->check(CLI::Range(0, 65535));
    serve->add_option("--parallel", o->server.parallel, "Generations that run at once (default 1)")
        ->check(CLI::Range(1, 256));
    serve
        ->add_option("--queue", o->server.queue_limit,
                     "Generations that may wait; more are refused with 503 (default 16)")
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
            "Refuse a request whose estimated peak memory exceeds this many MB (default: the machine's memory)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    commands.add_threads_option(serve);
    commands.list.push_back(
        {serve, [o] {
             for (const auto& item : o->recipes) {
                 const auto equals = item.find('=');
                 if (equals == std::string::npos || equals == 0 || equals + 1 == item.size())
                     throw CLI::ValidationError("--recipe", "expected NAME=FILE, got '" + item + "'");
                 const std::filesystem::path file = item.substr(equals + 1);
                 if (!std::filesystem::is_regular_file(file))
                     throw CLI::ValidationError("--recipe", "no recipe file '" + file.string() + "'");
                 o->server.recipes[item.substr(0, equals)] = std::filesystem::absolute(file);
             }
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
