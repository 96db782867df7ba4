// Plugin discovery: scanning the search path, and turning a recipe's "plugin" value into a controller type.
#include "plugin_index.hpp"

#include <rudder/plugins/plugins.hpp>

#include <rudder/base/paths.hpp>
#include <rudder/rudder_json.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace rudder::plugins {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLibrarySuffix = ".so";

bool ends_with(const std::string& text, const std::string& suffix) {
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "'a'", "'a' or 'b'", "'a', 'b' or 'c'".
std::string quoted_alternatives(const std::vector<std::string>& names) {
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) {
        if (i > 0) text += (i + 1 == names.size()) ? " or " : ", ";
        text += "'" + names[i] + "'";
    }
    return text;
}

std::string joined(const std::vector<std::string>& items, const char* separator) {
    std::string text;
    for (size_t i = 0; i < items.size(); ++i) text += (i > 0 ? separator : "") + items[i];
    return text;
}

// "a, b" for the folders of a search path; "" for an empty one.
std::string folders_text(const std::vector<fs::path>& search_path) {
    std::vector<std::string> dirs;
    for (const auto& dir : search_path) dirs.push_back(dir.string());
    return joined(dirs, ", ");
}

template <class Types>
std::vector<std::string> ids_of(const Types& types) {
    std::vector<std::string> ids;
    ids.reserve(types.size());
    for (const auto& type : types) {
        if constexpr (std::is_same_v<typename Types::value_type, ControllerInfo>)
            ids.push_back(type.id);
        else
            ids.push_back(type.id());
    }
    return ids;
}

}  // namespace

Registry::Registry(std::vector<fs::path> search_path) : search_path_(std::move(search_path)) {}

std::vector<fs::path> Registry::default_search_path() {
    std::vector<fs::path> dirs = split_path_list(std::getenv("RUDDER_PLUGIN_PATH"));
    std::error_code error;
    const fs::path bundled = fs::canonical(bundled_plugin_dir(), error);
    if (!error && fs::is_directory(bundled, error)) dirs.push_back(bundled);
    return dirs;
}

void Registry::scan() {
    if (scanned_) return;
    scanned_ = true;
    std::map<std::string, fs::path> provider_of;  // id -> the file that provides it
    PluginIndex index(index_file());
    std::set<fs::path> scanned_dirs;
    for (const auto& dir : search_path_) {
        std::error_code error;
        if (!fs::is_directory(dir, error)) {
            spdlog::debug("plugin search path entry {} is not a directory; skipped", dir.string());
            continue;
        }
        // The same folder listed twice (or through a symlink) would only produce duplicate-id noise.
        const fs::path canonical_dir = fs::canonical(dir, error);
        if (!scanned_dirs.insert(error ? dir : canonical_dir).second) continue;

        std::vector<fs::path> files;
        error.clear();
        for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
            std::error_code type_error;
            if (it->path().extension() == kLibrarySuffix && !it->is_directory(type_error)) files.push_back(it->path());
        }
        if (error) {
            rejections_.push_back({dir, "could not list the folder: " + error.message()});
            continue;
        }
        // Directory order is arbitrary; sorting makes "first occurrence wins" the same on every machine.
        std::sort(files.begin(), files.end(),
                  [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });

        for (const auto& file : files) {
            // A symlink may lead to a library in a folder of the search path, not to one outside it.
            if (!in_search_path(file)) {
                std::error_code link_error;
                rejections_.push_back({file, "a symlink to " + fs::read_symlink(file, link_error).string() +
                                                 ", outside the folders of the plugin search path: not loaded"});
                continue;
            }
            ScanResult result = index.examine(file, scanned_in_child_);
            if (!result.ok) {
                rejections_.push_back({file, result.reason});
                continue;
            }
            for (auto& info : result.controllers) {
                const auto [existing, inserted] = provider_of.emplace(info.id, file);
                if (!inserted) {
                    rejections_.push_back(
                        {file, "id '" + info.id + "' already provided by " + existing->second.string()});
                    continue;
                }
                info.path = file;
                controllers_.push_back(std::move(info));
            }
        }
    }
    index.save();
    for (const auto& rejection : rejections_)
        spdlog::debug("plugin {} rejected: {}", rejection.path.string(), rejection.reason);
}

fs::path Registry::index_file() {
    const fs::path dir = user_cache_dir();
    return dir.empty() ? fs::path() : dir / "plugin-index.json";
}

size_t Registry::scanned_in_child() {
    std::lock_guard<std::mutex> lock(mutex_);
    return scanned_in_child_;
}

const std::vector<ControllerInfo>& Registry::controllers() {
    std::lock_guard<std::mutex> lock(mutex_);
    scan();
    return controllers_;
}

