#include "model_catalog.hpp"

#include <algorithm>

#include <rudder/nn/model_files.hpp>
#include <rudder/rudder_json.hpp>
#include <rudder/runtime/model.hpp>

#include "answers.hpp"

namespace rudder::serve {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxEntries = 10000;

bool inside(const fs::path& path, const fs::path& root) {
    const auto [r, p] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
    return r == root.end();
}

}  // namespace

bool is_model_name(const std::string& name) {
    if (name.empty() || name.size() > 128 || name[0] == '.') return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
    });
}

ModelCatalog::ModelCatalog(std::vector<fs::path> folders, std::map<std::string, fs::path> named, bool allow_paths)
    : folders_(std::move(folders)), named_(std::move(named)), allow_paths_(allow_paths) {}

std::vector<std::string> ModelCatalog::names() const {
    std::vector<std::string> out = list_models(folders_);
    out.erase(std::remove_if(out.begin(), out.end(), [](const std::string& n) { return !is_model_name(n); }),
              out.end());
    for (const auto& [name, dir] : named_) out.push_back(name);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

fs::path ModelCatalog::find(const std::string& model, const fs::path& base_dir) const {
    std::error_code ec;
    fs::path dir;
    if (const auto it = named_.find(model); it != named_.end()) {
        dir = it->second;
    } else if (is_model_name(model)) {
        for (const auto& folder : folders_)
            if (fs::is_directory(folder / model, ec)) {
                dir = folder / model;
                break;
            }
    }
    if (dir.empty() && allow_paths_ && !model.empty() && model.size() < 4096) {
        const fs::path as_path = fs::path(model).is_absolute() ? fs::path(model) : base_dir / model;
        if (!fs::is_directory(as_path, ec))
            throw ModelError("model directory '" + as_path.string() + "' does not exist");
        dir = as_path;
    }
    if (dir.empty()) {
        const std::vector<std::string> known = names();
        std::string message = is_model_name(model) || allow_paths_
                                  ? "no model named '" + quoted(model) + "' on this server"
                                  : "'" + quoted(model) +
                                        "' is not a model's name; this server takes no paths, only the names "
                                        "GET /v1/models lists";
        // Only for a name of a sensible length: the edit distance costs the product of the lengths.
        const std::string guess = is_model_name(model) ? json_input::closest_match(model, known) : std::string();
        if (!guess.empty()) message += "; did you mean '" + guess + "'?";
        message += known.empty() ? " (it has none)" : " (it has: ";
        for (size_t i = 0; i < known.size() && i < 50; ++i) message += (i ? ", " : "") + known[i];
        if (known.size() > 50) message += ", ...";
        if (!known.empty()) message += ")";
        throw ModelError(message);
    }
    check_model_folder(dir);
    return dir;
}

void check_model_folder(const fs::path& dir) {
    std::error_code ec;
    const fs::path root = fs::canonical(dir, ec);
    if (ec || !fs::is_directory(root, ec)) throw ModelError("model folder '" + dir.string() + "' cannot be read");
    size_t entries = 0;
    fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
    if (ec) throw ModelError("model folder '" + dir.string() + "' cannot be read");
    for (; it != end; it.increment(ec)) {
        if (ec) throw ModelError("model folder '" + dir.string() + "' cannot be read");
        if (++entries > kMaxEntries)
            throw ModelError("model folder '" + dir.string() + "' holds more than " + std::to_string(kMaxEntries) +
                             " entries");
        const fs::path entry = it->path();
        const std::string shown =
            "'" + entry.lexically_relative(root).string() + "' in model folder '" + dir.string() + "'";
        fs::file_status status = it->symlink_status(ec);
        if (fs::is_symlink(status)) {
            const fs::path target = fs::canonical(entry, ec);
            if (ec) throw ModelError(shown + " is a link to nothing");
            if (!inside(target, root)) throw ModelError(shown + " links outside the model's folder; refused");
            status = fs::status(target, ec);
        }
        if (!fs::is_regular_file(status) && !fs::is_directory(status))
            throw ModelError(shown + " is not a regular file (a FIFO, socket or device); refused");
    }
}

}  // namespace rudder::serve
