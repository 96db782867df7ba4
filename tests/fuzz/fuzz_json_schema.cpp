// libFuzzer target: the JSON Schema compiler. The input is a schema's text and an instance's text, separated by the
// first NUL byte. compile_json_schema_text returns an automaton within the (small) limits or throws SchemaError or
// LimitError; the shortest text the automaton accepts, and a few found by walking it, are JSON; canonical_json of an
// instance that parses is JSON, and the automaton's answer on it does not depend on how it is fed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/grammar/json_schema.hpp>

namespace {

using rudder::grammar::Dfa;

// A text found by walking from the start, choosing bytes by `seed`, and finishing by the shortest way to accept.
std::string walk(const Dfa& dfa, uint32_t seed) {
    std::string word;
    int32_t s = dfa.start();
    for (int step = 0; step < 40; ++step) {
        seed = seed * 1103515245u + 12345u;
        if (dfa.accepting(s) && seed % 5 == 0) return word;
        std::vector<int> bytes;
        for (int b = 0; b < 256; ++b) {
            if (dfa.next(s, static_cast<uint8_t>(b)) != Dfa::kDead) bytes.push_back(b);
        }
        if (bytes.empty()) break;
        const int b = bytes[(seed >> 8) % bytes.size()];
        word += static_cast<char>(b);
        s = dfa.next(s, static_cast<uint8_t>(b));
    }
    // finish: the shortest completion from s
    const std::optional<std::string> tail = dfa.shortest_from(s);
    if (!tail) std::abort();  // every state of a trimmed automaton is live
    return word + *tail;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string schema_text = input.substr(0, nul);
    const std::string instance_text = nul == std::string::npos ? std::string() : input.substr(nul + 1);
    rudder::grammar::SchemaOptions options;
    options.limits.max_states = 3000;
    options.limits.max_nfa_states = 100000;
    options.limits.max_work = 3000000;
    options.recursion_depth = 2;
    options.free_value_depth = 2;
    options.whitespace = size % 3 == 0   ? rudder::grammar::Whitespace::none
                         : size % 3 == 1 ? rudder::grammar::Whitespace::space_after_separators
                                         : rudder::grammar::Whitespace::optional_space;
    Dfa dfa;
    try {
        dfa = rudder::grammar::compile_json_schema_text(schema_text, options);
    } catch (const rudder::grammar::SchemaError&) {
        return 0;
    } catch (const rudder::grammar::LimitError&) {
        return 0;
    }
    if (!dfa.empty()) {
        const std::optional<std::string> shortest = dfa.shortest_from(dfa.start());
        if (!shortest || !nlohmann::json::accept(*shortest)) std::abort();  // a non-empty language has a word
        for (uint32_t seed = 1; seed <= 4; ++seed) {
            if (!nlohmann::json::accept(walk(dfa, seed * static_cast<uint32_t>(size)))) std::abort();
        }
    }
    const auto schema = nlohmann::ordered_json::parse(schema_text);
    const auto instance = nlohmann::ordered_json::parse(instance_text, nullptr, false);
    if (instance.is_discarded()) return 0;
    std::string text;
    try {
        text = rudder::grammar::canonical_json(instance, schema, options);
    } catch (const std::invalid_argument&) {  // nested deeper than canonical_json writes
        return 0;
    }
    if (!nlohmann::json::accept(text)) std::abort();
    int32_t state = dfa.start();
    for (char c : text) state = dfa.next(state, static_cast<uint8_t>(c));
    if (dfa.accepting(state) != dfa.matches(text)) std::abort();
    return 0;
}
