// libFuzzer target: any bytes as what a client sends on one connection (request lines, headers, bodies, several
// requests kept alive), through rudder serve's routes and handlers without a socket (ServerInternals::exchange runs
// cpp-httplib's request parser and the server's routes over a string). Nothing may escape (an exception out of the
// routes ends the run), and every answer the server writes must be an HTTP response whose JSON body parses, UTF-8
// included. The server is the bundled models and plugins with small limits, so a valid generation takes moments, and
// an API key and a CORS origin, so the access checks are fuzzed too (the seeds carry the key).
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include <rudder/serve/server.hpp>

#include "server_internals.hpp"

namespace {

rudder::serve::Server& server() {
    static rudder::serve::Server* const instance = [] {
        ::setenv("RUDDER_PLUGIN_SCANNER", RUDDER_FUZZ_LIBEXEC "/rudder-plugin-scan", 0);
        ::setenv("RUDDER_CONTROLLER_HOST", RUDDER_FUZZ_LIBEXEC "/rudder-controller-host", 0);
        ::setenv("RUDDER_CACHE_DIR", RUDDER_FUZZ_CACHE, 0);
        // The plugins carry coverage counters of their own (the fuzz build instruments everything), which libFuzzer
        // reads after every input: a plugin unloaded when its last generator goes would leave it reading unmapped
        // memory. Loaded once here with RTLD_NODELETE, they stay.
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(RUDDER_FUZZ_PLUGINS, ec))
            if (entry.path().extension() == ".so") (void)::dlopen(entry.path().c_str(), RTLD_NOW | RTLD_NODELETE);
        rudder::serve::ServerOptions o;
        o.model_path = {RUDDER_FUZZ_MODELS};
        o.plugin_path = {RUDDER_FUZZ_PLUGINS};
        o.queue_limit = 4;
        o.batch_samples = 4;
        o.cached_generators = 2;
        o.max_body_bytes = 1 << 16;
        o.timeout_seconds = 5;
        o.isolation = "in_process";
        o.limits.max_steps = 4;
        o.limits.max_samples = 2;
        o.limits.max_batch_size = 2;
        o.limits.max_length = 16;
        o.limits.max_controllers = 4;
        o.api_keys = {"fuzz-key-0123456789abcdef"};
        o.cors_origins = {"https://app.example"};
        return new rudder::serve::Server(o);  // never destroyed: its workers serve every input
    }();
    return *instance;
}

// The first answer in `out`: an HTTP/1.1 status line, and a JSON body that parses where one is announced (an
// answer to HEAD announces the body it leaves out).
void check(const std::string& in, const std::string& out) {
    if (out.empty()) return;  // the connection closed before a request was complete
    if (out.rfind("HTTP/1.1 ", 0) != 0) std::abort();
    const size_t end = out.find("\r\n\r\n");
    if (end == std::string::npos) std::abort();
    const std::string head = out.substr(0, end);
    if (in.rfind("HEAD", 0) == 0 || head.find("Content-Type: application/json") == std::string::npos) return;
    const size_t length_at = head.find("Content-Length: ");
    if (length_at == std::string::npos) return;
    const size_t length = std::stoul(head.substr(length_at + 16));
    if (out.size() < end + 4 + length) std::abort();
    // Throws, and so ends the run, on a body that is not JSON or not UTF-8.
    (void)nlohmann::json::parse(out.substr(end + 4, length));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    check(input, rudder::serve::ServerInternals::exchange(server(), input));
    return 0;
}
