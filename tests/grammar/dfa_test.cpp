// The automaton's contract: minimal, trimmed (live states, kDead), byte classes that are exact, memory reported.
#include <rudder/grammar/regex.hpp>

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace rudder::grammar {
namespace {

const char* const kPatterns[] = {"[a-z]+(-[a-z]+)*",       "(ab|a)*c?",  "\\p{Lu}\\p{Ll}*",
                                 "[0-9]{2,4}|x",           "",           "(a|b)*a(a|b){3}",
                                 "\"([^\"\\\\]|\\\\.)*\"", "[^\\n]{0,5}"};

TEST(Dfa, ByteClassesAreExact) {
    for (const char* pattern : kPatterns) {
        const Dfa dfa = compile_regex(pattern);
        for (int a = 0; a < 256; ++a) {
            for (int b = a + 1; b < 256; ++b) {
                if (dfa.class_of(static_cast<uint8_t>(a)) != dfa.class_of(static_cast<uint8_t>(b))) continue;
                for (int32_t s = 0; s < dfa.size(); ++s) {
                    ASSERT_EQ(dfa.next(s, static_cast<uint8_t>(a)), dfa.next(s, static_cast<uint8_t>(b))) << pattern;
                }
            }
        }
        // and as coarse as they can be: two classes differ somewhere
        for (int c = 0; c < dfa.classes(); ++c) {
            for (int d = c + 1; d < dfa.classes(); ++d) {
                bool differ = false;
                for (int32_t s = 0; s < dfa.size() && !differ; ++s)
                    differ = dfa.next_by_class(s, c) != dfa.next_by_class(s, d);
                EXPECT_TRUE(differ) << pattern << ": classes " << c << " and " << d;
            }
        }
    }
}

// Minimality: Moore's refinement on the trimmed automaton (kDead as one more state) separates every pair of states.
TEST(Dfa, IsMinimalAndTrimmed) {
    for (const char* pattern : kPatterns) {
        const Dfa dfa = compile_regex(pattern);
        const int32_t n = dfa.size();
        std::vector<int> block(static_cast<size_t>(n) + 1);
        for (int32_t s = 0; s < n; ++s) block[static_cast<size_t>(s)] = dfa.accepting(s) ? 1 : 0;
        block[static_cast<size_t>(n)] = 2;
        for (bool changed = true; changed;) {
            std::map<std::vector<int>, int> ids;
            std::vector<int> next(block.size());
            for (int32_t s = 0; s <= n; ++s) {
                std::vector<int> signature = {block[static_cast<size_t>(s)]};
                for (int c = 0; c < dfa.classes(); ++c) {
                    const int32_t t = s == n ? Dfa::kDead : dfa.next_by_class(s, c);
                    signature.push_back(block[static_cast<size_t>(t == Dfa::kDead ? n : t)]);
                }
                next[static_cast<size_t>(s)] = ids.emplace(signature, static_cast<int>(ids.size())).first->second;
            }
            changed =
                std::set<int>(next.begin(), next.end()).size() != std::set<int>(block.begin(), block.end()).size();
            block = next;
        }
        EXPECT_EQ(std::set<int>(block.begin(), block.end()).size(), static_cast<size_t>(n) + 1) << pattern;
        for (int32_t s = 0; s < n; ++s) EXPECT_TRUE(dfa.live(s)) << pattern;
        EXPECT_FALSE(dfa.live(Dfa::kDead));
        EXPECT_GT(dfa.memory_bytes(), static_cast<size_t>(n) * static_cast<size_t>(dfa.classes()) * 4);
    }
}

TEST(Dfa, EmptyLanguageHasOneDeadStart) {
    const Dfa dfa = compile_regex("[^\\s\\S]");
    EXPECT_EQ(dfa.size(), 1);
    EXPECT_TRUE(dfa.empty());
    EXPECT_FALSE(dfa.live(dfa.start()));
    EXPECT_EQ(dfa.next(dfa.start(), 'a'), Dfa::kDead);
    EXPECT_FALSE(dfa.matches(""));
}

TEST(Dfa, StepsAgreeWithMatches) {
    const Dfa dfa = compile_regex("[a-z]+(-[a-z]+)*");
    int32_t s = dfa.start();
    for (char c : std::string("well-formed")) s = dfa.next(s, static_cast<uint8_t>(c));
    EXPECT_TRUE(dfa.accepting(s));
    EXPECT_EQ(dfa.next(dfa.next(dfa.start(), '-'), 'a'), Dfa::kDead);
    EXPECT_EQ(dfa.size(), 2);  // the start and "after -" both need a letter next: one state
}

TEST(Dfa, ShortestFromIsTheShortestThenSmallestCompletion) {
    const Dfa dfa = compile_regex("(abc|b{2,}|zz)x?");
    EXPECT_EQ(dfa.shortest_from(dfa.start()), std::optional<std::string>("bb"));  // "bb" and "zz": the smaller bytes
    const int32_t after_a = dfa.next(dfa.start(), 'a');
    EXPECT_EQ(dfa.shortest_from(after_a), std::optional<std::string>("bc"));
    EXPECT_EQ(dfa.shortest_from(dfa.next(after_a, 'x')), std::nullopt);  // dead
    const int32_t accepted = dfa.next(dfa.next(dfa.start(), 'z'), 'z');
    EXPECT_EQ(dfa.shortest_from(accepted), std::optional<std::string>(""));
    EXPECT_EQ(compile_regex("a").shortest_from(Dfa::kDead), std::nullopt);
    EXPECT_EQ(Dfa().shortest_from(Dfa().start()), std::nullopt);  // the empty language
}

}  // namespace
}  // namespace rudder::grammar
