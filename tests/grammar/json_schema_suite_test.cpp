// The JSON Schema compiler against the official JSON-Schema-Test-Suite (json-schema-test-suite/, MIT): for every case
// whose schema compiles, the automaton accepts canonical_json(instance) exactly when the suite says `valid`. A schema
// the compiler refuses (SchemaError, LimitError) counts as refused. The counts are printed per file and in total.
#include <rudder/grammar/json_schema.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace rudder::grammar {
namespace {

const char* const kFiles[] = {"additionalProperties",
                              "allOf",
                              "anyOf",
                              "boolean_schema",
                              "const",
                              "default",
                              "defs",
                              "enum",
                              "exclusiveMaximum",
                              "exclusiveMinimum",
                              "infinite-loop-detection",
                              "items",
                              "maxItems",
                              "maxLength",
                              "maximum",
                              "minItems",
                              "minLength",
                              "minimum",
                              "oneOf",
                              "pattern",
                              "prefixItems",
                              "properties",
                              "ref",
                              "required",
                              "type",
                              "uniqueItems",
                              "optional/bignum",
                              "optional/ecmascript-regex",
                              "optional/non-bmp-regex",
                              "optional/format/date",
                              "optional/format/time",
                              "optional/format/date-time",
                              "optional/format/uuid",
                              "optional/format/ipv4",
                              "optional/format/ipv6",
                              "optional/format/email"};

struct Counts {
    int cases = 0, refused = 0, agreeing = 0, disagreeing = 0;
    void add(const Counts& o) {
        cases += o.cases, refused += o.refused, agreeing += o.agreeing, disagreeing += o.disagreeing;
    }
};

Counts run_file(const std::string& name, const SchemaOptions& options) {
    const std::string path = std::string(RUDDER_SUITE_DIR) + "/draft2020-12/" + name + ".json";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    const auto groups = nlohmann::ordered_json::parse(in);
    Counts counts;
    for (const auto& group : groups) {
        const auto& tests = group["tests"];
        counts.cases += static_cast<int>(tests.size());
        Dfa dfa;
        try {
            dfa = compile_json_schema(group["schema"], options);
        } catch (const SchemaError&) {
            counts.refused += static_cast<int>(tests.size());
            continue;
        } catch (const LimitError&) {
            counts.refused += static_cast<int>(tests.size());
            continue;
        }
        for (const auto& test : tests) {
            const std::string text = canonical_json(test["data"], group["schema"], options);
            const bool valid = test["valid"].get<bool>();
            if (dfa.matches(text) == valid) {
                ++counts.agreeing;
            } else {
                ++counts.disagreeing;
                ADD_FAILURE() << name << ": \"" << group["description"].get<std::string>() << "\" / \""
                              << test["description"].get<std::string>() << "\": the suite says "
                              << (valid ? "valid" : "invalid") << ", the automaton " << (valid ? "refuses" : "accepts")
                              << " " << text;
            }
        }
    }
    return counts;
}

void run_suite(const SchemaOptions& options, const char* label) {
    Counts total;
    for (const char* file : kFiles) {
        const Counts c = run_file(file, options);
        std::printf("  %-28s %3d cases: %3d compiled and agreeing, %3d disagreeing, %3d refused\n", file, c.cases,
                    c.agreeing, c.disagreeing, c.refused);
        total.add(c);
    }
    std::printf(
        "JSON-Schema-Test-Suite (draft 2020-12, whitespace %s, free_value_depth 4, exact leap seconds): %d cases, %d "
        "supported (%d agreeing, %d "
        "disagreeing), %d refused\n",
        label, total.cases, total.agreeing + total.disagreeing, total.agreeing, total.disagreeing, total.refused);
    EXPECT_EQ(total.disagreeing, 0);
    EXPECT_GT(total.agreeing, total.cases / 2);
}

// Two cases of uniqueItems.json nest objects four deep in a value the schema leaves free; the default
// free_value_depth (3) accepts three, so the suite runs with 4. Five time and date-time cases have leap seconds at
// local offsets, which the default refuses: the suite runs with exact_leap_seconds.
SchemaOptions suite_options(Whitespace whitespace) {
    SchemaOptions options;
    options.whitespace = whitespace;
    options.free_value_depth = 4;
    options.exact_leap_seconds = true;
    return options;
}

TEST(JsonSchemaSuite, AgreesOnEveryCompiledCase) { run_suite(suite_options(Whitespace::none), "none"); }

TEST(JsonSchemaSuite, AgreesWithSpacesAfterSeparators) {
    const SchemaOptions options = suite_options(Whitespace::space_after_separators);
    run_suite(options, "space_after_separators");
}

}  // namespace
}  // namespace rudder::grammar
