// The part of the host's plugin contract that needs no LibTorch: loading one library and negotiating the ABI, and
// what a scan of a library finds. rudder-plugin-scan (the child process the registry scans libraries in) links
// only this part, so it starts in milliseconds.
#pragma once

#include <rudder/rudder_plugin.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::plugins {

// Every failure of a plugin or of loading one. The message names the file or controller and the reason.
class PluginError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A call into a controller's process that was stopped because the run was cancelled (ControllerInstance::
// set_cancel_flag): not the plugin's failure, so "on_failure": "continue" does not swallow it.
class CallCancelled : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Library;  // a loaded shared library; stays loaded while anything made from it is alive

// One controller type offered by a loaded library.
struct ControllerType {
    std::shared_ptr<Library> library;
    const rudder_controller_desc* desc = nullptr;
    std::filesystem::path path;  // the library file

    std::string id() const;
    std::string version() const;
    std::string description() const;
    std::string params_schema() const;  // "" if the plugin gives none
    uint64_t capabilities() const;
    uint32_t abi_major() const;
    uint32_t abi_minor() const;
    // SHA-256 of the library file as loaded, 64 lowercase hex digits.
    std::string sha256() const;
};

// What the plugin index knows about one controller: learnt by loading its library in a child process (or read
// from the index file), so listing controllers never loads a library into this process.
struct ControllerInfo {
    std::string id, version, description;
    uint64_t capabilities = 0;
    uint32_t abi_major = 0, abi_minor = 0;  // the controller descriptor's
    std::filesystem::path path;             // the library file, as found in the search path
    std::string plugin;                     // the library's plugin name
    std::string sha256;                     // of the library file when it was scanned
};

// A file in the search path that could not be used, and why.
struct Rejection {
    std::filesystem::path path;
    std::string reason;
};

// Names of capability bits, e.g. {"logit_delta", "hard_constraint"}.
std::vector<std::string> capability_names(uint64_t capabilities);

// A controller's last_error() after a failed call (self = NULL after a failed create), copied and cut at 16 KB; a
// plugin that breaks the "never NULL" rule, or throws there, still gets a readable report.
std::string plugin_message(const rudder_controller_desc* desc, void* self);

// The host services table given to every plugin (log through spdlog; no extensions yet).
const rudder_host* host_services();

// Whether a process-isolated controller's memory limit (RLIMIT_DATA) is applied in this build: not under
// AddressSanitizer or ThreadSanitizer, whose shadow memory (terabytes of reserved private mappings) counts toward it
// and would fail the child before it runs.
bool child_memory_limits_apply();

// Loads one file into this process and negotiates the ABI. Throws PluginError naming the file and the reason for:
// not a shared library, no rudder_plugin_entry symbol, entry returned NULL, another ABI major, a descriptor whose
// struct_size is too small, more than kMaxControllersPerLibrary controllers, a controller with missing callbacks
// or an invalid id. A library that crashes or hangs while loading takes this process with it: the Registry scans
// libraries in a child process first.
constexpr uint32_t kMaxControllersPerLibrary = 4096;
std::vector<ControllerType> load_library(const std::filesystem::path& path);

}  // namespace rudder::plugins
