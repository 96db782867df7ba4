// The token-level automaton and the completion of holed sequences against brute force: every sequence of a small
// vocabulary enumerated, decoded by its pieces, and matched by the byte automaton.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <rudder/grammar/completion.hpp>
#include <rudder/grammar/json_schema.hpp>
#include <rudder/grammar/regex.hpp>
#include <rudder/grammar/token_automaton.hpp>

namespace rudder::grammar {
namespace {

// A vocabulary of a few pieces, one kind; token 0 is the end token (the pad), token 1 is never placed (the mask).
Pieces small_vocabulary() {
    Pieces p;
    p.text = {{"<pad>", "<mask>", "a", "b", "ab", "ba", "c", "", "aa", "{", "}", "\""}};
    p.kind_after.assign(p.text[0].size(), 0);
    p.end_token = 0;
    p.never = {1};
    return p;
}

// A word-level vocabulary: kinds 0 (start), 1 (after a word: a space first), 2 (after "(": none).
Pieces word_vocabulary() {
    const std::vector<std::string> words = {"<pad>", "<mask>", "the", "cat", "(", ")", ".", "sat"};
    Pieces p;
    p.text.assign(3, std::vector<std::string>(words.size()));
    p.kind_after.assign(words.size(), 1);
    for (size_t v = 0; v < words.size(); ++v) {
        const bool attaches = words[v] == ")" || words[v] == ".";
        p.text[0][v] = words[v];
        p.text[1][v] = attaches ? words[v] : " " + words[v];
        p.text[2][v] = words[v];
        if (words[v] == "(") p.kind_after[v] = 2;
    }
    p.end_token = 0;
    p.never = {1};
    return p;
}

// The text a full sequence decodes to (up to the end token), or nullopt if it holds a token never placed (anywhere:
// a finished sample holds none, after the end token neither).
std::optional<std::string> spell(const Pieces& p, const std::vector<int64_t>& seq) {
    for (int64_t v : seq)
        for (int64_t never : p.never)
            if (v == never) return std::nullopt;
    std::string text;
    int32_t kind = 0;
    for (int64_t v : seq) {
        if (v == p.end_token) break;
        text += p.text[static_cast<size_t>(kind)][static_cast<size_t>(v)];
        kind = p.kind_after[static_cast<size_t>(v)];
    }
    return text;
}

// Every way to fill the holes of `seq` (kFree) with tokens of the vocabulary.
void fillings(std::vector<int64_t> seq, size_t at, int64_t V,
              const std::function<void(const std::vector<int64_t>&)>& f) {
    while (at < seq.size() && seq[at] != Completion::kFree) ++at;
    if (at == seq.size()) return f(seq);
    for (int64_t v = 0; v < V; ++v) {
        seq[at] = v;
        fillings(seq, at + 1, V, f);
    }
}

bool in_language(const Dfa& dfa, const Pieces& p, const std::vector<int64_t>& seq) {
    const std::optional<std::string> text = spell(p, seq);
    return text && dfa.matches(*text);
}

TEST(TokenAutomaton, EdgesPartitionTheTokensByWhereTheyLead) {
    auto dfa = std::make_shared<const Dfa>(compile_regex("(ab|b)*c?\\{\"?a*\\}?"));
    TokenAutomaton a(dfa, std::make_shared<const Vocabulary>(small_vocabulary()));
    for (int32_t s = 0; s < a.states(); ++s) {
        const auto& edges = a.edges(s);
        for (int64_t v = 0; v < a.vocab_size(); ++v) {
            const int32_t target = a.next(s, v);
            int holders = 0;
            for (const auto& e : edges)
                if (e.tokens.contains(v)) {
                    ++holders;
                    EXPECT_EQ(e.target, target) << "state " << s << " token " << v;
                }
            EXPECT_EQ(holders, target == TokenAutomaton::kDead ? 0 : 1) << "state " << s << " token " << v;
        }
    }
}

// For random patterns and holed sequences of up to 5 positions: the tokens Completion allows at each hole are
// exactly those some filling of the other holes makes a word of the language, and accept() keeps a set of proposals
// that fits together, refusing only ones that do not fit the kept ones before them.
TEST(Completion, AllowedTokensAreExactlyThoseSomeCompletionAccepts) {
    const std::vector<std::string> patterns = {"a*b",     "(ab|ba)+", "\\{\"a*\"\\}", "a{2,3}c?",
                                               "(a|b)*c", "ba?b?a",   "c|aab"};
    std::mt19937 rng(11);
    for (const Pieces& pieces : {small_vocabulary(), word_vocabulary()}) {
        const std::vector<std::string> word_patterns = {"the cat( \\(sat\\))?\\.?", "(the|cat)( (the|cat))*",
                                                        "\\(cat\\) sat\\."};
        for (const std::string& pattern : pieces.kinds() == 1 ? patterns : word_patterns) {
            SCOPED_TRACE(pattern);
            auto dfa = std::make_shared<const Dfa>(compile_regex(pattern));
            TokenAutomaton automaton(dfa, std::make_shared<const Vocabulary>(pieces));
            Completion completion(automaton);
            const int64_t V = automaton.vocab_size();
            std::uniform_int_distribution<int64_t> token(0, V - 1);
            for (int trial = 0; trial < 40; ++trial) {
                const size_t L = 1 + static_cast<size_t>(trial % 4);
                std::vector<int64_t> seq(L, Completion::kFree);
                for (size_t i = 0; i < L; ++i)
                    if (rng() % 3 == 0) seq[i] = token(rng);
                completion.set(seq);
                bool any = false;
                fillings(seq, 0, V, [&](const std::vector<int64_t>& s) { any = any || in_language(*dfa, pieces, s); });
                ASSERT_EQ(completion.possible(), any);
                if (!any) continue;
                std::vector<uint32_t> bits(token_words(V));
                for (size_t i = 0; i < L; ++i) {
                    if (seq[i] != Completion::kFree) continue;
                    completion.allowed(static_cast<int64_t>(i), bits.data());
                    for (int64_t v = 0; v < V; ++v) {
                        std::vector<int64_t> with = seq;
                        with[i] = v;
                        bool completes = false;
                        fillings(with, 0, V, [&](const std::vector<int64_t>& s) {
                            completes = completes || in_language(*dfa, pieces, s);
                        });
                        EXPECT_EQ(((bits[static_cast<size_t>(v) / 32] >> (v % 32)) & 1u) != 0, completes)
                            << "position " << i << " token " << v;
                    }
                }
            }
        }
    }
}

TEST(Completion, KeptProposalsFitTogether) {
    auto dfa = std::make_shared<const Dfa>(compile_regex("(ab)*"));
    TokenAutomaton automaton(dfa, std::make_shared<const Vocabulary>(small_vocabulary()));
    Completion completion(automaton);
    // Holes at 0..3; proposals: "ab" at 0 fits, "a" at 1 fits alone only if 2 is "b"...
    const std::vector<int64_t> holes(4, Completion::kFree);
    const std::vector<int64_t> rows = {0, 1, 2, 3};
    const int64_t a = 2, b = 3, ab = 4;
    const std::vector<bool> refused = completion.accept(holes, rows, {ab, a, a, b});
    // "ab" then "a": still completable ("ab" "a" "b" ...); then "a" after "ab a": "abaa" cannot be completed, refused;
    // then "b" at 3 after "ab a ?": "ab a ? b" completes with ? = the empty piece or the end token... the automaton
    // decides: the kept ones must spell a prefix of (ab)* with holes between.
    EXPECT_FALSE(refused[0]);
    EXPECT_FALSE(refused[1]);
    EXPECT_TRUE(refused[2]);
    std::vector<int64_t> kept = holes;
    for (size_t k = 0; k < rows.size(); ++k)
        if (!refused[k]) kept[static_cast<size_t>(rows[k])] = std::vector<int64_t>{ab, a, a, b}[k];
    completion.set(kept);
    EXPECT_TRUE(completion.possible());
}

// accept() against brute force: the proposals it keeps fit together (some filling of the other holes completes them),
// and each one it refuses does not fit the ones kept before it (with every hole after it free), while each of those
// was allowed alone.
TEST(Completion, AcceptKeepsExactlyTheProposalsThatFitInOrder) {
    std::mt19937 rng(3);
    const Pieces pieces = small_vocabulary();
    for (const std::string pattern : {"(ab|ba)+", "a*b(ab)*", "\\{\"a*\"\\}c?", "(a|b)*c"}) {
        SCOPED_TRACE(pattern);
        auto dfa = std::make_shared<const Dfa>(compile_regex(pattern));
        TokenAutomaton automaton(dfa, std::make_shared<const Vocabulary>(pieces));
        Completion completion(automaton);
        const int64_t V = automaton.vocab_size();
        const auto completes = [&](const std::vector<int64_t>& seq) {
            bool any = false;
            fillings(seq, 0, V, [&](const std::vector<int64_t>& s) { any = any || in_language(*dfa, pieces, s); });
            return any;
        };
        for (int trial = 0; trial < 60; ++trial) {
            const size_t L = 2 + static_cast<size_t>(trial % 3);
            std::vector<int64_t> holes(L, Completion::kFree);
            if (!completes(holes)) break;
            // Proposals at every hole, each allowed alone.
            std::vector<int64_t> rows, proposed;
            std::vector<uint32_t> bits(token_words(V));
            completion.set(holes);
            for (size_t i = 0; i < L; ++i) {
                completion.allowed(static_cast<int64_t>(i), bits.data());
                std::vector<int64_t> allowed;
                for (int64_t v = 0; v < V; ++v)
                    if ((bits[static_cast<size_t>(v) / 32] >> (v % 32)) & 1u) allowed.push_back(v);
                if (allowed.empty() || rng() % 4 == 0) continue;
                rows.push_back(static_cast<int64_t>(i));
                proposed.push_back(allowed[rng() % allowed.size()]);
            }
            if (rows.empty()) continue;
            const std::vector<bool> refused = completion.accept(holes, rows, proposed);
            std::vector<int64_t> kept = holes;
            for (size_t k = 0; k < rows.size(); ++k) {
                std::vector<int64_t> with = kept;  // the kept ones before it, and it; later holes free
                with[static_cast<size_t>(rows[k])] = proposed[k];
                EXPECT_EQ(refused[k], !completes(with)) << "row " << rows[k] << " token " << proposed[k];
                if (!refused[k]) kept = with;
            }
            EXPECT_FALSE(refused[0]) << "the first proposal, allowed alone, fits";
            EXPECT_TRUE(completes(kept));
            EXPECT_TRUE(completion.possible());
        }
    }
}

TEST(TokenAutomaton, ShortestCountsTokensAndEndTokenEndsTheText) {
    auto dfa = std::make_shared<const Dfa>(compile_regex("aab?"));
    TokenAutomaton automaton(dfa, std::make_shared<const Vocabulary>(small_vocabulary()));
    EXPECT_EQ(automaton.shortest(), 1);                                                         // "aa"
    EXPECT_EQ(automaton.next(automaton.next(automaton.start(), 8), 0), automaton.end_state());  // "aa", then the pad
    EXPECT_EQ(automaton.next(automaton.next(automaton.start(), 2), 0), TokenAutomaton::kDead);  // "a" cannot end
    EXPECT_EQ(automaton.next(automaton.end_state(), 3), automaton.end_state());  // after the pad nothing is read
    EXPECT_EQ(automaton.next(automaton.start(), 1), TokenAutomaton::kDead);      // the mask is never placed
}

// A vocabulary the size of GPT-2's (50,000 tokens): every printable ASCII character, then letter and digit strings
// of 2 to 8 bytes, some after a space, as a byte-level BPE's are. Token 0 ends the text, token 1 is the mask.
Pieces large_vocabulary() {
    Pieces p;
    std::vector<std::string> pieces = {"<pad>", "<mask>"};
    for (char c = ' '; c <= '~'; ++c) pieces.emplace_back(1, c);
    std::set<std::string> seen(pieces.begin(), pieces.end());
    std::mt19937 random(7);
    const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    while (pieces.size() < 50000) {
        std::string piece = random() % 3 == 0 ? " " : "";
        const size_t length = 2 + random() % 7;
        while (piece.size() < length) piece += letters[random() % letters.size()];
        if (seen.insert(piece).second) pieces.push_back(piece);
    }
    p.text = {pieces};
    p.kind_after.assign(pieces.size(), 0);
    p.end_token = 0;
    p.never = {1};
    return p;
}

// Issue 64's schema of 300 bytes: a string of up to 5,000 code points and a number within +-1e300. Its byte automaton
// is small; read token by token over 100 positions it wanted gigabytes (4.65 GB through rudder serve), all allocated
// before any limit saw it.
constexpr const char* kLongStringAndWideNumber =
    R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 5000},
        "n": {"type": "number", "minimum": -1e300, "maximum": 1e300}}})";

