#include "schema_location.hpp"

#include "json_numbers.hpp"
#include "lang.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace rudder::grammar {

SchemaError::SchemaError(std::string at, const std::string& why)
    : std::runtime_error("schema at '" + at + "': " + why), pointer(std::move(at)) {}

std::string pointer_token(const std::string& token) {
    std::string out = "/";
    for (char c : token) {
        if (c == '~') {
            out += "~0";
        } else if (c == '/') {
            out += "~1";
        } else {
            out += c;
        }
    }
    return out;
}

namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string percent_decoded(const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%' && i + 2 < text.size() && hex_digit(text[i + 1]) >= 0 && hex_digit(text[i + 2]) >= 0) {
            out += static_cast<char>(hex_digit(text[i + 1]) * 16 + hex_digit(text[i + 2]));
            i += 2;
        } else {
            out += text[i];
        }
    }
    return out;
}

constexpr int kMaxNesting =
    256;  // applicators and values nested deeper are refused (keeps the recursion's stack small)

void collect(const Json& root, const SchemaNode& node, std::vector<SchemaNode>& out, std::set<const Json*>& seen,
             int depth = 0) {
    if (!node.schema->is_object() || !seen.insert(node.schema).second) return;
    if (depth > kMaxNesting) throw SchemaError(node.pointer, "applicators nest deeper than 256 levels");
    out.push_back(node);
    for (const char* keyword : {"allOf", "anyOf", "oneOf"}) {
        auto it = node.schema->find(keyword);
        if (it == node.schema->end() || !it->is_array()) continue;
        for (size_t i = 0; i < it->size(); ++i) {
            collect(root, {&(*it)[i], node.pointer + "/" + keyword + "/" + std::to_string(i)}, out, seen, depth + 1);
        }
    }
    if (node.schema->contains("$ref") && (*node.schema)["$ref"].is_string()) {
        collect(root, resolve_ref(root, node), out, seen, depth + 1);
    }
}

}  // namespace

SchemaNode resolve_ref(const Json& root, const SchemaNode& node) {
    const std::string ref = (*node.schema)["$ref"].get<std::string>();
    const std::string at = node.pointer + "/$ref";
    if (ref.empty() || ref[0] != '#') {
        throw SchemaError(
            at, "only references within the schema ('#', '#/$defs/name', ...) are supported, not '" + ref + "'");
    }
    const std::string fragment = percent_decoded(ref.substr(1));
    if (!fragment.empty() && fragment[0] != '/') {
        throw SchemaError(at, "anchors ('" + ref + "') are not supported; refer by JSON pointer");
    }
    const Json* target = &root;
    size_t pos = 1;
    while (pos <= fragment.size() && !fragment.empty()) {
        const size_t slash = fragment.find('/', pos);
        std::string token = fragment.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
        for (size_t i = 0; (i = token.find('~', i)) != std::string::npos; ++i) {
            if (i + 1 < token.size() && token[i + 1] == '1')
                token.replace(i, 2, "/");
            else if (i + 1 < token.size() && token[i + 1] == '0')
                token.replace(i, 2, "~");
        }
        if (target->is_object() && target->contains(token)) {
            target = &(*target)[token];
        } else if (target->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                   std::stoul(token) < target->size()) {
            target = &(*target)[std::stoul(token)];
        } else {
            throw SchemaError(at, "'" + ref + "' does not resolve within the schema");
        }
        if (slash == std::string::npos) break;
        pos = slash + 1;
    }
    return {target, fragment};
}

std::vector<SchemaNode> applicable(const Json& root, const Location& location) {
    std::vector<SchemaNode> out;
    std::set<const Json*> seen;
    for (const auto& node : location) collect(root, node, out, seen);
    return out;
}

std::vector<std::string> property_order(const Json& root, const Location& location) {
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const auto& node : applicable(root, location)) {
        auto properties = node.schema->find("properties");
        if (properties != node.schema->end() && properties->is_object()) {
            for (const auto& item : properties->items()) {
                if (seen.insert(item.key()).second) names.push_back(item.key());
            }
        }
        auto required = node.schema->find("required");
        if (required != node.schema->end() && required->is_array()) {
            for (const auto& name : *required) {
                if (name.is_string() && seen.insert(name.get<std::string>()).second)
                    names.push_back(name.get<std::string>());
            }
        }
    }
    return names;
}

