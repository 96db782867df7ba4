// The host's end of process isolation: a child process (rudder-controller-host) that runs one controller instance,
// and the shared memory a run's step tensors live in. Torch-free; process_transport.cpp builds tensors on it.
#pragma once

#include "isolation_protocol.hpp"

#include <rudder/plugins/loader.hpp>

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace rudder::plugins {

// A memfd mapped read-write into this process; handed to the child at begin.
class SharedMemory {
public:
    SharedMemory() = default;
    SharedMemory(const SharedMemory&) = delete;
    SharedMemory& operator=(const SharedMemory&) = delete;
    ~SharedMemory() { release(); }
    // Makes a fresh mapping of `size` bytes (zero-filled), or keeps the current one if it is at least that large
    // (then its contents stay). True if the file is new. Throws std::runtime_error.
    bool reserve(size_t size) {
        if (data_ != nullptr && size_ >= size) return false;
        allocate(size);
        return true;
    }
    // Makes a fresh mapping of `size` bytes (zero-filled). Throws std::runtime_error.
    void allocate(size_t size);
    void release();
    int fd() const { return fd_; }
    char* data() const { return data_; }
    size_t size() const { return size_; }

private:
    int fd_ = -1;
    char* data_ = nullptr;
    size_t size_ = 0;
};

class RemoteController {
public:
    // Answers one service request from the plugin (type and its payload) with the reply's payload.
    using Serve = std::function<std::vector<char>(uint32_t type, isolation::Reader& request)>;

    // Starts rudder-controller-host for `type` and waits until it has loaded the library. `where` prefixes every
    // message. The child limits its own data to `memory_limit` bytes (RLIMIT_DATA) before it loads anything; 0 = no
    // limit. Throws PluginError (the helper is missing, the library fails to load there, the child dies).
    RemoteController(const ControllerType& type, std::string where, uint64_t memory_limit = 0);
    ~RemoteController();  // destroys the instance in the child (briefly waiting) and reaps it, killing it if need be
    RemoteController(const RemoteController&) = delete;
    RemoteController& operator=(const RemoteController&) = delete;

    // Sends one call and returns its reply's payload, serving the plugin's service requests meanwhile. `call` and
    // `when` name the call in messages ("step", " at step 3"). A child that dies, or does not reply within
    // `time_limit` seconds (0 = no limit; it is then killed), fails the call with a PluginError that says so; the
    // controller is unusable after that. `fds` (at most isolation::kMaxFds) are passed along. Once `*cancel` turns
    // true (checked every kCancelPollMs while waiting), the child is killed and the call throws CallCancelled.
    std::vector<char> call(uint32_t type, const isolation::Writer& request, const char* call, const std::string& when,
                           double time_limit, const Serve& serve, const std::vector<int>& fds = {},
                           const std::atomic<bool>* cancel = nullptr);
    static constexpr int kCancelPollMs = 50;

    bool alive() const { return pid_ > 0 && dead_reason_.empty(); }
    pid_t pid() const { return pid_; }

private:
    [[noreturn]] void fail(const std::string& what);
    std::string reap(bool kill_first);  // ends and reaps the child: how it ended
    std::string where_;
    uint64_t memory_limit_ = 0;
    int socket_ = -1;
    pid_t pid_ = -1;
    bool reaped_ = false;
    std::string dead_reason_;  // set once the child is gone
};

}  // namespace rudder::plugins
