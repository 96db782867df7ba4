// The models a server serves, as its operator configured them: folders of models (each served by its folder's name)
// and models named one by one (`--model NAME=PATH`). A request names one of them; only where the operator allows it
// (trusted clients) may a request give a path on the server instead.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace rudder::serve {

class ModelCatalog {
public:
    ModelCatalog(std::vector<std::filesystem::path> folders, std::map<std::string, std::filesystem::path> named,
                 bool allow_paths);

    // Every model a request may name, sorted.
    std::vector<std::string> names() const;
    const std::vector<std::filesystem::path>& folders() const { return folders_; }
    const std::map<std::string, std::filesystem::path>& named() const { return named_; }
    bool allows_paths() const { return allow_paths_; }

    // The folder of a request's "model", checked as check_model_folder checks it. Throws ModelError with a message
    // that names no server path: an unknown name lists the names there are; a path, where paths are not allowed, is
    // refused before anything on the disk is looked at (no answer tells what exists).
    std::filesystem::path find(const std::string& model, const std::filesystem::path& base_dir) const;

private:
    std::vector<std::filesystem::path> folders_;
    std::map<std::string, std::filesystem::path> named_;
    bool allow_paths_;
};

// Whether `name` can be a model's name here: 1 to 128 characters of letters, digits, '.', '_' and '-', not starting
// with '.'.
bool is_model_name(const std::string& name);

// A model folder before it is loaded: a folder whose entries are regular files and folders (no FIFO, socket or
// device, which a load would block on or read without end), every link among them resolving inside the folder, and
// at most 10,000 entries. Throws ModelError naming the entry relative to the folder.
void check_model_folder(const std::filesystem::path& dir);

}  // namespace rudder::serve
