// Compile time and size of the byte automata (host/grammar) for realistic schemas and patterns: schemas written to
// match those of JSON-Mode-Eval and JSONSchemaBench (objects with required and optional properties, enums, formats,
// bounded numbers, arrays of objects, a recursive tree) and common patterns. Prints, per input, the median compile
// time over 21 runs (after one that fills the process-wide caches: utf8proc's categories, the formats), the states,
// byte classes and memory of the automaton; then the median and the worst over the schemas. `make bench-grammar`.
#include <rudder/grammar/json_schema.hpp>
#include <rudder/grammar/regex.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Input {
    const char* name;
    const char* text;
};

const Input kSchemas[] = {
    {"person", R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":64},
      "age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},
      "is_member":{"type":"boolean"}},"required":["name","age"],"additionalProperties":false})"},
    {"address", R"({"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
      "postal_code":{"type":"string","pattern":"^[0-9]{5}(-[0-9]{4})?$"},"country":{"enum":["US","CA","MX","DE","FR",
      "JP"]}},"required":["street","city","country"],"additionalProperties":false})"},
    {"product", R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"title":{"type":"string",
      "maxLength":120},"price":{"type":"number","exclusiveMinimum":0,"maximum":100000},"currency":{"enum":["USD",
      "EUR","GBP"]},"tags":{"type":"array","items":{"type":"string","maxLength":20},"maxItems":8},"in_stock":
      {"type":"boolean"}},"required":["id","title","price","currency"],"additionalProperties":false})"},
    {"event", R"({"type":"object","properties":{"event_id":{"type":"string","format":"uuid"},"starts_at":
      {"type":"string","format":"date-time"},"ends_at":{"type":"string","format":"date-time"},"venue":{"type":
      "object","properties":{"name":{"type":"string"},"capacity":{"type":"integer","minimum":1}},"required":
      ["name"],"additionalProperties":false},"attendees":{"type":"array","items":{"type":"object","properties":
      {"name":{"type":"string"},"rsvp":{"enum":["yes","no","maybe"]}},"required":["name","rsvp"],
      "additionalProperties":false}}},"required":["event_id","starts_at"],"additionalProperties":false})"},
    {"order", R"({"type":"object","properties":{"order_id":{"type":"integer","minimum":1},"customer":{"type":
      "object","properties":{"name":{"type":"string"},"email":{"type":"string","format":"email"}},"required":
      ["name"],"additionalProperties":false},"items":{"type":"array","minItems":1,"items":{"type":"object",
      "properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"quantity":{"type":"integer",
      "minimum":1,"maximum":99},"unit_price":{"type":"number","minimum":0}},"required":["sku","quantity"],
      "additionalProperties":false}},"status":{"enum":["pending","shipped","delivered","cancelled"]},"notes":
      {"anyOf":[{"type":"string","maxLength":200},{"type":"null"}]}},"required":["order_id","items","status"],
      "additionalProperties":false})"},
    {"github_issue", R"({"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string"},
      "labels":{"type":"array","items":{"enum":["bug","enhancement","question","documentation"]},"maxItems":4},
      "assignee":{"anyOf":[{"type":"string","pattern":"^[A-Za-z0-9-]{1,39}$"},{"type":"null"}]},"milestone":
      {"type":"integer","minimum":1},"created":{"type":"string","format":"date"}},"required":["title"]})"},
    {"tree", R"({"$defs":{"node":{"type":"object","properties":{"label":{"type":"string","maxLength":16},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["label"],
      "additionalProperties":false}},"$ref":"#/$defs/node"})"},
    {"free_object", R"({"type":"object","properties":{"kind":{"const":"note"},"data":true},"required":["kind"]})"},
    {"tool_call", R"({"type":"object","properties":{"name":{"enum":["get_weather","search","calculator"]},
      "arguments":{"oneOf":[{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius",
      "fahrenheit"]}},"required":["city"],"additionalProperties":false},{"type":"object","properties":{"query":
      {"type":"string","minLength":1}},"required":["query"],"additionalProperties":false},{"type":"object",
      "properties":{"expression":{"type":"string","pattern":"^[0-9+*/(). -]+$"}},"required":["expression"],
      "additionalProperties":false}]}},"required":["name","arguments"],"additionalProperties":false})"},
};

const Input kPatterns[] = {
    {"iso_date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
    {"phone", "\\(?[0-9]{3}\\)?[-. ]?[0-9]{3}[-. ]?[0-9]{4}"},
    {"email_like", "[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}"},
    {"words", "\\p{Lu}\\p{Ll}+( \\p{Ll}+){2,8}\\."},
    {"answer", "The answer is (-?[0-9]+(\\.[0-9]+)?)\\."},
};

double median_ms(const std::function<void()>& compile) {
    std::vector<double> times;
    for (int i = 0; i < 21; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        compile();
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

void report(const char* kind, const char* name, const std::function<rudder::grammar::Dfa()>& compile,
            std::vector<double>& medians) {
    rudder::grammar::Dfa dfa = compile();  // fills the caches
    const double ms = median_ms([&] { dfa = compile(); });
    medians.push_back(ms);
    std::printf("%-7s %-14s %8.2f ms %7d states %4d classes %9.1f KiB\n", kind, name, ms, dfa.size(), dfa.classes(),
                static_cast<double>(dfa.memory_bytes()) / 1024.0);
}

void summary(const char* kind, std::vector<double> medians) {
    std::sort(medians.begin(), medians.end());
    std::printf("%s: median %.2f ms, worst %.2f ms over %zu\n", kind, medians[medians.size() / 2], medians.back(),
                medians.size());
}

}  // namespace

int main() {
    std::vector<double> schema_ms, pattern_ms;
    for (const auto& input : kSchemas) {
        report(
            "schema", input.name, [&] { return rudder::grammar::compile_json_schema_text(input.text); }, schema_ms);
    }
    for (const auto& input : kPatterns) {
        report(
            "regex", input.name, [&] { return rudder::grammar::compile_regex(input.text); }, pattern_ms);
    }
    summary("schemas", schema_ms);
    summary("patterns", pattern_ms);
    return 0;
}
