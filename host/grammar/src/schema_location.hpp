// Places in an instance and the schemas that apply there, shared by the compiler and canonical_json so that both put
// an object's properties in the same order.
//
// A Location is the list of schemas that apply at one place of an instance: the root schema at the root; at a
// property or an item, the subschemas that every schema applying at the parent gives it (`properties`, else
// `additionalProperties`; `prefixItems`/array `items`, else `items`/`additionalItems`). Applicators (allOf, anyOf,
// oneOf, $ref) do not change the place: `applicable` expands them. The property order at a place is every
// `properties` and `required` name of the schemas applicable there, in order of first appearance.
#pragma once

#include <rudder/grammar/json_schema.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace rudder::grammar {

using Json = nlohmann::ordered_json;

struct SchemaNode {
    const Json* schema;
    std::string pointer;  // its JSON pointer in the document
};

using Location = std::vector<SchemaNode>;

// "/" + the token escaped as RFC 6901 says (~0, ~1).
std::string pointer_token(const std::string& token);

// The target of a node's `$ref` (a JSON pointer fragment within the document: "#", "#/$defs/name", ...); a
// SchemaError at the $ref for anything else.
SchemaNode resolve_ref(const Json& root, const SchemaNode& node);

// The object schemas applying at the location, its own and those its applicators reach, each once.
std::vector<SchemaNode> applicable(const Json& root, const Location& location);
// Property names in the order the place gives them.
std::vector<std::string> property_order(const Json& root, const Location& location);
// The location of property `name`, or of a property that no `properties` names (std::nullopt).
Location property_location(const Json& root, const Location& location, const std::optional<std::string>& name);
// The same from the schemas applicable at the location (applicable()), found once for all of a place's names.
Location property_location_in(const std::vector<SchemaNode>& applicable, const std::optional<std::string>& name);
// The location of item `index` of an array.
Location item_location(const Json& root, const Location& location, size_t index);
// The longest prefixItems (or draft-07 array `items`) among the applicable schemas: items from there on share one
// location.
size_t longest_prefix(const Json& root, const Location& location);

// A string as the language writes it: UTF-8 kept, only \" \\ \b \f \n \r \t and \u00XX for other control characters.
std::string canonical_string(const std::string& value);
// canonical_json's writer, at a location (with `options.whitespace`); std::invalid_argument for an instance nested
// deeper than 256 levels.
std::string canonical_text(const Json& root, const Json& instance, const Location& location,
                           const SchemaOptions& options, int depth = 0);

}  // namespace rudder::grammar
