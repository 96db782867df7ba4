#include "child_process.hpp"

#include <rudder/plugins/loader.hpp>

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

namespace rudder::plugins {

bool child_memory_limits_apply() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return false;
#else
    return true;
#endif
#else
    return true;
#endif
}

void start_with_default_signals(posix_spawnattr_t& attr) {
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

ChildEnd wait_for_child(pid_t pid, std::chrono::steady_clock::time_point deadline) {
    ChildEnd end;
    for (;;) {
        const pid_t done = ::waitpid(pid, &end.status, WNOHANG);
        if (done == pid) return end;
        if (done < 0 && errno == ECHILD) {  // SIGCHLD ignored by the application: reaped already, status unknown
            end.known = false;
            return end;
        }
        if (done < 0 && errno != EINTR) break;
        if (std::chrono::steady_clock::now() >= deadline) {
            end.timed_out = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::kill(pid, SIGKILL);
    pid_t done;
    while ((done = ::waitpid(pid, &end.status, 0)) < 0 && errno == EINTR) {
    }
    if (done < 0) end.known = false;
    return end;
}

std::string signal_text(int sig) {
    const char* name = ::strsignal(sig);
    return "signal " + std::to_string(sig) + (name != nullptr ? std::string(" (") + name + ")" : std::string());
}

}  // namespace rudder::plugins
