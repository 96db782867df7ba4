// The steps between a Lang and a Dfa: the NFA a Lang expands to, the subset construction over byte classes, and the
// minimisation (trimming, Valmari and Lehtinen's partition refinement for partial automata, merged byte classes).
#pragma once

#include "lang.hpp"

#include <rudder/grammar/dfa.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace rudder::grammar {

// A deterministic automaton before minimisation: `table` has states x classes entries (kDead where undefined).
struct RawDfa {
    int32_t start = 0;
    int classes = 1;
    std::vector<int32_t> table;
    std::vector<uint8_t> accepting;
    std::vector<uint8_t> class_of = std::vector<uint8_t>(256, 0);
};

// Counts states and work against the limits; throws LimitError naming `what`.
class Budget {
public:
    Budget(const CompileLimits& limits, std::string what) : limits_(limits), what_(std::move(what)) {}
    void nfa_states(int64_t count) const;
    void dfa_states(int64_t count) const;
    void work(int64_t amount);

private:
    const CompileLimits& limits_;
    std::string what_;
    int64_t work_ = 0;
};

// The subset construction of the NFA that `lang` expands to.
RawDfa determinize(const LangPtr& lang, Budget& budget);
// The minimal trimmed automaton of `raw`'s language (renumbered breadth-first from the start, byte classes merged).
Dfa minimize(const RawDfa& raw, Budget& budget);

}  // namespace rudder::grammar
