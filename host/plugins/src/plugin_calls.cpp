#include <rudder/plugins/plugin_calls.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rudder::plugins {
namespace {

std::atomic<uint64_t> g_started{0};
std::atomic<int64_t> g_running{0};
thread_local const char* t_call = nullptr;  // the in-process plugin call this thread is inside, if any

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "plugin_calls() is read from signal handlers");

void write_error(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

// exit() and quick_exit() run this on the thread that called them: inside a plugin call, the plugin ended the
// process, which must not end as the plugin asked (exit(0) would pass for success). Only async-signal-safe calls.
void end_plugin_exit() {
    const char* call = t_call;
    if (call == nullptr) return;
    write_error("\nrudder: error: ");
    write_error(call);
    write_error(
        " ended the process (exit() called inside the plugin); the run did not complete. A controller that "
        "may do that needs \"isolation\": \"process\"\n");
    ::_exit(kPluginExitStatus);
}

}  // namespace

void guard_exit_during_plugin_calls() {
    static std::once_flag once;
    std::call_once(once, [] {
        std::atexit(end_plugin_exit);
        std::at_quick_exit(end_plugin_exit);
    });
}

PluginCalls plugin_calls() noexcept {
    return PluginCalls{g_started.load(std::memory_order_relaxed), g_running.load(std::memory_order_relaxed)};
}

PluginCallScope::PluginCallScope(const char* where) noexcept : previous_(t_call) {
    t_call = where;
    g_started.fetch_add(1, std::memory_order_relaxed);
    g_running.fetch_add(1, std::memory_order_relaxed);
}

PluginCallScope::~PluginCallScope() {
    g_running.fetch_sub(1, std::memory_order_relaxed);
    t_call = previous_;
}

}  // namespace rudder::plugins
