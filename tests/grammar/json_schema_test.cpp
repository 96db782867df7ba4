// The JSON Schema compiler: refusals with pointers, the whitespace policy, the property order, exact number bounds
// (against double comparison on random pairs), strings (escapes, lengths in code points, patterns on the decoded
// value), recursion and free-value depths, limits, and canonical_json's rules.
#include <rudder/grammar/json_schema.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>

namespace rudder::grammar {
namespace {

using nlohmann::ordered_json;

Dfa schema(const std::string& text, const SchemaOptions& options = {}) {
    return compile_json_schema_text(text, options);
}

std::string refusal(const std::string& text, const std::string& words) {
    try {
        schema(text);
    } catch (const SchemaError& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << text << ": " << e.what();
        return e.pointer;
    }
    ADD_FAILURE() << text << " was not refused";
    return "(accepted)";
}

TEST(JsonSchema, RefusesWhatItDoesNotCompileWithThePointer) {
    EXPECT_EQ(refusal(R"({"properties":{"a":{"not":{"type":"null"}}}})", "'not' is not compiled"), "/properties/a/not");
    EXPECT_EQ(refusal(R"({"patternProperties":{"^x":true}})", "patternProperties"), "/patternProperties");
    EXPECT_EQ(refusal(R"({"type":"integer","multipleOf":3})", "multipleOf"), "/multipleOf");
    EXPECT_EQ(refusal(R"({"if":true,"then":false})", "if/then/else"), "/if");
    EXPECT_EQ(refusal(R"({"items":{"frobnicate":1}})", "'frobnicate' is not compiled"), "/items/frobnicate");
    EXPECT_EQ(refusal(R"({"type":"string","format":"hostname"})", "the format 'hostname' is not compiled"), "/format");
    EXPECT_EQ(refusal(R"({"$ref":"other.json#/a"})", "only references within the schema"), "/$ref");
    EXPECT_EQ(refusal(R"({"$ref":"#/$defs/missing"})", "does not resolve"), "/$ref");
    EXPECT_EQ(refusal(R"({"$ref":"#node"})", "anchors"), "/$ref");
    EXPECT_EQ(refusal(R"({"uniqueItems":true})", "not regular"), "/uniqueItems");
    EXPECT_EQ(refusal(R"({"oneOf":[{"type":"integer"},{"minimum":0}]})", "branches 0 and 1 accept a value in common"),
              "/oneOf");
    EXPECT_EQ(refusal(R"({"properties":{"a":{"pattern":"(x)\\1"}}})", "backreferences are not regular"),
              "/properties/a/pattern");
    EXPECT_EQ(refusal(R"({"items":{"$id":"x"}})", "$id inside a schema"), "/items/$id");
    EXPECT_EQ(refusal(R"({"minimum":0,"exclusiveMinimum":true})", "draft-04"), "/exclusiveMinimum");
    EXPECT_EQ(refusal(R"({"type":"strin"})", "unknown type"), "/type");
    EXPECT_EQ(refusal(R"({"minLength":-1})", "non-negative integer"), "/minLength");
    // Counts past int64 (found by fuzz_json_schema: casting such a double to an integer is undefined).
    EXPECT_EQ(refusal(R"({"type":"array","minItems":4888888888888888888888888888888888888})", "below 2^63"),
              "/minItems");
    EXPECT_EQ(refusal(R"({"type":"array","maxItems":18446744073709551615})", "below 2^63"), "/maxItems");
    EXPECT_EQ(refusal(R"({"type":"string","maxLength":2.5})", "non-negative integer"), "/maxLength");
    EXPECT_EQ(refusal(R"({"properties":{"a~b/c":{"dependentRequired":{}}}})", "dependentRequired"),
              "/properties/a~0b~1c/dependentRequired");
    EXPECT_EQ(refusal("{not json", "not JSON"), "");
    // A number past a double's range is JSON that cannot be read (found by fuzz_json_schema: it escaped as
    // nlohmann's out_of_range).
    EXPECT_EQ(refusal(R"({"type":"array","minItems":4888900000000000000000E00000000000010248191152060682024})",
                      "number overflow"),
              "");
}

TEST(JsonSchema, AnnotationsDoNotChangeTheLanguage) {
    const Dfa plain = schema(R"({"type":"integer"})");
    const Dfa annotated = schema(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:x",
        "$comment":"c","title":"t","description":"d","examples":[1],"default":2,"deprecated":false,"readOnly":true,
        "writeOnly":false,"type":"integer"})");
    EXPECT_EQ(plain.size(), annotated.size());
    for (const char* text : {"1", "-20", "x", "1.5", ""}) EXPECT_EQ(plain.matches(text), annotated.matches(text));
}

TEST(JsonSchema, WhitespacePolicyIsBounded) {
    const std::string s = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
    SchemaOptions options;
    EXPECT_TRUE(schema(s, options).matches(R"({"a":[1,2]})"));
    EXPECT_FALSE(schema(s, options).matches(R"({"a": [1, 2]})"));
    options.whitespace = Whitespace::space_after_separators;
    EXPECT_TRUE(schema(s, options).matches(R"({"a": [1, 2]})"));
    EXPECT_FALSE(schema(s, options).matches(R"({"a":[1,2]})"));
    options.whitespace = Whitespace::optional_space;
    const Dfa optional = schema(s, options);
    EXPECT_TRUE(optional.matches(R"({"a":[1, 2]})"));
    EXPECT_TRUE(optional.matches(R"({"a": [1,2]})"));
    EXPECT_FALSE(optional.matches(R"({"a":  [1,2]})"));
    EXPECT_FALSE(optional.matches(R"({ "a":[1,2]})"));
    EXPECT_FALSE(optional.matches("{\"a\":\n[1,2]}"));
    EXPECT_EQ(canonical_json(ordered_json::parse(R"({"a":[1,2]})"), ordered_json::parse(s), options), R"({"a":[1,2]})");
}

TEST(JsonSchema, PropertiesInTheSchemasOrderThenTheOthers) {
    const Dfa dfa = schema(R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},
                               "required":["a"],"additionalProperties":{"type":"boolean"}})");
    EXPECT_TRUE(dfa.matches(R"({"b":1,"a":"x"})"));
    EXPECT_TRUE(dfa.matches(R"({"a":"x"})"));
    EXPECT_FALSE(dfa.matches(R"({"b":1})"));          // a is required
    EXPECT_FALSE(dfa.matches(R"({"a":"x","b":1})"));  // the schema's order
    EXPECT_TRUE(dfa.matches(R"({"a":"x","z":true,"c":false})"));
    EXPECT_FALSE(dfa.matches(R"({"z":true,"a":"x"})"));  // the others after
    EXPECT_FALSE(dfa.matches(R"({"a":"x","b":true})"));  // b is not an "other"
    EXPECT_FALSE(dfa.matches(R"({"a":"x","z":1})"));
    EXPECT_FALSE(dfa.matches(R"({"a":"x",})"));
    SchemaOptions strict;
    strict.additional_properties_by_default = false;
    EXPECT_FALSE(schema(R"({"properties":{"a":{}}})", strict).matches(R"({"a":1,"b":2})"));
    EXPECT_TRUE(schema(R"({"properties":{"a":{}}})").matches(R"({"a":1,"b":2})"));
}

TEST(JsonSchema, OrderHoldsAcrossBranchesOfOnePlace) {
    // anyOf branches name properties in different orders: the place's order is their first appearance (b, a, c).
    const auto s = ordered_json::parse(R"({"anyOf":[{"properties":{"b":{"type":"integer"},"a":{}},"required":["b"]},
                                                    {"properties":{"a":{},"c":{"type":"string"}},"required":["c"]}]})");
    const Dfa dfa = compile_json_schema(s);
    for (const char* instance : {R"({"a":1,"c":"x"})", R"({"c":"x","b":2})", R"({"a":1,"b":2})"}) {
        const std::string text = canonical_json(ordered_json::parse(instance), s);
        EXPECT_TRUE(dfa.matches(text)) << instance << " -> " << text;
    }
    EXPECT_EQ(canonical_json(ordered_json::parse(R"({"c":"x","z":0,"y":0,"a":1})"), s),
              R"({"a":1,"c":"x","y":0,"z":0})");
}

// The number automata against double comparison: random bounds and values with few digits, both written canonically.
TEST(JsonSchema, NumberBoundsAreExact) {
    std::mt19937 rng(7);
    auto draw = [&]() {
        const int digits = std::uniform_int_distribution<int>(0, 3)(rng);
        double scale = 1;
        for (int i = 0; i < digits; ++i) scale *= 10;
        return std::uniform_int_distribution<int>(-3000, 3000)(rng) / scale;
    };
    int pairs = 0;
    for (int round = 0; round < 300; ++round) {
        const double lo = draw(), hi = draw();
        const bool lo_exclusive = round % 2 == 1, hi_exclusive = round % 3 == 1, integer = round % 5 == 0;
        ordered_json s = {{"type", integer ? "integer" : "number"}};
        if (round % 7 != 3) s[lo_exclusive ? "exclusiveMinimum" : "minimum"] = lo;
        if (round % 7 != 4) s[hi_exclusive ? "exclusiveMaximum" : "maximum"] = hi;
        const Dfa dfa = compile_json_schema(s);
        for (int k = 0; k < 40; ++k) {
            const double v = k < 4 ? (k < 2 ? lo : hi) + (k % 2 ? 0.001 : -0.001) : draw();
            const ordered_json value = v;
            bool valid = !integer || v == static_cast<double>(static_cast<long>(v));
            if (s.contains("minimum")) valid = valid && v >= lo;
            if (s.contains("exclusiveMinimum")) valid = valid && v > lo;
            if (s.contains("maximum")) valid = valid && v <= hi;
            if (s.contains("exclusiveMaximum")) valid = valid && v < hi;
            const std::string text = canonical_json(value, s);
            ASSERT_EQ(dfa.matches(text), valid) << s.dump() << " on " << text;
            ++pairs;
        }
    }
    std::printf("number bounds: %d schema x value pairs agree with double comparison\n", pairs);
    const Dfa bounded = schema(R"({"type":"number","minimum":-1.5,"maximum":100})");
    EXPECT_TRUE(bounded.matches("99.999000"));
    EXPECT_TRUE(bounded.matches("-1.50"));
    EXPECT_FALSE(bounded.matches("-1.5000001"));
    EXPECT_FALSE(bounded.matches("1e1"));  // bounded numbers are plain decimals
    EXPECT_FALSE(bounded.matches("-0"));   // and never negative zero
    EXPECT_FALSE(bounded.matches("007"));
    const Dfa free = schema(R"({"type":"number"})");
    EXPECT_TRUE(free.matches("-0.5e+10"));
    EXPECT_TRUE(free.matches("1E3"));
    EXPECT_TRUE(free.matches("2.5e-99"));
    EXPECT_FALSE(free.matches("5e308"));  // three exponent digits: many parsers refuse what overflows a double
    EXPECT_FALSE(free.matches("01"));
    EXPECT_FALSE(free.matches(".5"));
    EXPECT_TRUE(schema(R"({"type":"integer","exclusiveMaximum":0})").matches("-12345678901234567890"));
}

TEST(JsonSchema, StringsAreDecodedValuesWrittenCanonically) {
    const Dfa length = schema(R"({"type":"string","minLength":2,"maxLength":3})");
    EXPECT_TRUE(length.matches("\"\xC3\xA9\xE4\xB8\xAD\""));  // two code points, five bytes
    EXPECT_FALSE(length.matches("\"\xC3\xA9\""));
    EXPECT_TRUE(length.matches(R"("a\"b")"));  // an escape is one character of the value
    EXPECT_TRUE(length.matches(R"("\n\t")"));
    EXPECT_FALSE(length.matches(R"("\u0041b")"));  // only the escapes JSON needs
    EXPECT_FALSE(length.matches("\"a\nb\""));      // a raw control character is not JSON
    EXPECT_TRUE(length.matches(R"("\u001fb")"));
    EXPECT_FALSE(length.matches(R"("\u001Fb")"));
    // pattern: a search on the decoded value, composed with its escapes
    const Dfa pattern = schema(R"({"type":"string","pattern":"^a\\nb|\"$"})");
    EXPECT_TRUE(pattern.matches(R"("a\nbcd")"));
    EXPECT_TRUE(pattern.matches(R"("xyz\"")"));
    EXPECT_FALSE(pattern.matches(R"("xa\nb")"));
    EXPECT_FALSE(pattern.matches(R"("\"x")"));
    EXPECT_TRUE(schema(R"({"pattern":"b"})").matches(R"("abc")"));
    EXPECT_TRUE(schema(R"({"pattern":"b"})").matches("12"));  // pattern constrains strings only
    const Dfa date = schema(R"({"type":"string","format":"date"})");
    EXPECT_TRUE(date.matches(R"("2024-02-29")"));
    EXPECT_FALSE(date.matches(R"("2023-02-29")"));
    SchemaOptions exact;
    exact.exact_leap_seconds = true;
    const std::string time = R"({"type":"string","format":"time"})";
    EXPECT_TRUE(schema(time).matches(R"("23:59:60Z")"));
    EXPECT_TRUE(schema(time).matches(R"("23:59:60.5-00:00")"));
    EXPECT_FALSE(schema(time).matches(R"("15:59:60-08:00")"));  // valid, refused by the compact default
    EXPECT_TRUE(schema(time, exact).matches(R"("15:59:60-08:00")"));
    EXPECT_FALSE(schema(time, exact).matches(R"("15:59:60+08:00")"));
    EXPECT_GT(schema(time, exact).size(), 20 * schema(time).size());
}

TEST(JsonSchema, RecursionIsUnrolledToTheDocumentedDepth) {
    const std::string list = R"({"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}},
                                 "$ref":"#/$defs/node"})";
    auto nested = [](int levels) {
        std::string text = "{}";
        for (int i = 1; i < levels; ++i) text = R"({"next":)" + text + "}";
        return text;
    };
    SchemaOptions options;
    for (int depth : {0, 2, 3}) {
        options.recursion_depth = depth;
        const Dfa dfa = schema(list, options);
        EXPECT_TRUE(dfa.matches(nested(depth + 1))) << depth;
        EXPECT_FALSE(dfa.matches(nested(depth + 2))) << depth;
    }
    options = {};
    options.free_value_depth = 2;  // arrays and objects two deep
    EXPECT_TRUE(schema("true", options).matches("[[1],{}]"));
    EXPECT_FALSE(schema("true", options).matches("[[[1]]]"));
}

TEST(JsonSchema, CombinatorsAndValues) {
    const Dfa all = schema(R"({"allOf":[{"type":"integer","minimum":0},{"maximum":10},{"enum":[1,5,11,"a"]}]})");
    EXPECT_TRUE(all.matches("5"));
    EXPECT_FALSE(all.matches("11"));
    EXPECT_FALSE(all.matches("\"a\""));
    const Dfa one = schema(R"({"oneOf":[{"type":"string"},{"type":"integer","minimum":3}]})");
    EXPECT_TRUE(one.matches("\"x\""));
    EXPECT_TRUE(one.matches("4"));
    EXPECT_FALSE(one.matches("2"));
    const Dfa value = schema(R"({"const":{"b":[1.0,{"y":null,"x":"\u00e9"}],"a":-0.0}})");
    EXPECT_TRUE(value.matches("{\"a\":0,\"b\":[1,{\"x\":\"\xC3\xA9\",\"y\":null}]}"));
    const Dfa tuple = schema(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1})");
    EXPECT_TRUE(tuple.matches(R"(["a",1])"));
    EXPECT_TRUE(tuple.matches(R"(["a"])"));
    EXPECT_FALSE(tuple.matches(R"([])"));
    EXPECT_FALSE(tuple.matches(R"(["a",1,2])"));
}

