// Internal to rudder_plugins: the plugin index. Each library in the search path is scanned once, in a child process
// (rudder-plugin-scan) so that one which crashes, aborts, exits or hangs while loading cannot take the host down,
// and what the scan found is kept in a JSON file keyed by the library's canonical path, size, mtime, ctime and inode.
#pragma once

#include "library.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace rudder::plugins {

// The scan result as the scanner sends it and the index keeps it, and back. from_json throws nlohmann's exceptions
// on a malformed value.
nlohmann::json scan_result_to_json(const ScanResult& result);
ScanResult scan_result_from_json(const nlohmann::json& j);

// Seconds a scanner child may take: $RUDDER_PLUGIN_SCAN_TIMEOUT, default 10.
double scan_timeout_seconds();

// Scans `library` in a child process running `scanner`. A child that is killed by a signal, exits without a
// result, or runs past `timeout_s` (then killed) gives a rejection naming what happened. `cacheable` is set false
// when the scan failed for a reason of this host's (the scanner could not be started), not of the library's.
ScanResult scan_in_child(const std::filesystem::path& scanner, const std::filesystem::path& library, double timeout_s,
                         bool& cacheable);

// The index file, read at construction and written by save() only if something changed. An unreadable or
// corrupt file, or one written by another host version, counts as empty; a file that cannot be written is not
// written (every later run scans again).
class PluginIndex {
public:
    explicit PluginIndex(std::filesystem::path file);

    // What the index or a fresh scan says about `library`. A scan happens (and is counted in `scans`) when the index
    // has no entry for the file's canonical path or the file's size, mtime, ctime or inode changed. Without a
    // scanner executable the library is described in-process (the old, unguarded way) and not kept.
    ScanResult examine(const std::filesystem::path& library, size_t& scans);

    // Writes the index (temp file + rename), dropping entries whose file no longer exists. Never throws.
    void save();

private:
    std::filesystem::path file_;
    nlohmann::json libraries_ = nlohmann::json::object();
    bool dirty_ = false;
};

}  // namespace rudder::plugins
