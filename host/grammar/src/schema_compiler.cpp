#include "schema_compiler.hpp"

#include <rudder/grammar/json_schema.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace rudder::grammar {

namespace {

// Keywords that do not change validity: skipped.
const std::set<std::string> kAnnotations = {"$schema", "$comment",   "title",    "description", "examples",
                                            "default", "deprecated", "readOnly", "writeOnly"};
// Keywords compiled (their values checked where they are read); $defs and definitions hold schemas that $ref reaches.
const std::set<std::string> kCompiled = {"type",
                                         "enum",
                                         "const",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "additionalItems",
                                         "minItems",
                                         "maxItems",
                                         "uniqueItems",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "allOf",
                                         "anyOf",
                                         "oneOf",
                                         "$ref",
                                         "$defs",
                                         "definitions"};

std::string why_refused(const std::string& keyword) {
    if (keyword == "not") return "'not' is not compiled (a complement is not exact under the depth bounds)";
    if (keyword == "if" || keyword == "then" || keyword == "else") return "if/then/else is not compiled";
    if (keyword == "patternProperties") return "patternProperties is not compiled";
    if (keyword == "multipleOf") return "multipleOf is not compiled";
    if (keyword == "$anchor" || keyword == "$dynamicRef" || keyword == "$dynamicAnchor") {
        return keyword + " is not supported; refer by JSON pointer with $ref";
    }
    if (keyword == "$id") return "$id inside a schema changes the base of references and is not supported";
    return "the keyword '" + keyword + "' is not compiled";
}

}  // namespace

SchemaCompiler::SchemaCompiler(const Json& root, const SchemaOptions& options) : root_(root), options_(options) {
    if (options.recursion_depth < 0 || options.free_value_depth < 0) {
        throw SchemaError("", "SchemaOptions: recursion_depth and free_value_depth must be >= 0");
    }
}

LangPtr SchemaCompiler::compile_root() {
    const SchemaNode root{&root_, ""};
    return compile(root, {root});
}

void SchemaCompiler::check_keywords(const SchemaNode& node) const {
    for (const auto& item : node.schema->items()) {
        const std::string& key = item.key();
        if (kAnnotations.count(key) || kCompiled.count(key)) continue;
        if (key == "$id" && node.pointer.empty()) continue;  // the document's own identifier
        throw SchemaError(node.pointer + pointer_token(key), why_refused(key));
    }
    for (const char* container : {"$defs", "definitions"}) {
        if (node.schema->contains(container) && !(*node.schema)[container].is_object()) {
            throw SchemaError(node.pointer + "/" + container, "expected an object of schemas");
        }
    }
    if (node.schema->contains("uniqueItems")) {
        const Json& unique = (*node.schema)["uniqueItems"];
        if (!unique.is_boolean()) throw SchemaError(node.pointer + "/uniqueItems", "expected a boolean");
        if (unique.get<bool>()) {
            throw SchemaError(node.pointer + "/uniqueItems", "uniqueItems: true is not compiled (it is not regular)");
        }
    }
}

LangPtr SchemaCompiler::compile(const SchemaNode& node, const Location& location) {
    struct Nesting {  // how deep compile() recurses now
        explicit Nesting(int& depth) : depth_(depth) { ++depth_; }
        ~Nesting() { --depth_; }
        int& depth_;
    } nesting(nesting_);
    if (nesting_ > 512) throw SchemaError(node.pointer, "subschemas nest deeper than 512 levels");
    check_stopped(options_.limits, "the schema");
    constexpr int64_t kMaxCompiledNodes = 100000;
    if (++compiled_nodes_ > kMaxCompiledNodes) {
        // The message names what multiplies them: recursion, or objects compiled over many names of their place.
        if (reentered_)
            throw LimitError(
                "the schema expands to more than 100000 subschemas (its $ref recursion multiplies them); "
                "lower SchemaOptions::recursion_depth");
        if (widest_schemas_ * widest_names_ < static_cast<size_t>(kMaxCompiledNodes) / 2)
            throw LimitError(
                "the schema expands to more than 100000 subschemas (each is compiled once per place it applies "
                "at: per array item up to minItems or its prefixItems, per property name of its object)");
        throw LimitError("the schema expands to more than 100000 subschemas: at '" + widest_pointer_ + "', " +
                         std::to_string(widest_schemas_) +
                         " object schemas apply (with their anyOf, oneOf and allOf branches), and each has a member "
                         "for every one of the place's " +
                         std::to_string(widest_names_) +
                         " property names (those its properties do not list take its additionalProperties, which "
                         "allows them); give the branches \"additionalProperties\": false, or fewer branches");
    }
    if (node.schema->is_boolean()) return node.schema->get<bool>() ? any_value(options_.free_value_depth) : nothing();
    if (!node.schema->is_object()) throw SchemaError(node.pointer, "a schema must be an object or a boolean");
    check_keywords(node);
    return compile_object_schema(node, location);
}

