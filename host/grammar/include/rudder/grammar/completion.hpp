// A sequence with holes against a token automaton: some positions hold a token, the others are free (masked, or
// about to be drawn). Which tokens a free position may take so that the whole can still spell a word of the
// language, exactly, whatever order the holes are filled in; and which of several proposed tokens can be committed
// together. Forward and backward sets of automaton states over the positions (DINGO's reachability, without its
// probabilities: the host draws).
#pragma once

#include <cstdint>
#include <vector>

#include <rudder/grammar/token_automaton.hpp>

namespace rudder::grammar {

class Completion {
public:
    static constexpr int64_t kFree = -1;
    explicit Completion(TokenAutomaton& automaton) : automaton_(automaton) {}

    // The sequence: tokens[i] >= 0 holds that token, kFree a hole. Finds every state each prefix may end in and
    // that a completion of the rest can still lead to acceptance.
    void set(const std::vector<int64_t>& tokens);
    // Whether some filling of the holes spells a word of the language.
    bool possible() const;
    // The tokens free position i may take (bits, token_words(V) words, written over `bits`): those some completion
    // of the other holes accepts.
    void allowed(int64_t i, uint32_t* bits);

    // Proposals for some holes (`rows`, ascending, with `proposed` tokens): which can be committed together. Taken in
    // position order, each is kept when it fits the ones kept before it with every later hole free (so the kept ones
    // fit together, and any subset of them does). Returns, per row, whether it was refused; set() is left describing
    // the sequence with the kept ones placed.
    std::vector<bool> accept(const std::vector<int64_t>& tokens, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& proposed);

private:
    // The states position i's successor set holds, from `from` through position i's token (or any, free).
    void step_forward(const std::vector<int32_t>& from, int64_t token, std::vector<int32_t>& to);

    TokenAutomaton& automaton_;
    std::vector<int64_t> tokens_;
    std::vector<std::vector<int32_t>> reach_;  // [L + 1]: states after positions 0..i-1 from which acceptance remains
    std::vector<char> mark_;                   // scratch of step_forward: one flag per automaton state
    std::vector<char> member_;                 // scratch of membership tests: one flag per automaton state
};

}  // namespace rudder::grammar
