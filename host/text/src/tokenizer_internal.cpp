#include "tokenizer_internal.hpp"

#include <rudder/rudder_json.hpp>
#include <rudder/text/text_files.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace rudder::tokenizer_internal {

using json_input::shown;  // a value in a message, cut short

std::string read_file(const std::string& path) { return read_small_file(path, kMaxTokenizerFileBytes); }

void TokenTable::add_token(const std::string& text, int64_t id, const std::string& where) {
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        throw std::runtime_error(where + ": token id " + std::to_string(id) + " out of range");
    }
    if (text.empty()) throw std::runtime_error(where + ": empty token");
    const auto found = ids.find(text);
    if (found != ids.end() && found->second != id) {
        throw std::runtime_error(where + ": token \"" + text + "\" has id " + std::to_string(id) + " but already id " +
                                 std::to_string(found->second));
    }
    const auto slot = static_cast<size_t>(id);
    if (slot >= tokens.size()) tokens.resize(slot + 1);
    if (!tokens[slot].empty() && tokens[slot] != text) {
        throw std::runtime_error(where + ": id " + std::to_string(id) + " is both \"" + tokens[slot] + "\" and \"" +
                                 text + "\"");
    }
    tokens[slot] = text;
    ids[text] = id;
}

int64_t TokenTable::special_id(const std::string& source, const std::string& name, const char* role) const {
    if (name.empty()) return -1;
    const auto found = ids.find(name);
    if (found == ids.end()) {
        throw std::runtime_error(source + ": the " + std::string(role) + " token \"" + name +
                                 "\" is not a token of the file");
    }
    return found->second;
}

void AddedTokenSplitter::add(const std::string& content, int64_t id) {
    auto& bucket = by_first_byte_[static_cast<unsigned char>(content[0])];
    bucket.push_back({content, id});
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
}

const std::string& TokenTable::token_at(int64_t id, const char* kind) const {
    if (id < 0 || id >= static_cast<int64_t>(tokens.size()) || tokens[static_cast<size_t>(id)].empty()) {
        throw std::out_of_range("token id " + std::to_string(id) + " is not a token of this " + kind +
                                " vocabulary (size " + std::to_string(tokens.size()) + ")");
    }
    return tokens[static_cast<size_t>(id)];
}

int64_t TokenTable::id_of(const std::string& token) const {
    const auto found = ids.find(token);
    return found == ids.end() ? -1 : found->second;
}

std::string path_of(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
}

void JsonFields::unsupported(const std::string& path, const std::string& found, const std::string& supported) const {
    throw std::runtime_error(source_ + ": " + path + " is " + found + "; Rudder's " + model_ + " supports " +
                             supported);
}

void JsonFields::expect_member(const json& object, const std::string& parent, const std::string& key,
                               const std::vector<json>& allowed, const std::string& supported) const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return;
    for (const json& value : allowed) {
        if (*found == value) return;
    }
    unsupported(path_of(parent, key), shown(*found), supported);
}

const json& JsonFields::member(const json& object, const std::string& parent, const std::string& key) const {
    const auto found = object.find(key);
    if (found == object.end()) throw std::runtime_error(source_ + ": " + path_of(parent, key) + " is missing");
    return *found;
}

json JsonFields::parse_top_level(std::string_view json_text) const {
    json root;
    try {
        root = json::parse(json_text.begin(), json_text.end());
    } catch (const json::exception& e) {  // a syntax error, or a number out of range (406)
        throw std::runtime_error(source_ + ": not JSON: " + e.what());
    }
    if (!root.is_object()) unsupported("the top level", shown(root), "an object");
    expect_member(root, "", "truncation", {}, "null");
    expect_member(root, "", "padding", {}, "null");
    return root;
}

std::string JsonFields::type_of(const json& object, const std::string& path) const {
    if (!object.is_object()) unsupported(path, shown(object), "an object with a \"type\"");
    const json& type = member(object, path, "type");
    if (!type.is_string()) unsupported(path_of(path, "type"), shown(type), "a string");
    return type.get<std::string>();
}

}  // namespace rudder::tokenizer_internal