SchemaCompiler::Place& SchemaCompiler::place_of(const Location& location) {
    std::vector<const Json*> key;
    for (const auto& node : location) key.push_back(node.schema);
    auto it = places_.find(key);
    if (it != places_.end()) return it->second;
    Place place;
    place.applicable = applicable(root_, location);
    place.names = property_order(root_, location);
    return places_.emplace(std::move(key), std::move(place)).first->second;
}

LangPtr SchemaCompiler::compile_object_schema(const SchemaNode& node, const Location& location) {
    std::vector<LangPtr> parts;
    if (LangPtr types = types_part(node, location)) parts.push_back(types);
    if (LangPtr values = enum_part(node, location)) parts.push_back(values);
    if (LangPtr combined = combinators_part(node, location, parts)) parts.push_back(combined);
    if (node.schema->contains("$ref")) {
        if (!(*node.schema)["$ref"].is_string()) throw SchemaError(node.pointer + "/$ref", "expected a string");
        const SchemaNode target = resolve_ref(root_, node);
        int& depth = ref_depth_[target.pointer];
        if (depth > options_.recursion_depth) {
            parts.push_back(nothing());  // deeper than SchemaOptions::recursion_depth: no words
        } else {
            if (depth > 0) reentered_ = true;
            ++depth;
            LangPtr referenced = compile(target, location);
            --ref_depth_[target.pointer];
            parts.push_back(referenced);
        }
    }
    if (parts.empty()) return any_value(options_.free_value_depth);
    return intersection(parts, node.pointer);
}

LangPtr SchemaCompiler::combinators_part(const SchemaNode& node, const Location& location,
                                         std::vector<LangPtr>& all_of) {
    auto branches = [&](const char* keyword) {
        const Json& list = (*node.schema)[keyword];
        if (!list.is_array() || list.empty()) {
            throw SchemaError(node.pointer + "/" + keyword, "expected a non-empty array of schemas");
        }
        std::vector<LangPtr> out;
        for (size_t i = 0; i < list.size(); ++i) {
            out.push_back(compile({&list[i], node.pointer + "/" + keyword + "/" + std::to_string(i)}, location));
        }
        return out;
    };
    if (node.schema->contains("allOf")) {
        for (auto& branch : branches("allOf")) all_of.push_back(branch);
    }
    std::vector<LangPtr> parts;
    if (node.schema->contains("anyOf")) parts.push_back(choice(branches("anyOf")));
    if (node.schema->contains("oneOf")) parts.push_back(one_of(node, location));
    if (parts.empty()) return nullptr;
    return parts.size() == 1 ? parts[0] : intersection(parts, node.pointer);
}

// oneOf is the union of its branches when no two of them share a text: checked on their automata, else refused.
LangPtr SchemaCompiler::one_of(const SchemaNode& node, const Location& location) {
    const Json& list = (*node.schema)["oneOf"];
    const std::string at = node.pointer + "/oneOf";
    if (!list.is_array() || list.empty()) throw SchemaError(at, "expected a non-empty array of schemas");
    std::vector<std::shared_ptr<const Dfa>> automata;
    std::vector<LangPtr> options;
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string pointer = at + "/" + std::to_string(i);
        automata.push_back(to_dfa(compile({&list[i], pointer}, location), pointer));
        for (size_t j = 0; j < i; ++j) {
            if (!intersect(*automata[j], *automata[i], options_.limits, "the schema at '" + at + "'").empty()) {
                throw SchemaError(at, "branches " + std::to_string(j) + " and " + std::to_string(i) +
                                          " accept a value in common; oneOf is compiled only when its branches are "
                                          "disjoint (use anyOf)");
            }
        }
        options.push_back(automaton(automata.back()));
    }
    return choice(std::move(options));
}

LangPtr SchemaCompiler::enum_part(const SchemaNode& node, const Location& location) {
    std::vector<LangPtr> values;
    if (node.schema->contains("const")) values.push_back(value_literal((*node.schema)["const"], location));
    if (node.schema->contains("enum")) {
        const Json& list = (*node.schema)["enum"];
        if (!list.is_array()) throw SchemaError(node.pointer + "/enum", "expected an array");
        std::vector<LangPtr> options;
        for (const auto& value : list) options.push_back(value_literal(value, location));
        values.push_back(choice(std::move(options)));
    }
    if (values.empty()) return nullptr;
    return values.size() == 1 ? values[0] : intersection(values, node.pointer);
}