TEST(JsonSchema, LimitsAreErrorsNotMemory) {
    EXPECT_THROW(schema(R"({"type":"string","maxLength":100000000})"), LimitError);
    SchemaOptions options;
    options.limits.max_states = 50;
    EXPECT_THROW(schema(R"({"type":"string","format":"date","minLength":3})", options), LimitError);
}

// An anyOf of 2,000 objects of one property each (issue 64: 54 s, then a refusal that blamed $ref recursion the
// schema does not have). Closed objects compile (each branch needs no slot for the other branches' names); open
// ones are refused quickly, with the cause named.
std::string many_objects(int count, bool closed) {
    ordered_json branches = ordered_json::array();
    for (int i = 0; i < count; ++i) {
        ordered_json object = {{"type", "object"},
                               {"properties", {{"k" + std::to_string(i), {{"type", "integer"}}}}},
                               {"required", {"k" + std::to_string(i)}}};
        if (closed) object["additionalProperties"] = false;
        branches.push_back(object);
    }
    return ordered_json{{"anyOf", branches}}.dump();
}

TEST(JsonSchema, AnyOfOfManyClosedObjectsCompiles) {
    const Dfa dfa = schema(many_objects(2000, true));
    EXPECT_TRUE(dfa.matches(R"({"k0":1})"));
    EXPECT_TRUE(dfa.matches(R"({"k1999":-42})"));
    EXPECT_FALSE(dfa.matches(R"({"k2000":1})"));
    EXPECT_FALSE(dfa.matches(R"({"k7":1,"k8":2})"));
    EXPECT_FALSE(dfa.matches("{}"));
}