TEST(TokenAutomaton, TableOverItsLimitIsRefusedBeforeItIsBuilt) {
    auto dfa = std::make_shared<const Dfa>(compile_json_schema_text(kLongStringAndWideNumber));
    auto vocabulary = std::make_shared<const Vocabulary>(large_vocabulary());
    TokenAutomaton automaton(dfa, vocabulary);
    CompileLimits limits;
    limits.max_table_bytes = uint64_t{64} << 20;
    ASSERT_EQ(automaton.shortest(100, limits), 2);  // "{}"
    try {
        automaton.prepare(100, limits);
        FAIL() << "prepared within 64 MiB: " << automaton.memory_bytes() << " bytes";
    } catch (const LimitError& e) {
        const std::string why = e.what();
        EXPECT_NE(why.find("over 100 positions needs more than 64 MiB (CompileLimits::max_table_bytes)"),
                  std::string::npos)
            << why;
        EXPECT_NE(why.find("50000 tokens"), std::string::npos) << why;
    }
    // The limit held: what was built before the refusal is within it.
    EXPECT_LE(automaton.memory_bytes(), limits.max_table_bytes);
    EXPECT_GT(automaton.memory_bytes(), limits.max_table_bytes / 2);
}

TEST(TokenAutomaton, TableWithinItsLimitIsEveryStateTheRunReads) {
    // A schema of the usual size at 48 positions fits, and what prepare() found is all a completion of the run
    // reads: every position free (the first step) expands no state it did not.
    auto dfa = std::make_shared<const Dfa>(compile_json_schema_text(
        R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]})"));
    TokenAutomaton automaton(dfa, std::make_shared<const Vocabulary>(large_vocabulary()));
    CompileLimits limits;
    limits.max_table_bytes = uint64_t{64} << 20;
    automaton.prepare(48, limits);
    const int32_t expanded = automaton.states_expanded();
    EXPECT_LE(automaton.memory_bytes(), limits.max_table_bytes);
    Completion completion(automaton);
    completion.set(std::vector<int64_t>(48, Completion::kFree));
    ASSERT_TRUE(completion.possible());
    std::vector<uint32_t> bits(token_words(automaton.vocab_size()));
    for (int64_t i = 0; i < 48; ++i) completion.allowed(i, bits.data());
    EXPECT_EQ(automaton.states_expanded(), expanded);
}

