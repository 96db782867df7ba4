// Process isolation, the host's end: starting rudder-controller-host with posix_spawn (never a fork of this
// multi-threaded process), talking to it over a socketpair, and turning its death or silence into a PluginError.
#include "remote_controller.hpp"

#include "child_process.hpp"

#include <rudder/base/paths.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>

extern char** environ;

namespace rudder::plugins {
namespace {

using namespace isolation;
constexpr double kStartupLimit = 60.0;  // seconds for the child to load the library
constexpr double kDestroyLimit = 2.0;   // seconds destroy() may take before the child is killed

std::string seconds_text(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", seconds);
    return text;
}

}  // namespace

void SharedMemory::allocate(size_t size) {
    release();
    const int fd = ::memfd_create("rudder-step", MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
        const int error = errno;
        ::close(fd);
        throw std::runtime_error(std::string("sizing shared memory: ") + std::strerror(error));
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        throw std::runtime_error(std::string("mapping shared memory: ") + std::strerror(error));
    }
    fd_ = fd;
    data_ = static_cast<char*>(p);
    size_ = size;
}

void SharedMemory::release() {
    if (data_ != nullptr) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
    data_ = nullptr;
    fd_ = -1;
    size_ = 0;
}

RemoteController::RemoteController(const ControllerType& type, std::string where, uint64_t memory_limit)
    : where_(std::move(where)), memory_limit_(memory_limit) {
    const std::filesystem::path helper = controller_host_file();
    std::error_code error;
    if (!std::filesystem::is_regular_file(helper, error))
        throw PluginError(where_ + ": cannot run in a process of its own: the helper " + helper.string() +
                          " is missing (set RUDDER_CONTROLLER_HOST, or install Rudder whole)");
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
        throw PluginError(where_ + ": cannot run in a process of its own: socketpair: " + std::strerror(errno));
    // Both ends numbered above 3, so that dup2 onto 3 in the child always makes a fresh, inheritable descriptor.
    const int mine = ::fcntl(pair[0], F_DUPFD_CLOEXEC, 10), theirs = ::fcntl(pair[1], F_DUPFD_CLOEXEC, 10);
    ::close(pair[0]);
    ::close(pair[1]);
    if (mine < 0 || theirs < 0) {
        if (mine >= 0) ::close(mine);
        if (theirs >= 0) ::close(theirs);
        throw PluginError(where_ + ": cannot run in a process of its own: " + std::strerror(errno));
    }
    socket_ = mine;

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);  // what the plugin prints never mixes into our stdout
    posix_spawn_file_actions_adddup2(&actions, theirs, kChildSocketFd);
    start_with_default_signals(attr);
    const std::string helper_text = helper.string(), library_text = type.path.string(), id = type.id(),
                      parent = std::to_string(::getpid()), limit = std::to_string(memory_limit);
    char* argv[] = {const_cast<char*>(helper_text.c_str()), const_cast<char*>(library_text.c_str()),
                    const_cast<char*>(id.c_str()),          const_cast<char*>(parent.c_str()),
                    const_cast<char*>(limit.c_str()),       nullptr};
    pid_t pid = -1;
    const int spawn_error = ::posix_spawn(&pid, helper_text.c_str(), &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(theirs);
    if (spawn_error != 0) {
        ::close(socket_);
        socket_ = -1;
        throw PluginError(where_ + ": cannot run in a process of its own: starting " + helper_text +
                          " failed: " + std::strerror(spawn_error));
    }
    pid_ = pid;
    try {
        call(0, Writer(), "loading its library", "", kStartupLimit, nullptr);
    } catch (...) {
        if (!reaped_) reap(true);
        ::close(socket_);
        socket_ = -1;
        throw;
    }
}

RemoteController::~RemoteController() {
    if (pid_ > 0 && !reaped_) {
        if (dead_reason_.empty()) {
            try {
                call(kDestroy, Writer(), "destroy", "", kDestroyLimit, nullptr);
            } catch (...) {
                // Killed or already gone: either way it is reaped below.
            }
        }
        if (!reaped_) reap(false);
    }
    if (socket_ >= 0) ::close(socket_);
}

std::string RemoteController::reap(bool kill_first) {
    if (reaped_ || pid_ <= 0) return "";
    // Ending by itself (its end of the socket closed): a moment to finish; otherwise killed at once.
    const auto now = std::chrono::steady_clock::now();
    const ChildEnd end = wait_for_child(pid_, kill_first ? now : now + std::chrono::seconds(2));
    reaped_ = true;
    if (!end.known) return "its process ended (how is unknown: this application ignores SIGCHLD)";
    if (kill_first && end.timed_out) return "its process was killed";
    const int status = end.status;
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        std::string text = "its process (pid " + std::to_string(pid_) + ") was killed by " + signal_text(sig);
        if (sig == SIGSEGV || sig == SIGBUS)
            text += ": a memory error or a stack overflow in the plugin";
        else if (sig == SIGABRT)
            text += ": the plugin called abort() or failed an assertion, or the C library found a corrupted heap";
        else if (sig == SIGKILL)
            text += " (out of memory, or killed from outside)";
        if (memory_limit_ > 0 && (sig == SIGSEGV || sig == SIGABRT || sig == SIGKILL))
            text += "; its memory limit was " + std::to_string(memory_limit_ / 1000000) + " MB (--max-memory)";
        return text;
    }
    if (WIFEXITED(status))
        return "its process (pid " + std::to_string(pid_) + ") ended with exit status " +
               std::to_string(WEXITSTATUS(status)) + ": the plugin ended the process (exit() or similar)";
    return "its process ended";
}

