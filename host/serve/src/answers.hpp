// What goes into an answer: JSON text that is always valid UTF-8, messages without the server's paths, and clients'
// own strings cut short when a message quotes them.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rudder::serve {

// json.dump() with invalid UTF-8 replaced by U+FFFD: nlohmann's dump throws on it (type_error 316), and the bytes of
// a URL, a vocabulary's tokens or a plugin's message may be anything.
std::string dump_json(const nlohmann::json& value);

// A client's string as a message quotes it: at most 60 bytes (cut before a character that does not fit), invalid
// UTF-8 replaced.
std::string quoted(const std::string& text);

// Takes the server's paths out of messages. Each folder the server was configured with is shown as a client knows
// it (a model's folder as its model name, a plugin or recipe folder as nothing: "length.so"); any other absolute
// path whose first part is an entry of this machine's root folder is cut to its last part ("…/config.json").
class PathRedactor {
public:
    PathRedactor();
    void add(const std::filesystem::path& folder, const std::string& shown_as);
    std::string operator()(const std::string& message) const;
    // The "error" and issue messages of an answer, and those of a list of rejections.
    void scrub(nlohmann::json& answer) const;

private:
    std::string cut_other_paths(const std::string& message) const;

    std::vector<std::pair<std::string, std::string>> folders_;  // longest first
    std::set<std::string> roots_;                               // the names in "/"
};

}  // namespace rudder::serve
