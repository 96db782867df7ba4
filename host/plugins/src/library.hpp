// Internal to rudder_plugins: the loaded-library object that ControllerType and ControllerInstance share, and the
// load error that keeps the bare reason apart from the file name (the registry lists the two separately).
#pragma once

#include <rudder/plugins/loader.hpp>

#include <boost/dll/shared_library.hpp>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace rudder::plugins {

class Library {
public:
    Library(boost::dll::shared_library library, std::filesystem::path path, const rudder_plugin* plugin,
            std::string sha256)
        : library_(std::move(library)), path_(std::move(path)), plugin_(plugin), sha256_(std::move(sha256)) {}
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;

    const std::filesystem::path& path() const { return path_; }
    const rudder_plugin& plugin() const { return *plugin_; }
    // SHA-256 (lowercase hex) of the file that was loaded: the digest a recipe's "sha256" pins.
    const std::string& sha256() const { return sha256_; }
    // Serialises every call into controllers of this library that are not RUDDER_CAP_THREAD_SAFE.
    std::mutex& call_mutex() { return call_mutex_; }

private:
    boost::dll::shared_library library_;  // unloaded (dlclose) when the last shared_ptr to this goes away
    std::filesystem::path path_;
    const rudder_plugin* plugin_;
    std::string sha256_;
    std::mutex call_mutex_;
};

// Thrown by load_library(): what() is "<path>: <reason>", reason() is the reason alone.
class LoadError : public PluginError {
public:
    LoadError(const std::filesystem::path& path, const std::string& reason)
        : PluginError(path.string() + ": " + reason), reason_(reason) {}
    const std::string& reason() const { return reason_; }

private:
    std::string reason_;
};

// What scanning one library found: its controllers, or why it is rejected. The scanner child process produces
// one (describe_library) and sends it as JSON; the index file keeps them.
struct ScanResult {
    bool ok = false;
    std::string reason;  // when !ok: the bare reason, without the file name
    std::string plugin;  // the plugin's name
    std::string sha256;
    std::vector<ControllerInfo> controllers;  // path left empty: the caller knows it
};

// Loads `path` into this process with load_library() and describes what it offers; never throws. Runs in the
// scanner child process (or in-process when no scanner is installed).
ScanResult describe_library(const std::filesystem::path& path);

}  // namespace rudder::plugins
