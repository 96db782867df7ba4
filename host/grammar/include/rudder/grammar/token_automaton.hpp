// A byte automaton (Dfa) read token by token: the language of the token sequences whose decoded text it accepts.
// Structured output for diffusion models needs whole-token transitions from every state a position may be in, so the
// transitions of a state are found once, by walking the vocabulary's pieces as a trie from it (subtrees that lead
// nowhere are skipped), and kept.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rudder/grammar/dfa.hpp>

namespace rudder::grammar {

// A vocabulary as the text its tokens add (the text layer's TokenPieces, copied so that this layer needs nothing but
// the SDK): token v adds text[k][v] after a token that left kind k (kind 0 at the start) and leaves kind_after[v].
struct Pieces {
    std::vector<std::vector<std::string>> text;  // [kinds][V]
    std::vector<int32_t> kind_after;             // [V]
    int64_t end_token = -1;                      // ends the text (the pad): what follows it is not read; -1: none
    std::vector<int64_t> never;                  // tokens never placed (the mask)
    int64_t vocab_size() const { return static_cast<int64_t>(kind_after.size()); }
    int32_t kinds() const { return static_cast<int32_t>(text.size()); }
};

// Bits of tokens: token v is bit v % 32 of word v / 32 (the plugin ABI's packed masks).
using TokenBits = std::vector<uint32_t>;
inline size_t token_words(int64_t vocab_size) { return static_cast<size_t>((vocab_size + 31) / 32); }

// A set of tokens: their ids while few, bits when many.
class TokenSet {
public:
    void add(int64_t token) { ids_.push_back(static_cast<int32_t>(token)); }
    // Sorts the ids, and turns them into bits when there are more than a word's worth per 32 tokens.
    void seal(int64_t vocab_size);
    bool contains(int64_t token) const;
    void or_into(uint32_t* words) const;
    int64_t size() const { return count_; }
    size_t memory_bytes() const { return ids_.capacity() * sizeof(int32_t) + bits_.capacity() * sizeof(uint32_t); }

private:
    std::vector<int32_t> ids_;
    std::vector<uint32_t> bits_;  // used instead of ids_ once sealed dense
    int64_t count_ = 0;
};

// A vocabulary ready for token automata: its pieces, and each kind's pieces as a trie. Built once per vocabulary (the
// tries of 151,936 tokens take a few hundred milliseconds) and shared by every automaton over it.
class Vocabulary {
public:
    explicit Vocabulary(Pieces pieces);
    const Pieces& pieces() const { return pieces_; }
    int64_t size() const { return pieces_.vocab_size(); }
    int32_t kinds() const { return pieces_.kinds(); }
    // Whether token v is left out of the tries: never placed, or the end token.
    bool skipped(int64_t v) const { return skipped_[static_cast<size_t>(v)]; }
    size_t memory_bytes() const;

    // The pieces of one kind as a trie in depth-first order: node n spells `byte[n]` at depth `depth[n]` (1 for the
    // root's children), its subtree is [n, subtree_end[n]), and the tokens whose piece ends there are
    // ends[end_begin[n] .. end_begin[n + 1]).
    struct Trie {
        std::vector<uint8_t> byte;
        std::vector<int32_t> depth, subtree_end, end_begin;
        std::vector<int32_t> ends;
        std::vector<int32_t> empty;  // tokens whose piece is empty
        int32_t max_depth = 0;
    };
    const Trie& trie(int32_t kind) const { return tries_[static_cast<size_t>(kind)]; }

private:
    Pieces pieces_;
    std::vector<bool> skipped_;
    std::vector<Trie> tries_;  // one per kind
};

class TokenAutomaton {
public:
    static constexpr int32_t kDead = -1;
    struct Edge {
        int32_t target;
        TokenSet tokens;  // the tokens that lead there
    };

    TokenAutomaton(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocabulary);

    // A state is the byte automaton's state and the decoder's kind, or the end: the text ended at the end token and
    // every later token is ignored.
    int32_t start() const { return pair(dfa_->start(), 0); }
    int32_t end_state() const { return dfa_->size() * kinds_; }
    int32_t states() const { return end_state() + 1; }
    // Where `token` leads from `state` (kDead when the text cannot go on so).
    int32_t next(int32_t state, int64_t token) const;
    // Whether the text may stop here: the byte automaton accepts it, or it ended already.
    bool accepting(int32_t state) const;
    // Every token out of `state`, grouped by where it leads (computed on first use, then kept).
    const std::vector<Edge>& edges(int32_t state);
    // The fewest tokens that lead from the start to an accepting state (std::nullopt when none does): what a text of
    // the language needs of the sequence's length. Breadth-first, walking the states' tokens without keeping them
    // (prepare() keeps those a run needs). The search stops after `max_tokens` tokens: max_tokens + 1 then means
    // "more than max_tokens", and std::nullopt still means no token sequence reaches acceptance at all. Stops with
    // CompileStopped at `limits`' deadline or cancellation.
    std::optional<int64_t> shortest(int64_t max_tokens = std::numeric_limits<int64_t>::max(),
                                    const CompileLimits& limits = {});
    // Finds and keeps the transitions of every state that the first `positions` tokens of a text can be in, the
    // states a Completion over that many positions reads (every step of a run reaches only these): breadth-first,
    // within limits.max_table_bytes, checked before each state's transitions are found with room for the most a
    // state can take (8 bytes a token of the vocabulary). Beyond it, a LimitError names the positions, the states
    // reached and the bytes they take; at the deadline or when cancelled, CompileStopped. States kept before (an
    // earlier run) count and are not found again.
    void prepare(int64_t positions, const CompileLimits& limits);

    int64_t vocab_size() const { return vocabulary_->size(); }
    const Pieces& pieces() const { return vocabulary_->pieces(); }
    const Vocabulary& vocabulary() const { return *vocabulary_; }
    const Dfa& dfa() const { return *dfa_; }
    // Memory the transitions found so far take (the vocabulary's tries are counted by Vocabulary::memory_bytes).
    size_t memory_bytes() const;
    int32_t states_expanded() const { return expanded_; }

private:
    int32_t pair(int32_t dfa_state, int32_t kind) const { return dfa_state * kinds_ + kind; }
    // Calls to(target, token) for every token out of `state` (each once), walking the vocabulary's trie.
    template <class To>
    void walk(int32_t state, To&& to) const;
    std::vector<Edge> expand(int32_t state) const;
    size_t edges_bytes(const std::vector<Edge>& edges) const;

    std::shared_ptr<const Dfa> dfa_;
    std::shared_ptr<const Vocabulary> vocabulary_;
    int32_t kinds_;
    std::vector<std::optional<std::vector<Edge>>> edges_;
    int32_t expanded_ = 0;
    size_t bytes_ = 0;  // memory_bytes(), kept as states are expanded
};

}  // namespace rudder::grammar