TEST(JsonSchema, AnyOfOfManyOpenObjectsIsRefusedForItsRealCause) {
    try {
        schema(many_objects(2000, false));
        FAIL() << "compiled";
    } catch (const LimitError& e) {
        const std::string why = e.what();
        EXPECT_EQ(why.find("recursion"), std::string::npos) << why;
        EXPECT_NE(why.find("2001 object schemas apply"), std::string::npos) << why;
        EXPECT_NE(why.find("2000 property names"), std::string::npos) << why;
    }
}

TEST(JsonSchema, CompilingStopsAtTheDeadlineOrWhenCancelled) {
    SchemaOptions options;
    options.limits.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    EXPECT_THROW(schema(R"({"type":"string","maxLength":50})", options), CompileStopped);
    options.limits.deadline = std::chrono::steady_clock::time_point::max();
    int polls = 0;
    options.limits.cancelled = [&] { return ++polls > 3; };
    try {
        schema(many_objects(50, true), options);
        FAIL() << "not cancelled";
    } catch (const CompileStopped& e) {
        EXPECT_TRUE(e.cancelled);
        EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
    }
    options.limits.cancelled = nullptr;
    EXPECT_TRUE(schema(many_objects(50, true), options).matches(R"({"k3":7})"));
}

TEST(JsonSchema, CanonicalJson) {
    const auto any = ordered_json::parse("true");
    EXPECT_EQ(canonical_json(ordered_json::parse("[1.0, -0.0, 1e2, 1.5e-3, 12345678901234567890, -7]"), any),
              "[1,0,100,0.0015,12345678901234567890,-7]");
    EXPECT_EQ(canonical_json(ordered_json::parse(R"("\u00e9\"\\\/\b\f\n\r\t\u0001\u007f")"), any),
              "\"\xC3\xA9\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\x7F\"");
    SchemaOptions spaced;
    spaced.whitespace = Whitespace::space_after_separators;
    EXPECT_EQ(canonical_json(ordered_json::parse(R"({"b":[1,2],"a":{}})"), any, spaced), R"({"a": {}, "b": [1, 2]})");
}

}  // namespace
}  // namespace rudder::grammar
