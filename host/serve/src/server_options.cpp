// rudder serve's options with every default decided (server_options.hpp), and the memory a request may use by default
// (rudder/serve/server_options.hpp).
#include "server_options.hpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <rudder/base/memory.hpp>
#include <rudder/runtime/model.hpp>

#include "model_catalog.hpp"

namespace rudder::serve {
namespace {

namespace fs = std::filesystem;

// The memory available to this process: the machine's (MemAvailable), or its cgroup's limit less its usage.
uint64_t available_memory_bytes() {
    uint64_t available = 0;
    std::ifstream meminfo("/proc/meminfo");
    std::string key, rest;
    uint64_t kilobytes = 0;
    while (meminfo >> key >> kilobytes && std::getline(meminfo, rest))
        if (key == "MemAvailable:") available = kilobytes * 1024;
    if (available == 0) available = physical_memory_bytes();
    std::ifstream cgroup("/proc/self/cgroup");
    std::string line;
    while (std::getline(cgroup, line)) {
        if (line.rfind("0::", 0) != 0) continue;  // cgroup v2
        const std::string dir = "/sys/fs/cgroup" + line.substr(3);
        std::ifstream max_file(dir + "/memory.max"), current_file(dir + "/memory.current");
        std::string max_text;
        uint64_t current = 0;
        if (!(max_file >> max_text) || max_text == "max" || !(current_file >> current)) continue;
        try {
            const uint64_t max = std::stoull(max_text);
            available = std::min(available, max > current ? max - current : 0);
        } catch (const std::exception&) {
        }
    }
    return available;
}

// The options with every default decided: isolation, the request memory limit, the model folders.
}  // namespace

ServerOptions resolved_options(ServerOptions o) {
    if (o.parallel < 1) throw std::invalid_argument("serve: parallel must be at least 1");
    if (o.queue_limit < 0) throw std::invalid_argument("serve: the queue limit must be 0 or more");
    if (o.batch_samples < 1) throw std::invalid_argument("serve: a run must hold at least 1 sample");
    if (o.cached_generators < 0) throw std::invalid_argument("serve: the generator cache must hold 0 or more");
    if (o.max_connections < 1) throw std::invalid_argument("serve: max_connections must be at least 1");
    if (o.isolation.empty()) {
        const char* env = std::getenv("RUDDER_ISOLATION");
        o.isolation = env != nullptr && *env != '\0' ? env : "in_process";
    }
    if (o.isolation != "process" && o.isolation != "in_process")
        throw std::invalid_argument("serve: isolation '" + o.isolation + "': expected in_process or process");
    if (o.limits.max_memory_bytes == 0) o.limits.max_memory_bytes = default_request_memory(o.parallel);
    o.limits.model_paths = o.allow_client_paths;
    if (o.model_path.empty()) o.model_path = default_model_path();
    for (const auto& [name, dir] : o.models) {
        std::error_code ec;
        if (!is_model_name(name))
            throw std::invalid_argument("serve: model name '" + name +
                                        "': letters, digits, '.', '_' and '-' only, not starting with '.'");
        if (!fs::is_directory(dir, ec))
            throw std::invalid_argument("serve: model '" + name + "': no folder '" + dir.string() + "'");
    }
    return o;
}

uint64_t default_request_memory(int64_t parallel) {
    return resident_bytes() + available_memory_bytes() / 4 * 3 / static_cast<uint64_t>(std::max<int64_t>(1, parallel));
}

}  // namespace rudder::serve