LangPtr SchemaCompiler::types_part(const SchemaNode& node, const Location& location) {
    static const std::vector<std::string> kTypes = {"null",   "boolean", "object", "array",
                                                    "number", "string",  "integer"};
    std::set<std::string> types;
    const Json* type = node.schema->contains("type") ? &(*node.schema)["type"] : nullptr;
    if (type && type->is_string()) {
        types.insert(type->get<std::string>());
    } else if (type && type->is_array()) {
        for (const auto& t : *type) types.insert(t.is_string() ? t.get<std::string>() : "");
    } else if (type) {
        throw SchemaError(node.pointer + "/type", "expected a type name or an array of them");
    }
    for (const auto& t : types) {
        if (std::find(kTypes.begin(), kTypes.end(), t) == kTypes.end()) {
            throw SchemaError(node.pointer + "/type", "unknown type '" + t + "'");
        }
    }
    // Without `type`, the keywords of each type still constrain values of that type.
    static const std::set<std::string> kTypeKeywords = {"properties",      "required",    "additionalProperties",
                                                        "items",           "prefixItems", "additionalItems",
                                                        "minItems",        "maxItems",    "minLength",
                                                        "maxLength",       "pattern",     "format",
                                                        "minimum",         "maximum",     "exclusiveMinimum",
                                                        "exclusiveMaximum"};
    if (!type) {
        bool constrained = false;
        for (const auto& k : kTypeKeywords) constrained = constrained || node.schema->contains(k);
        if (!constrained) return nullptr;
        types = {"null", "boolean", "object", "array", "number", "string"};
    }
    std::vector<LangPtr> options;
    if (types.count("null")) options.push_back(literal("null"));
    if (types.count("boolean")) options.push_back(choice({literal("true"), literal("false")}));
    if (types.count("number")) {
        options.push_back(number_language_of(node, false));
    } else if (types.count("integer")) {
        options.push_back(number_language_of(node, true));
    }
    if (types.count("string")) options.push_back(string_language(node));
    if (types.count("array")) options.push_back(array_language(node, location));
    if (types.count("object")) options.push_back(object_language(node, location));
    return choice(std::move(options));
}

std::shared_ptr<const Dfa> SchemaCompiler::to_dfa(const LangPtr& lang, const std::string& pointer) {
    if (lang->kind == Lang::Kind::automaton) return lang->dfa;
    return std::make_shared<const Dfa>(build_dfa(lang, options_.limits, "the schema at '" + pointer + "'"));
}

LangPtr SchemaCompiler::intersection(const std::vector<LangPtr>& parts, const std::string& pointer) {
    if (parts.size() == 1) return parts[0];
    for (const auto& part : parts) {
        if (is_nothing(part)) return nothing();
    }
    std::shared_ptr<const Dfa> result = to_dfa(parts[0], pointer);
    for (size_t i = 1; i < parts.size() && !result->empty(); ++i) {
        result = std::make_shared<const Dfa>(
            intersect(*result, *to_dfa(parts[i], pointer), options_.limits, "the schema at '" + pointer + "'"));
    }
    return automaton(result);
}

std::optional<int64_t> SchemaCompiler::count_keyword(const SchemaNode& node, const char* keyword) const {
    if (!node.schema->contains(keyword)) return std::nullopt;
    const Json& value = (*node.schema)[keyword];
    const auto refuse = [&] {
        return SchemaError(node.pointer + "/" + keyword, "expected a non-negative integer below 2^63");
    };
    if (value.is_number_unsigned()) {
        const uint64_t count = value.get<uint64_t>();
        if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) throw refuse();
        return static_cast<int64_t>(count);
    }
    if (value.is_number_integer()) {
        if (value.get<int64_t>() < 0) throw refuse();
        return value.get<int64_t>();
    }
    // A float is a count when it is a whole number that int64 holds (2^63 is the first double past it): casting any
    // other to an integer is undefined.
    if (!value.is_number_float()) throw refuse();
    const double count = value.get<double>();
    if (!(count >= 0 && count < 9223372036854775808.0) || count != std::floor(count)) throw refuse();
    return static_cast<int64_t>(count);
}

Dfa compile_json_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options) {
    SchemaCompiler compiler(schema, options);
    return build_dfa(compiler.compile_root(), options.limits, "the schema");
}

Dfa compile_json_schema_text(std::string_view schema_text, const SchemaOptions& options) {
    nlohmann::ordered_json schema;
    try {
        schema = nlohmann::ordered_json::parse(schema_text);
    } catch (const nlohmann::json::parse_error& e) {
        throw SchemaError("", std::string("the schema is not JSON: ") + e.what());
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range (out_of_range 406)
        throw SchemaError("", std::string("the schema's JSON cannot be read: ") + e.what());
    }
    return compile_json_schema(schema, options);
}

std::string canonical_json(const nlohmann::ordered_json& instance, const nlohmann::ordered_json& schema,
                           const SchemaOptions& options) {
    return canonical_text(schema, instance, {{&schema, ""}}, options);
}

}  // namespace rudder::grammar
