// A deterministic finite automaton over bytes: what the regular-expression and JSON Schema compilers produce, and
// what the token-level automaton over a model's vocabulary is built from. No LibTorch.
//
//     rudder::grammar::Dfa dfa = rudder::grammar::compile_regex("[a-z]+(-[a-z]+)*");
//     int32_t s = dfa.start();
//     for (unsigned char b : std::string("well-formed")) s = dfa.next(s, b);   // kDead stays kDead
//     bool ok = s != rudder::grammar::Dfa::kDead && dfa.accepting(s);          // == dfa.matches("well-formed")
//
// The automaton is minimal (no two states accept the same continuations) and trimmed: every state but the start of
// an empty language is live (some accepting state is reachable from it), and a byte after which nothing can be
// accepted leads to kDead. Its transitions are one table of [states x byte classes], 4 bytes an entry.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rudder::grammar {

// How large a compilation may grow before it stops with a LimitError (never an out-of-memory): a pattern such as
// `(a|b)*a(a|b){40}` needs 2^40 states, and the limits turn it into an error that says so.
struct CompileLimits {
    // States of any automaton built on the way (the subset construction's, a product's, the minimal one).
    int32_t max_states = 100000;
    // States of the nondeterministic automaton a pattern or schema expands to (bounded repetitions are copied).
    int32_t max_nfa_states = 2000000;
    // Work of the subset constructions and products: NFA states visited plus transitions made, summed.
    int64_t max_work = 200000000;
    // Bytes the token-level transitions may take (TokenAutomaton::prepare): every state the run's positions can
    // reach, with the tokens that lead from it. A byte automaton of a few thousand states is small, but each of its
    // states read over a vocabulary of 150,000 tokens may hold hundreds of kilobytes (a string of maxLength 5000 at
    // 100 positions wanted 4.6 GB), so the cost is counted here, before it is allocated. 512 MiB holds the largest
    // of the structured benchmark's schemas at 256 positions of Qwen2.5's 151,936 tokens (361 MB, docs/results.md).
    uint64_t max_table_bytes = uint64_t{512} << 20;
    // When compiling must have ended (a request's time limit): past it, any step of the compilation stops with a
    // CompileStopped. The default never comes.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    // Polled with the deadline (every few milliseconds of work): returning true stops the compilation (its request
    // has gone). Empty: never.
    std::function<bool()> cancelled;
};

// A compilation that exceeded one of CompileLimits; what() names the limit and what needed it.
struct LimitError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A compilation stopped by CompileLimits::deadline or CompileLimits::cancelled; `cancelled` says which.
struct CompileStopped : LimitError {
    CompileStopped(const std::string& what, bool cancelled);
    bool cancelled;
};

// Throws CompileStopped naming `what` ("the schema") when `limits`' deadline has passed or it is cancelled.
void check_stopped(const CompileLimits& limits, const std::string& what);

class Dfa {
public:
    static constexpr int32_t kDead = -1;

    // The state before any byte.
    int32_t start() const { return start_; }
    // The state after `byte` from `state`; kDead when no accepted text continues that way (and from kDead).
    int32_t next(int32_t state, uint8_t byte) const {
        return state < 0 ? kDead : table_[static_cast<size_t>(state) * classes_ + class_of_[byte]];
    }
    // Whether the text read so far is a word of the language (false for kDead).
    bool accepting(int32_t state) const { return state >= 0 && accepting_[static_cast<size_t>(state)] != 0; }
    // Number of states; ids run 0 .. size()-1.
    int32_t size() const { return static_cast<int32_t>(accepting_.size()); }

    // Byte classes: bytes a and b with class_of(a) == class_of(b) lead every state to the same state.
    uint8_t class_of(uint8_t byte) const { return class_of_[byte]; }
    // Number of byte classes (1 .. 256); class ids run 0 .. classes()-1.
    int classes() const { return classes_; }
    // The state after any byte of `byte_class` from `state` (kDead from kDead).
    int32_t next_by_class(int32_t state, int byte_class) const {
        return state < 0 ? kDead : table_[static_cast<size_t>(state) * classes_ + static_cast<size_t>(byte_class)];
    }

    // Whether an accepting state is reachable from `state` (false for kDead). Every state of a trimmed automaton is
    // live except the lone start state of an empty language.
    bool live(int32_t state) const { return state >= 0 && live_[static_cast<size_t>(state)] != 0; }
    // Whether the language has no word at all.
    bool empty() const { return !live(start_); }
    // Whether the whole text is a word of the language.
    bool matches(std::string_view text) const;
    // The shortest text that leads from `state` to acceptance (breadth-first, the smallest byte first at each
    // length); std::nullopt when none does (`state` not live).
    std::optional<std::string> shortest_from(int32_t state) const;
    // Bytes this object holds (tables and the object itself).
    size_t memory_bytes() const;

    // Builds an automaton from its parts; the builders in this library call it after minimisation and trimming.
    // `table` has states x classes entries, each a state id or kDead; `class_of` maps every byte to a class. Throws
    // std::invalid_argument when the parts disagree. `live` is computed here.
    Dfa(int32_t start, std::vector<int32_t> table, std::vector<uint8_t> accepting, std::vector<uint8_t> class_of,
        int classes);
    // The automaton of the empty language: one state, not accepting, every byte to kDead.
    Dfa();

private:
    int32_t start_ = 0;
    int classes_ = 1;
    std::vector<int32_t> table_;
    std::vector<uint8_t> accepting_;
    std::vector<uint8_t> live_;
    std::vector<uint8_t> class_of_;
};

}  // namespace rudder::grammar
