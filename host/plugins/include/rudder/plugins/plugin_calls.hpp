// The process-wide view of the plugin calls that run in this process (in-process controllers), for what only the
// process as a whole can do about them: end the process with a failure when a plugin calls exit() during a call, and
// tell a signal handler whether a call is running that has not returned since the signal came.
#pragma once

#include <cstdint>

namespace rudder::plugins {

// The exit status of a process a plugin ended with exit() or quick_exit() during one of its calls in this process.
constexpr int kPluginExitStatus = 70;  // EX_SOFTWARE

// Installs, once per process, handlers for exit() and quick_exit(): called on a thread that is inside an in-process
// plugin call (create, begin, step, evaluate, destroy), they write "rudder: error: controller '...' (id, file) ended
// the process (exit() called inside the plugin) ..." on standard error and end the process with kPluginExitStatus,
// whatever status the plugin asked for, so that a plugin's exit(0) never passes for a run that succeeded. The
// in-process transport installs them before its first call; exit() on any other thread is left alone. _exit() and a
// plugin's own threads are beyond it: a controller that may do that needs a process of its own ("isolation":
// "process").
void guard_exit_during_plugin_calls();

// How many in-process plugin calls have started so far, and how many are running now. Both read lock-free atomics:
// a signal handler may call this (a call that is still running, with no call started since the signal came, is a
// call that has not returned since).
struct PluginCalls {
    uint64_t started = 0;
    int64_t running = 0;
};
PluginCalls plugin_calls() noexcept;

// Marks one in-process plugin call for the two functions above, from construction to destruction, on this thread.
// `where` names the controller and the call ("controller 'x' (id, file): step"); it must outlive the object.
class PluginCallScope {
public:
    explicit PluginCallScope(const char* where) noexcept;
    ~PluginCallScope();
    PluginCallScope(const PluginCallScope&) = delete;
    PluginCallScope& operator=(const PluginCallScope&) = delete;

private:
    const char* previous_;
};

}  // namespace rudder::plugins
