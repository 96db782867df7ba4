// Languages over bytes as expressions: what the regex parser and the JSON Schema compiler build, and what the NFA is
// expanded from. Nodes are immutable and shared; a node used twice is expanded twice.
#pragma once

#include "code_points.hpp"

#include <rudder/grammar/dfa.hpp>

#include <memory>
#include <string>
#include <vector>

namespace rudder::grammar {

struct Lang;
using LangPtr = std::shared_ptr<const Lang>;

struct Lang {
    enum class Kind {
        nothing,      // no word
        bytes,        // one byte from `byte_ranges`
        code_points,  // the UTF-8 encoding of one code point of `set`
        sequence,     // children one after the other (empty: the empty word)
        choice,       // any one child
        repeat,       // child 0 from `min` to `max` times (max < 0: unbounded)
        graph,        // paths from node 0 to a node in `accepting`, each edge a child (nullptr: the empty word)
        automaton,    // the language of `dfa`
        json_string,  // `dfa`'s words (decoded UTF-8) written as a JSON string's contents (escapes where JSON needs)
    };
    struct Edge {
        int from;
        int to;
        LangPtr label;  // nullptr: the empty word
    };

    Kind kind = Kind::nothing;
    std::vector<std::pair<uint8_t, uint8_t>> byte_ranges;
    CodePointSet set;
    std::vector<LangPtr> children;
    int min = 0;
    int max = 0;
    int nodes = 0;
    std::vector<Edge> edges;
    std::vector<int> accepting;
    std::shared_ptr<const Dfa> dfa;
};

LangPtr nothing();
LangPtr empty_word();
LangPtr byte_range(uint8_t lo, uint8_t hi);
LangPtr literal(const std::string& bytes);  // the bytes as they are
LangPtr code_points(const CodePointSet& set);
LangPtr sequence(std::vector<LangPtr> parts);
LangPtr choice(std::vector<LangPtr> options);
LangPtr repeat(LangPtr child, int min, int max);  // max < 0: unbounded
LangPtr optional(LangPtr child);
LangPtr graph(int nodes, std::vector<Lang::Edge> edges, std::vector<int> accepting);
LangPtr automaton(std::shared_ptr<const Dfa> dfa);
LangPtr json_string_contents(std::shared_ptr<const Dfa> decoded);

// Whether the node is `nothing` (after the constructors' simplifications: a sequence with a `nothing` part is one).
bool is_nothing(const LangPtr& lang);

// The JSON escape of a byte that cannot stand in a JSON string (a control character, '"' or '\\'), "" for any other
// byte: \" \\ \b \f \n \r \t, else \u00XX in lower case.
const std::string& json_escape(uint8_t byte);

// The minimal automaton of a language, within `limits`. `what` names it in a LimitError ("the pattern", "the schema
// at /properties/a").
Dfa build_dfa(const LangPtr& lang, const CompileLimits& limits, const std::string& what);

// Products of two automata, minimised: words of both, or words of `a` that are not words of `b`.
Dfa intersect(const Dfa& a, const Dfa& b, const CompileLimits& limits, const std::string& what);
Dfa difference(const Dfa& a, const Dfa& b, const CompileLimits& limits, const std::string& what);

}  // namespace rudder::grammar
