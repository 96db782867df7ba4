// Each JSON type's language under a schema's keywords for it, and the languages of free values and literals.
#include "schema_compiler.hpp"

#include "json_formats.hpp"
#include "json_numbers.hpp"
#include "regex_parser.hpp"

#include <algorithm>
#include <set>

namespace rudder::grammar {

namespace {

// Counts above this are refused: no automaton with that many repetitions fits the limits anyway.
constexpr int64_t kMaxCount = 10000000;

int checked_count(int64_t count, const std::string& pointer) {
    if (count > kMaxCount) {
        throw LimitError("the schema at '" + pointer + "' asks for " + std::to_string(count) +
                         " repetitions; more than " + std::to_string(kMaxCount) + " cannot be compiled");
    }
    return static_cast<int>(count);
}

// A schema no value validates against: `false`.
bool is_nothing_schema(const SchemaNode& node) { return node.schema->is_boolean() && !node.schema->get<bool>(); }

}  // namespace

LangPtr SchemaCompiler::comma() const {
    switch (options_.whitespace) {
        case Whitespace::none: return literal(",");
        case Whitespace::space_after_separators: return literal(", ");
        case Whitespace::optional_space: return sequence({literal(","), optional(literal(" "))});
    }
    return literal(",");
}

LangPtr SchemaCompiler::colon() const {
    switch (options_.whitespace) {
        case Whitespace::none: return literal(":");
        case Whitespace::space_after_separators: return literal(": ");
        case Whitespace::optional_space: return sequence({literal(":"), optional(literal(" "))});
    }
    return literal(":");
}

LangPtr SchemaCompiler::any_string() {
    if (!any_string_) {
        const Dfa all = build_dfa(repeat(code_points(CodePointSet::all()), 0, -1), options_.limits, "a JSON string");
        any_string_ = sequence({literal("\""), json_string_contents(std::make_shared<const Dfa>(all)), literal("\"")});
    }
    return any_string_;
}

LangPtr SchemaCompiler::any_value(int depth) {
    auto it = any_value_.find(depth);
    if (it != any_value_.end()) return it->second;
    std::vector<LangPtr> options = {literal("null"), literal("true"), literal("false"),
                                    number_language(false, std::nullopt, std::nullopt, options_.limits, ""),
                                    any_string()};
    if (depth > 0) {
        const LangPtr inner = any_value(depth - 1);
        const LangPtr items = sequence({inner, repeat(sequence({comma(), inner}), 0, -1)});
        options.push_back(sequence({literal("["), optional(items), literal("]")}));
        const LangPtr member = sequence({any_string(), colon(), inner});
        const LangPtr members = sequence({member, repeat(sequence({comma(), member}), 0, -1)});
        options.push_back(sequence({literal("{"), optional(members), literal("}")}));
    }
    // One automaton per depth, so that a free value used in many places expands to its few states, not to its Lang.
    const LangPtr lang = automaton(
        std::make_shared<const Dfa>(build_dfa(choice(std::move(options)), options_.limits, "a free JSON value")));
    any_value_.emplace(depth, lang);
    return lang;
}

LangPtr SchemaCompiler::value_literal(const Json& value, const Location& location) {
    const std::string text = canonical_text(root_, value, location, options_);
    if (options_.whitespace != Whitespace::optional_space) return literal(text);
    // An optional space after each ',' and ':' outside strings.
    std::vector<LangPtr> parts;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        parts.push_back(literal(std::string(1, c)));
        if (in_string) {
            if (c == '\\') {
                parts.push_back(literal(std::string(1, text[++i])));
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == ':') {
            parts.push_back(optional(literal(" ")));
        }
    }
    return sequence(std::move(parts));
}

LangPtr SchemaCompiler::object_language(const SchemaNode& node, const Location& location) {
    const Json& schema = *node.schema;
    const Json* properties = schema.contains("properties") ? &schema["properties"] : nullptr;
    if (properties && !properties->is_object()) throw SchemaError(node.pointer + "/properties", "expected an object");
    std::set<std::string> required;
    if (schema.contains("required")) {
        const Json& list = schema["required"];
        if (!list.is_array()) throw SchemaError(node.pointer + "/required", "expected an array of names");
        for (const auto& name : list) {
            if (!name.is_string()) throw SchemaError(node.pointer + "/required", "expected an array of names");
            required.insert(name.get<std::string>());
        }
    }
    // What a property gets when `properties` does not name it.
    static const Json kTrue = true, kFalse = false;
    SchemaNode additional{options_.additional_properties_by_default ? &kTrue : &kFalse,
                          node.pointer + "/additionalProperties"};
    if (schema.contains("additionalProperties")) additional.schema = &schema["additionalProperties"];

    // Members in the place's property order, each optional unless required, then the others: a graph whose node
    // (i, w) is "slot i next, w = whether a member was written" (w decides the comma).
    Place& place = place_of(location);
    const std::vector<std::string>& names = place.names;
    if (place.applicable.size() * names.size() > widest_schemas_ * widest_names_) {
        widest_schemas_ = place.applicable.size();
        widest_names_ = names.size();
        widest_pointer_ = node.pointer;
    }
    // Only the names this schema allows get a slot: a member whose value is `false` (every name its properties do
    // not list, under "additionalProperties": false) can only be left out, so it needs no language, no location and
    // no graph nodes; an anyOf of many objects lists every branch's names at its place, and each branch would
    // otherwise carry all of them.
    struct Slot {
        LangPtr member;
        bool required;
    };
    std::vector<Slot> allowed;
    for (const std::string& name : names) {
        SchemaNode value_schema = additional;
        if (properties && properties->contains(name)) {
            value_schema = {&(*properties)[name], node.pointer + "/properties" + pointer_token(name)};
        }
        const bool is_required = required.count(name) > 0;
        if (is_nothing_schema(value_schema)) {
            if (is_required) return nothing();
            continue;
        }
        // A boolean schema reads no location; building one costs a pass over every schema of the place.
        const LangPtr value =
            compile(value_schema,
                    value_schema.schema->is_boolean() ? Location{} : property_location_in(place.applicable, name));
        if (is_nothing(value)) {
            if (is_required) return nothing();
            continue;
        }
        allowed.push_back({sequence({literal(canonical_string(name)), colon(), value}), is_required});
    }
    const int slots = static_cast<int>(allowed.size());
    std::vector<Lang::Edge> edges;
    auto id = [](int slot, int written) { return slot * 2 + written; };
    for (int i = 0; i < slots; ++i) {
        const Slot& slot = allowed[static_cast<size_t>(i)];
        for (int w = 0; w < 2; ++w) {
            edges.push_back({id(i, w), id(i + 1, 1), w ? sequence({comma(), slot.member}) : slot.member});
            if (!slot.required) edges.push_back({id(i, w), id(i + 1, w), nullptr});
        }
    }
    // The others: any key but the place's names, with the additional schema.
    const LangPtr other_value = is_nothing_schema(additional) ? nothing()
                                : additional.schema->is_boolean()
                                    ? compile(additional, Location{})
                                    : compile(additional, property_location_in(place.applicable, {}));
    if (!is_nothing(other_value)) {
        if (!place.other_key) {
            place.other_key = any_string();
            if (!names.empty()) {
                std::vector<LangPtr> listed;
                for (const auto& name : names) listed.push_back(literal(canonical_string(name)));
                place.other_key = automaton(std::make_shared<const Dfa>(
                    difference(*to_dfa(any_string(), node.pointer), *to_dfa(choice(std::move(listed)), node.pointer),
                               options_.limits, "the schema at '" + node.pointer + "'")));
            }
        }
        const LangPtr member = sequence({place.other_key, colon(), other_value});
        edges.push_back({id(slots, 0), id(slots, 1), member});
        edges.push_back({id(slots, 1), id(slots, 1), sequence({comma(), member})});
    }
    return sequence({literal("{"), graph(2 * slots + 2, std::move(edges), {id(slots, 0), id(slots, 1)}), literal("}")});
}

LangPtr SchemaCompiler::array_language(const SchemaNode& node, const Location& location) {
    const Json& schema = *node.schema;
    const int min = checked_count(count_keyword(node, "minItems").value_or(0), node.pointer + "/minItems");
    const std::optional<int64_t> max_keyword = count_keyword(node, "maxItems");
    const int max = max_keyword ? checked_count(*max_keyword, node.pointer + "/maxItems") : -1;
    if (max >= 0 && max < min) return nothing();
    // The node's prefix schemas and the schema of the items after them.
    const Json* prefix = nullptr;
    std::string prefix_keyword;
    static const Json kTrue = true;
    SchemaNode rest{&kTrue, node.pointer + "/items"};
    if (schema.contains("prefixItems")) {
        prefix = &schema["prefixItems"];
        prefix_keyword = "prefixItems";
        if (!prefix->is_array()) throw SchemaError(node.pointer + "/prefixItems", "expected an array of schemas");
        if (schema.contains("items")) rest.schema = &schema["items"];
        if (schema.contains("additionalItems")) {
            throw SchemaError(node.pointer + "/additionalItems", "additionalItems goes with the array form of items");
        }
    } else if (schema.contains("items") && schema["items"].is_array()) {
        prefix = &schema["items"];
        prefix_keyword = "items";
        rest = {schema.contains("additionalItems") ? &schema["additionalItems"] : &kTrue,
                node.pointer + "/additionalItems"};
    } else if (schema.contains("items")) {
        rest.schema = &schema["items"];
    }
    const size_t prefix_size = prefix ? prefix->size() : 0;
    // Nodes 0..last: "i items written". Up to `shared` items each has its own place; from there on they share one.
    const int shared = static_cast<int>(std::max<size_t>(longest_prefix(root_, location), static_cast<size_t>(min)));
    const int last = max >= 0 ? max : shared + 1;
    auto value_at = [&](int i) {
        const SchemaNode item = static_cast<size_t>(i) < prefix_size
                                    ? SchemaNode{&(*prefix)[static_cast<size_t>(i)],
                                                 node.pointer + "/" + prefix_keyword + "/" + std::to_string(i)}
                                    : rest;
        return compile(item, item_location(root_, location, static_cast<size_t>(std::min(i, shared))));
    };
    std::vector<Lang::Edge> edges;
    std::vector<int> accepting;
    for (int i = 0; i <= last; ++i) {
        if (i >= min) accepting.push_back(i);
        if (i == last) break;
        const LangPtr value = value_at(i);
        if (is_nothing(value)) break;  // no item i: no longer arrays either
        edges.push_back({i, i + 1, i == 0 ? value : sequence({comma(), value})});
    }
    if (max < 0) edges.push_back({last, last, sequence({comma(), value_at(shared)})});
    return sequence({literal("["), graph(last + 1, std::move(edges), std::move(accepting)), literal("]")});
}

LangPtr SchemaCompiler::string_language(const SchemaNode& node) {
    const Json& schema = *node.schema;
    std::vector<LangPtr> decoded;  // languages of the decoded value, intersected
    const int64_t min = count_keyword(node, "minLength").value_or(0);
    const std::optional<int64_t> max = count_keyword(node, "maxLength");
    if (min > 0 || max) {
        const int lo = checked_count(min, node.pointer + "/minLength");
        const int hi = max ? checked_count(*max, node.pointer + "/maxLength") : -1;
        decoded.push_back(repeat(code_points(CodePointSet::all()), lo, hi));
    }
    if (schema.contains("pattern")) {
        const std::string at = node.pointer + "/pattern";
        if (!schema["pattern"].is_string()) throw SchemaError(at, "expected a string");
        try {
            decoded.push_back(parse_regex_search(schema["pattern"].get<std::string>(), RegexDialect::ecma));
        } catch (const RegexError& e) {
            throw SchemaError(at, e.what());
        }
    }
    if (schema.contains("format")) {
        const std::string at = node.pointer + "/format";
        if (!schema["format"].is_string()) throw SchemaError(at, "expected a string");
        auto dfa = format_automaton(schema["format"].get<std::string>(), options_.exact_leap_seconds);
        if (!dfa) {
            throw SchemaError(at, "the format '" + schema["format"].get<std::string>() + "' is not compiled (" +
                                      supported_formats() + " are)");
        }
        decoded.push_back(automaton(dfa));
    }
    if (decoded.empty()) return any_string();
    std::shared_ptr<const Dfa> value = to_dfa(decoded[0], node.pointer);
    for (size_t i = 1; i < decoded.size(); ++i) {
        value = std::make_shared<const Dfa>(intersect(*value, *to_dfa(decoded[i], node.pointer), options_.limits,
                                                      "the schema at '" + node.pointer + "'"));
    }
    return sequence({literal("\""), json_string_contents(value), literal("\"")});
}

LangPtr SchemaCompiler::number_language_of(const SchemaNode& node, bool integer_only) {
    const Json& schema = *node.schema;
    auto bound = [&](const char* keyword, bool exclusive) -> std::optional<NumberBound> {
        if (!schema.contains(keyword)) return std::nullopt;
        if (!schema[keyword].is_number()) {
            throw SchemaError(node.pointer + "/" + keyword,
                              "expected a number (draft-04's boolean form is not supported)");
        }
        return NumberBound{canonical_number(schema[keyword]), exclusive};
    };
    // Of an inclusive and an exclusive bound on one side, the tighter one.
    auto tighter = [](std::optional<NumberBound> a, std::optional<NumberBound> b, bool lower) {
        if (!a) return b;
        if (!b) return a;
        const double x = std::stod(a->decimal), y = std::stod(b->decimal);
        if (x == y) return a->exclusive ? a : b;
        return (lower ? x > y : x < y) ? a : b;
    };
    const auto lower = tighter(bound("minimum", false), bound("exclusiveMinimum", true), true);
    const auto upper = tighter(bound("maximum", false), bound("exclusiveMaximum", true), false);
    return number_language(integer_only, lower, upper, options_.limits, "the schema at '" + node.pointer + "'");
}

}  // namespace rudder::grammar