TEST(TokenAutomaton, ShortestStopsAtTheRunsPositionsAndAtTheDeadline) {
    auto dfa = std::make_shared<const Dfa>(compile_regex("(ab){30}"));
    TokenAutomaton automaton(dfa, std::make_shared<const Vocabulary>(small_vocabulary()));
    EXPECT_EQ(automaton.shortest(), 30);
    EXPECT_EQ(automaton.shortest(12), 13);  // more than 12
    EXPECT_EQ(automaton.states_expanded(), 0) << "the search keeps no transitions";
    CompileLimits past;
    past.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    EXPECT_THROW(automaton.shortest(100, past), CompileStopped);
    EXPECT_THROW(automaton.prepare(100, past), CompileStopped);
    CompileLimits gone;
    gone.cancelled = [] { return true; };
    try {
        automaton.prepare(100, gone);
        FAIL() << "not cancelled";
    } catch (const CompileStopped& e) {
        EXPECT_TRUE(e.cancelled);
    }
    // No transitions: a word vocabulary that cannot spell the language at all, searched to its end.
    auto braces = std::make_shared<const Dfa>(compile_regex("\\{\\}"));
    TokenAutomaton words(braces, std::make_shared<const Vocabulary>(word_vocabulary()));
    EXPECT_EQ(words.shortest(100), std::nullopt);
}

}  // namespace
}  // namespace rudder::grammar