const std::vector<Rejection>& Registry::rejections() {
    std::lock_guard<std::mutex> lock(mutex_);
    scan();
    return rejections_;
}

ControllerType Registry::resolve(const std::string& name, const fs::path& base_dir, const std::string& sha256) {
    ControllerType type = find(name, base_dir);
    if (!sha256.empty() && type.sha256() != sha256)
        throw PluginError(type.path.string() + ": its SHA-256 is " + type.sha256() + ", but the recipe pins " + sha256 +
                          " for '" + name + "'; refused (the file is not the one the recipe was written for)");
    return type;
}

bool Registry::in_search_path(const fs::path& file) const {
    // Where the file really is: every symlink resolved, the file's own included (a file that does not exist is
    // judged by its folder, and then fails to load).
    std::error_code error;
    const fs::path folder = fs::weakly_canonical(fs::absolute(file, error), error).parent_path();
    if (error) return false;
    for (const auto& dir : search_path_) {
        std::error_code dir_error;
        const fs::path canonical_dir = fs::canonical(dir, dir_error);
        if (!dir_error && canonical_dir == folder) return true;
    }
    return false;
}

ControllerType Registry::find(const std::string& name, const fs::path& base_dir) {
    if (name.empty()) throw PluginError("empty controller plugin name");
    if (name.size() > json_input::kMaxNameBytes)
        throw PluginError("a controller plugin name or path of " + std::to_string(name.size()) +
                          " bytes is over the limit of " + std::to_string(json_input::kMaxNameBytes));

    // "dir/file.so#id" picks one controller out of a library that offers several.
    std::string file_part = name;
    std::string selector;
    if (const size_t hash = name.rfind('#'); hash != std::string::npos) {
        file_part = name.substr(0, hash);
        selector = name.substr(hash + 1);
    }
    const bool is_path = file_part.find('/') != std::string::npos || ends_with(file_part, kLibrarySuffix);
    if (is_path) {
        fs::path file(file_part);
        if (file.is_relative() && !base_dir.empty()) file = base_dir / file;
        if (!in_search_path(file)) {
            throw PluginError(
                file.string() + ": not in a folder of the plugin search path (" +
                (search_path_.empty() ? std::string("which is empty") : folders_text(search_path_)) +
                "); plugins load only from there, so add its folder to the search path (RUDDER_PLUGIN_PATH, "
                "or the application's plugin folders)");
        }
        // Scanned in a child first (or known from the index): a library that crashes or hangs is refused, not run.
        std::error_code error;
        if (fs::is_regular_file(file, error)) {
            std::lock_guard<std::mutex> lock(mutex_);
            PluginIndex index(index_file());
            const ScanResult scanned = index.examine(file, scanned_in_child_);
            index.save();
            if (!scanned.ok) throw LoadError(file, scanned.reason);
        }
        std::vector<ControllerType> types = load_library(file);  // throws PluginError naming the file
        if (!selector.empty()) {
            for (auto& type : types)
                if (type.id() == selector) return std::move(type);
            throw PluginError(file.string() + ": offers no controller '" + selector + "' (it offers " +
                              quoted_alternatives(ids_of(types)) + ")");
        }
        if (types.size() != 1)
            throw PluginError(file.string() + ": offers " + std::to_string(types.size()) + " controllers (" +
                              quoted_alternatives(ids_of(types)) + "); name one as '" + file_part + "#<id>'");
        return std::move(types.front());
    }

    fs::path provider;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        scan();
        for (const auto& info : controllers_)
            if (info.id == name) provider = info.path;
    }
    if (!provider.empty()) {
        // The only library this loads into the process: the one the index names for the id.
        for (auto& type : load_library(provider))  // throws PluginError naming the file
            if (type.id() == name) return std::move(type);
        throw PluginError(provider.string() + ": no longer offers controller '" + name +
                          "' (the file changed since it was scanned)");
    }
    std::lock_guard<std::mutex> lock(mutex_);

    std::string message = "no controller plugin with id '" + name + "' in " +
                          (search_path_.empty() ? std::string("an empty plugin search path (set RUDDER_PLUGIN_PATH)")
                                                : folders_text(search_path_));
    const std::vector<std::string> known = ids_of(controllers_);
    const std::vector<std::string> suggestions = json_input::near_misses(name, known);
    if (!suggestions.empty())
        message += "; did you mean " + quoted_alternatives(suggestions) + "?";
    else if (!known.empty())
        message += "; available: " + joined(known, ", ");
    else
        message += "; no usable plugin was found there";
    if (!rejections_.empty()) {
        message += "\nfiles that were rejected:";
        for (const auto& rejection : rejections_) message += "\n  " + rejection.path.string() + ": " + rejection.reason;
    }
    throw PluginError(message);
}

}  // namespace rudder::plugins
