// Where the running program lives, and search-path lists: shared by plugin and model discovery.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace rudder {

// The folder of the running executable (from /proc/self/exe); the current folder if that cannot be read.
std::filesystem::path executable_dir();

// The installation prefix as seen from the code that is running: this runtime is linked either into an executable
// in <prefix>/bin (the CLI, tests) or into librudder.so in <prefix>/<libdir> (C and Python applications), and the
// prefix is found from whichever file holds it (dladdr), so an installed librudder.so finds its own plugins and
// models wherever the application lives. The build tree has the installed layout.
std::filesystem::path install_prefix();
// <prefix>/<libdir>/rudder/plugins and <prefix>/<datadir>/rudder/models (the folders may not exist).
std::filesystem::path bundled_plugin_dir();
std::filesystem::path bundled_model_dir();
// <prefix>/<libdir>/rudder/python: the folder holding the Python package `rudder` (in the build tree, a link to the
// source's python/rudder).
std::filesystem::path python_package_dir();
// The helper that scans a plugin library in a child process: $RUDDER_PLUGIN_SCANNER if set, else
// <prefix>/<libexecdir>/rudder/rudder-plugin-scan (the file may not exist).
std::filesystem::path plugin_scanner_file();
// The helper that runs one controller instance in a child process ("isolation": "process"): $RUDDER_CONTROLLER_HOST
// if set, else <prefix>/<libexecdir>/rudder/rudder-controller-host (the file may not exist).
std::filesystem::path controller_host_file();
// The program that runs some of the rudder command's commands (serve, train, eval): <prefix>/<libexecdir>/rudder/
// rudder-<name> (the file may not exist: `make demo` builds only what the demo runs).
std::filesystem::path helper_program_file(const std::string& name);
// The per-user cache folder: $RUDDER_CACHE_DIR if set ("" if it is set but empty: no cache), else
// $XDG_CACHE_HOME/rudder if that is an absolute path, else $HOME/.cache/rudder, else "".
std::filesystem::path user_cache_dir();

// Splits a ':'-separated list such as $RUDDER_PLUGIN_PATH; empty entries are skipped, NULL gives none.
std::vector<std::filesystem::path> split_path_list(const char* list);

}  // namespace rudder