Location property_location(const Json& root, const Location& location, const std::optional<std::string>& name) {
    return property_location_in(applicable(root, location), name);
}

Location property_location_in(const std::vector<SchemaNode>& applicable, const std::optional<std::string>& name) {
    Location out;
    for (const auto& node : applicable) {
        auto properties = node.schema->find("properties");
        if (name && properties != node.schema->end() && properties->is_object() && properties->contains(*name)) {
            out.push_back({&(*properties)[*name], node.pointer + "/properties" + pointer_token(*name)});
        } else if (node.schema->contains("additionalProperties")) {
            out.push_back({&(*node.schema)["additionalProperties"], node.pointer + "/additionalProperties"});
        }
    }
    return out;
}

namespace {

// The prefix schemas of a node: prefixItems, or draft-07's array form of items.
const Json* prefix_of(const Json& schema, std::string& keyword) {
    auto prefix = schema.find("prefixItems");
    if (prefix != schema.end() && prefix->is_array()) {
        keyword = "prefixItems";
        return &*prefix;
    }
    auto items = schema.find("items");
    if (items != schema.end() && items->is_array()) {
        keyword = "items";
        return &*items;
    }
    return nullptr;
}

}  // namespace

Location item_location(const Json& root, const Location& location, size_t index) {
    Location out;
    for (const auto& node : applicable(root, location)) {
        std::string keyword;
        const Json* prefix = prefix_of(*node.schema, keyword);
        if (prefix && index < prefix->size()) {
            out.push_back({&(*prefix)[index], node.pointer + "/" + keyword + "/" + std::to_string(index)});
        } else if (prefix && keyword == "items") {
            if (node.schema->contains("additionalItems")) {
                out.push_back({&(*node.schema)["additionalItems"], node.pointer + "/additionalItems"});
            }
        } else if (node.schema->contains("items")) {
            out.push_back({&(*node.schema)["items"], node.pointer + "/items"});
        }
    }
    return out;
}

size_t longest_prefix(const Json& root, const Location& location) {
    size_t longest = 0;
    for (const auto& node : applicable(root, location)) {
        std::string keyword;
        if (const Json* prefix = prefix_of(*node.schema, keyword)) longest = std::max(longest, prefix->size());
    }
    return longest;
}

std::string canonical_string(const std::string& value) {
    std::string out = "\"";
    for (char c : value) {
        const std::string escape = json_escape(static_cast<uint8_t>(c));
        out += escape.empty() ? std::string(1, c) : escape;
    }
    return out + "\"";
}

std::string canonical_text(const Json& root, const Json& instance, const Location& location,
                           const SchemaOptions& options, int depth) {
    if (depth > kMaxNesting) throw std::invalid_argument("canonical_json: the instance nests deeper than 256 levels");
    const std::string space = options.whitespace == Whitespace::space_after_separators ? " " : "";
    if (instance.is_object()) {
        std::vector<std::string> keys;
        for (const auto& name : property_order(root, location)) {
            if (instance.contains(name)) keys.push_back(name);
        }
        std::vector<std::string> others;
        for (const auto& item : instance.items()) {
            if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) others.push_back(item.key());
        }
        // The others in byte order: one text per value, so that a const or enum object matches an instance that
        // lists its members in another order.
        std::sort(others.begin(), others.end());
        keys.insert(keys.end(), others.begin(), others.end());
        std::string out = "{";
        for (size_t i = 0; i < keys.size(); ++i) {
            if (i > 0) out += "," + space;
            out += canonical_string(keys[i]) + ":" + space;
            out +=
                canonical_text(root, instance[keys[i]], property_location(root, location, keys[i]), options, depth + 1);
        }
        return out + "}";
    }
    if (instance.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < instance.size(); ++i) {
            if (i > 0) out += "," + space;
            out += canonical_text(root, instance[i], item_location(root, location, i), options, depth + 1);
        }
        return out + "]";
    }
    if (instance.is_string()) return canonical_string(instance.get<std::string>());
    if (instance.is_number()) return canonical_number(instance);
    return instance.dump();  // true, false, null
}

}  // namespace rudder::grammar
