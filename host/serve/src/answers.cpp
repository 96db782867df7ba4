#include "answers.hpp"

#include <algorithm>
#include <cstring>

#include <rudder/text/utf8.hpp>

namespace rudder::serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Characters that end a path inside a message.
bool ends_path(char c) { return std::strchr(" \t\n'\"`(),;:[]{}<>", c) != nullptr; }

// Every `from` in `text` that ends where a path may end (`whole`), or anywhere, replaced by `to`.
void replace_all(std::string& text, const std::string& from, const std::string& to, bool whole) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
        const size_t after = at + from.size();
        if (whole && after < text.size() && !ends_path(text[after])) {
            at = after;
            continue;
        }
        text.replace(at, from.size(), to);
        at += to.size();
    }
}

}  // namespace

std::string dump_json(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string quoted(const std::string& text) {
    constexpr size_t kShown = 60;
    std::string cut = text;
    if (cut.size() > kShown) cut = cut.substr(0, utf8::character_start(cut, kShown)) + "...";
    // Through JSON and back: invalid UTF-8 replaced, the text otherwise as it was.
    const std::string encoded = dump_json(cut);
    return json::parse(encoded).get<std::string>();
}

PathRedactor::PathRedactor() {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/", ec)) roots_.insert(entry.path().filename().string());
}

void PathRedactor::add(const fs::path& folder, const std::string& shown_as) {
    std::error_code ec;
    // As given (a relative folder of more than one part: "build/plugins"), absolute, and with its links resolved.
    const bool relative_with_parts = folder.is_relative() && folder.string().find('/') != std::string::npos;
    for (const fs::path& form : {relative_with_parts ? folder.lexically_normal() : fs::path(),
                                 fs::absolute(folder, ec).lexically_normal(), fs::weakly_canonical(folder, ec)}) {
        std::string text = form.string();
        while (text.size() > 1 && text.back() == '/') text.pop_back();
        if (text.size() <= 1) continue;
        if (std::none_of(folders_.begin(), folders_.end(), [&](const auto& f) { return f.first == text; }))
            folders_.emplace_back(text, shown_as);
    }
    std::sort(folders_.begin(), folders_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::string PathRedactor::operator()(const std::string& message) const {
    std::string out = message;
    for (const auto& [folder, shown_as] : folders_) {
        replace_all(out, folder + "/", shown_as.empty() ? std::string() : shown_as + "/", false);
        replace_all(out, folder, shown_as.empty() ? std::string(".") : shown_as, true);
    }
    return cut_other_paths(out);
}

std::string PathRedactor::cut_other_paths(const std::string& message) const {
    std::string out;
    size_t i = 0;
    while (i < message.size()) {
        const bool starts = message[i] == '/' && (i == 0 || ends_path(message[i - 1]));
        if (!starts) {
            out += message[i++];
            continue;
        }
        size_t end = i + 1;
        while (end < message.size() && !ends_path(message[end])) ++end;
        const std::string path = message.substr(i, end - i);
        const std::string first =
            path.substr(1, path.find('/', 1) == std::string::npos ? std::string::npos : path.find('/', 1) - 1);
        if (!first.empty() && roots_.count(first) > 0) {
            const size_t last = path.find_last_of('/');
            out += last == 0 ? std::string("…") : "…" + path.substr(last);
        } else {
            out += path;
        }
        i = end;
    }
    return out;
}

void PathRedactor::scrub(json& answer) const {
    if (!answer.is_object()) return;
    if (answer.contains("error") && answer["error"].is_string())
        answer["error"] = (*this)(answer["error"].get<std::string>());
    // OpenAI's error object, {"error": {"message", "type", "param", "code", and Rudder's "issues"}}.
    if (answer.contains("error") && answer["error"].is_object()) {
        json& error = answer["error"];
        if (error.contains("message") && error["message"].is_string())
            error["message"] = (*this)(error["message"].get<std::string>());
        scrub(error);
    }
    for (const char* list : {"issues", "rejected"}) {
        if (!answer.contains(list) || !answer[list].is_array()) continue;
        for (auto& item : answer[list])
            for (const char* key : {"message", "reason"})
                if (item.is_object() && item.contains(key) && item[key].is_string())
                    item[key] = (*this)(item[key].get<std::string>());
    }
}

}  // namespace rudder::serve
