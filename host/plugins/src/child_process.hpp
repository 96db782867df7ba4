// Ending the child processes the loader starts (the plugin scanner, the isolated controller host): how a child
// ended, waited for until a deadline, then killed.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <chrono>
#include <string>

namespace rudder::plugins {

struct ChildEnd {
    bool known = true;       // false: the application ignores SIGCHLD, so the status was lost
    bool timed_out = false;  // still running at the deadline: killed with SIGKILL
    int status = 0;          // waitpid's status, when known
};

// Polls `pid` until it ends or `deadline` passes; past the deadline (or if waiting fails) kills it and reaps it.
ChildEnd wait_for_child(pid_t pid, std::chrono::steady_clock::time_point deadline);

// The child starts with no blocked signals and default dispositions, whatever this process has set.
void start_with_default_signals(posix_spawnattr_t& attr);

// "signal 11 (Segmentation fault)".
std::string signal_text(int sig);

}  // namespace rudder::plugins
