// JSON Schema compiled to a minimal byte automaton that accepts JSON texts that validate, written in one canonical
// form (docs/structured-output.md): the whitespace policy below, object properties in the schema's order, numbers in
// plain decimal, strings in UTF-8 with only the escapes JSON requires. Every keyword is compiled or refused with its
// JSON pointer; only annotations are skipped.
//
// Property order needs the schema's own key order, which nlohmann::json (a sorted map) loses: pass an
// nlohmann::ordered_json, or the schema's text.
#pragma once

#include <rudder/grammar/dfa.hpp>

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace rudder::grammar {

// A schema, or a keyword in it, that is not compiled; what() names the pointer and says why.
struct SchemaError : std::runtime_error {
    SchemaError(std::string pointer, const std::string& why);
    // The JSON pointer of the offending value in the schema ("" is the root, "/properties/age/minimum" a keyword).
    std::string pointer;
};

// Where whitespace may stand in the text. Every policy puts at most one byte of whitespace per separator, so that
// whitespace cannot eat a length budget.
enum class Whitespace {
    none,                    // {"a":1,"b":[1,2]}
    space_after_separators,  // {"a": 1, "b": [1, 2]}  (exactly one space after every ':' and ','; Python's json.dumps)
    optional_space,          // either, separator by separator: at most one space after each ':' and ','
};

struct SchemaOptions {
    Whitespace whitespace = Whitespace::none;
    // How many times a $ref may be entered again inside its own expansion: a recursive schema (a tree, a linked
    // list) accepts values nested that deep through it, no deeper.
    int recursion_depth = 3;
    // How deep arrays and objects may nest in a value the schema leaves free (`true`, an object's additional
    // properties or an array's items when the schema does not constrain them): 0 allows only scalars there.
    int free_value_depth = 3;
    // Additional properties when a schema says nothing about them: true follows the specification (allowed); false
    // refuses them as if every object schema said "additionalProperties": false.
    bool additional_properties_by_default = true;
    // Formats time and date-time: RFC 3339 allows second 60 at 23:59:60 UTC, that is at the local time 23:59 plus the
    // offset. true accepts it at every offset (exact, about 10,000 states per field: one branch per local time);
    // false (default) only with Z, z, +00:00 or -00:00, refusing the rarer local-time leap seconds (a few dozen
    // states). Every accepted text is valid either way.
    bool exact_leap_seconds = false;
    CompileLimits limits;
};

// The automaton of the canonical texts of the instances that validate against `schema` (draft 2020-12; the draft-07
// forms of `items` and `definitions` too). Throws SchemaError for a keyword it does not compile, LimitError when the
// automaton would exceed options.limits.
Dfa compile_json_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options = {});
// The same from the schema's text (its key order kept); a text that is not JSON is a SchemaError at "". (A separate
// name: a std::string would convert to either parameter.)
Dfa compile_json_schema_text(std::string_view schema_text, const SchemaOptions& options = {});

// The instance as the automaton's language writes it: the whitespace policy (no space under optional_space),
// properties in the order the schema gives them at that place (every `properties` and `required` name of the schemas
// that apply there, in order of first appearance), then the others in byte order of their names (one text per value,
// so that a `const` or `enum` object matches its instances whatever their member order); strings in UTF-8 with \"
// \\ \b \f \n \r \t and \u00XX only for the other control characters; numbers in plain decimal without exponent, an
// integral value with no fraction (1.0 is 1, -0 is 0). An instance that validates has this text in the automaton's
// language, within the depths of SchemaOptions. Throws std::invalid_argument for an instance nested deeper than 256
// levels.
std::string canonical_json(const nlohmann::ordered_json& instance, const nlohmann::ordered_json& schema,
                           const SchemaOptions& options = {});

}  // namespace rudder::grammar
