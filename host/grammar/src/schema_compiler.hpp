// The JSON Schema compiler: a schema node at a location to a Lang (docs/structured-output.md, "JSON Schema").
#pragma once

#include "lang.hpp"
#include "schema_location.hpp"

#include <rudder/grammar/json_schema.hpp>

#include <map>
#include <optional>
#include <string>

namespace rudder::grammar {

class SchemaCompiler {
public:
    SchemaCompiler(const Json& root, const SchemaOptions& options);

    // The language of the whole document.
    LangPtr compile_root();

private:
    // The language of `node`'s instances at `location` (node is one of the schemas applicable there).
    LangPtr compile(const SchemaNode& node, const Location& location);
    LangPtr compile_object_schema(const SchemaNode& node, const Location& location);
    void check_keywords(const SchemaNode& node) const;

    // The parts of a schema object, each a language its instances must be in.
    LangPtr types_part(const SchemaNode& node, const Location& location);
    LangPtr enum_part(const SchemaNode& node, const Location& location);
    LangPtr combinators_part(const SchemaNode& node, const Location& location, std::vector<LangPtr>& all_of);
    LangPtr one_of(const SchemaNode& node, const Location& location);

    // One type's language under the node's keywords for it (schema_types.cpp).
    LangPtr object_language(const SchemaNode& node, const Location& location);
    LangPtr array_language(const SchemaNode& node, const Location& location);
    LangPtr string_language(const SchemaNode& node);
    LangPtr number_language_of(const SchemaNode& node, bool integer_only);

    // Any JSON value, arrays and objects nested at most `depth` deep (schema_types.cpp).
    LangPtr any_value(int depth);
    LangPtr any_string();
    // The texts of one value (its canonical text, with the optional spaces of the policy).
    LangPtr value_literal(const Json& value, const Location& location);
    LangPtr comma() const;
    LangPtr colon() const;

    // A language as a minimal automaton, and the intersection of several.
    std::shared_ptr<const Dfa> to_dfa(const LangPtr& lang, const std::string& pointer);
    LangPtr intersection(const std::vector<LangPtr>& parts, const std::string& pointer);

    // The keyword's value if present, checked to be a non-negative integer.
    std::optional<int64_t> count_keyword(const SchemaNode& node, const char* keyword) const;

    // A place's schemas and property order, found once however many of its object schemas are compiled (an anyOf
    // of 2,000 objects has 2,000 at one place, each of which read all of them, then all of them again per name).
    struct Place {
        std::vector<SchemaNode> applicable;
        std::vector<std::string> names;
        LangPtr other_key;  // any key but the names (object_language), when first needed
    };
    Place& place_of(const Location& location);

    const Json& root_;
    const SchemaOptions& options_;
    std::map<std::string, int> ref_depth_;  // $ref targets being expanded -> how many times, on the current path
    int nesting_ = 0;                       // compile() calls on the stack
    int64_t compiled_nodes_ = 0;            // subschemas compiled so far (recursion multiplies them)
    bool reentered_ = false;                // a $ref was entered inside its own expansion (recursion)
    // The place whose object schemas times property names is the largest so far: what multiplies the subschemas
    // when no $ref recursion does.
    std::string widest_pointer_;
    size_t widest_schemas_ = 0, widest_names_ = 0;
    std::map<std::vector<const Json*>, Place> places_;
    std::map<int, LangPtr> any_value_;
    LangPtr any_string_;
};

}  // namespace rudder::grammar