void RemoteController::fail(const std::string& what) {
    if (dead_reason_.empty()) dead_reason_ = what;
    throw PluginError(where_ + ": " + what);
}

std::vector<char> RemoteController::call(uint32_t type, const Writer& request, const char* call_name,
                                         const std::string& when, double time_limit, const Serve& serve,
                                         const std::vector<int>& fds, const std::atomic<bool>* cancel) {
    if (!dead_reason_.empty())
        throw PluginError(where_ + ": cannot " + call_name + when + ": the controller's process is gone (" +
                          dead_reason_ + ")");
    const auto died = [&]() -> std::string {
        return std::string(call_name) + " did not complete" + when + ": " + reap(false) +
               "; the host is unaffected, this controller cannot be used again";
    };
    if (type != 0 && !send_message(socket_, type, request.data(), fds.data(), static_cast<int>(fds.size())))
        fail(died());

    using clock = std::chrono::steady_clock;
    const bool limited = time_limit > 0;
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                             std::chrono::duration<double>(limited ? time_limit : 0));
    for (;;) {
        if (cancel != nullptr && cancel->load()) {
            const pid_t pid = pid_;
            reap(true);
            dead_reason_ = "its process was stopped when the run was cancelled";
            throw CallCancelled(where_ + ": " + call_name + when + " was cancelled; its process (pid " +
                                std::to_string(pid) + ") was stopped");
        }
        int wait = -1;
        if (limited) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
            wait = left > 0 ? static_cast<int>(std::min<long long>(left + 1, 1 << 30)) : 0;
        }
        if (cancel != nullptr) wait = wait < 0 ? kCancelPollMs : std::min(wait, kCancelPollMs);
        pollfd p{socket_, POLLIN, 0};
        const int ready = ::poll(&p, 1, wait);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
            if (!limited || clock::now() < deadline) continue;
            reap(true);
            fail(std::string(call_name) + " did not return within its time limit of " + seconds_text(time_limit) +
                 " s" + when + ", so its process (pid " + std::to_string(pid_) +
                 ") was killed (the recipe's time_limit for this controller); the host is unaffected, this "
                 "controller cannot be used again");
        }
        Header header{};
        std::vector<char> payload;
        int received_fds[kMaxFds];
        if (ready < 0 || !receive_message(socket_, header, payload, received_fds)) fail(died());
        for (int fd : received_fds)
            if (fd >= 0) ::close(fd);
        switch (header.type) {
            case kReady:
            case kReply: return payload;
            case kFatal: {
                Reader r(payload);
                std::string message;
                try {
                    message = r.text();
                } catch (const std::exception&) {
                    message = "(no message)";
                }
                reap(false);
                fail(std::string(call_name) + " failed" + when + " in its process: " + message);
            }
            default: {
                if (header.type < kTokenize || header.type > kTokenPieces || !serve) {
                    reap(true);
                    fail(std::string(call_name) + when + ": its process sent an unexpected message " +
                         std::to_string(header.type) + " and was stopped");
                }
                std::vector<char> answer;
                try {
                    Reader r(payload);
                    answer = serve(header.type, r);
                } catch (const std::exception& e) {
                    reap(true);
                    fail(std::string(call_name) + when + ": a malformed service request from its process (" + e.what() +
                         "); it was stopped");
                }
                if (!send_message(socket_, kServiceReply, answer)) fail(died());
            }
        }
    }
}

}  // namespace rudder::plugins
