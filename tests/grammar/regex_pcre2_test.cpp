// The regex compiler against PCRE2 (outside truth): seeded random patterns from the documented syntax x random
// strings (ASCII, multi-byte, strings drawn from the pattern itself and mutated), requiring Dfa::matches(s) to equal
// PCRE2's full match (PCRE2_ANCHORED | PCRE2_ENDANCHORED, UTF mode, newline LF) on every pair. The counts are printed.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <rudder/grammar/regex.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace rudder::grammar {
namespace {

// Characters the strings and literals are drawn from: ASCII letters, digits, punctuation, whitespace, and code
// points of two, three and four bytes assigned long before Unicode 14 (PCRE2 10.42's tables) and 15 (utf8proc's).
const std::vector<std::string> kPool = {"a",
                                        "b",
                                        "c",
                                        "z",
                                        "A",
                                        "Z",
                                        "0",
                                        "5",
                                        "9",
                                        "_",
                                        "-",
                                        " ",
                                        "\t",
                                        "\n",
                                        "\r",
                                        ".",
                                        "!",
                                        "]",
                                        "}",
                                        "\xC3\xA9",
                                        "\xC3\x89",
                                        "\xC3\x9F",
                                        "\xCE\xA9",
                                        "\xCF\x89",
                                        "\xD1\x8F",
                                        "\xE4\xB8\xAD",
                                        "\xF0\x9F\x98\x80",
                                        "\xD9\xA3",
                                        "\xC2\xA0",
                                        "\xE2\x80\xA8",
                                        "\x0B"};

struct Pattern {
    std::string mine;   // in Rudder's syntax
    std::string pcre2;  // the same in PCRE2's (\u and \v spelled as \x{...})
    std::vector<std::string> samples;
};

class Generator {
public:
    explicit Generator(uint32_t seed) : rng_(seed) {}

    Pattern pattern() {
        Pattern p;
        const bool start = pick(6) == 0, end = pick(6) == 0;
        if (start) add(p, "^");
        alternation(p, 0);
        if (end) add(p, "$");
        return p;
    }

    std::string sample_string() {
        std::string s;
        for (int i = pick(7); i > 0; --i) s += kPool[pick(kPool.size())];
        return s;
    }

    std::string mutate(std::string s) {
        const size_t cut = s.empty() ? 0 : pick(s.size() + 1);
        switch (pick(3)) {
            case 0: return s.substr(0, cut) + kPool[pick(kPool.size())] + s.substr(cut);
            case 1: return s.substr(0, cut) + s.substr(std::min(s.size(), cut + 1));  // may cut a code point: invalid
            default: return s + s.substr(0, cut);
        }
    }

    size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

private:
    static void add(Pattern& p, const std::string& both) {
        p.mine += both;
        p.pcre2 += both;
    }

    void alternation(Pattern& p, int depth) {
        const int options = pick(4) == 0 ? 2 + static_cast<int>(pick(2)) : 1;
        for (int i = 0; i < options; ++i) {
            if (i > 0) add(p, "|");
            concat(p, depth);
        }
    }

    void concat(Pattern& p, int depth) {
        for (int i = static_cast<int>(pick(4)); i > 0; --i) {
            atom(p, depth);
            quantifier(p);
        }
    }

    void quantifier(Pattern& p) {
        static const char* const kQuantifiers[] = {"?", "*", "+", "{2}", "{0,2}", "{1,}", "{1,3}", "{3}"};
        if (pick(3) != 0) return;
        add(p, kQuantifiers[pick(8)]);
        if (pick(5) == 0) add(p, "?");
    }

    void atom(Pattern& p, int depth) {
        switch (depth < 2 ? pick(8) : pick(6)) {
            case 0:
            case 1: literal(p); return;
            case 2: escape(p); return;
            case 3: char_class(p); return;
            case 4: {
                static const char* const kProperties[] = {"\\p{L}",  "\\p{Lu}", "\\p{Ll}", "\\p{N}",
                                                          "\\p{Nd}", "\\P{L}",  "\\p{P}",  "\\p{S}",
                                                          "\\p{Zs}", "\\pL",    "\\PN",    "\\p{L&}"};
                add(p, kProperties[pick(12)]);
                return;
            }
            case 5: add(p, "."); return;
            default:
                add(p, pick(2) == 0 ? "(" : "(?:");
                alternation(p, depth + 1);
                add(p, ")");
                return;
        }
    }

    void literal(Pattern& p) {
        static const std::string kMeta = ".*+?()[]{}|^$\\/-";
        const std::string& c = kPool[pick(kPool.size())];
        if (c == "\n") return add(p, "\\n");
        if (c == "\t") return add(p, "\\t");
        if (c == "\r") return add(p, "\\r");
        if (c == "\x0B") {
            p.mine += "\\v";
            p.pcre2 += "\\x{0B}";
            return;
        }
        if (c.size() == 1 && kMeta.find(c[0]) != std::string::npos) return add(p, "\\" + c);
        add(p, c);
    }

    void escape(Pattern& p) {
        static const char* const kClasses[] = {"\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\x41", "\\x{e9}"};
        if (pick(4) == 0) {
            static const char* const kMine[] = {"\\u00e9", "\\u{4E2D}", "\\u{1F600}"};
            static const char* const kPcre[] = {"\\x{00e9}", "\\x{4E2D}", "\\x{1F600}"};
            const size_t i = pick(3);
            p.mine += kMine[i];
            p.pcre2 += kPcre[i];
            return;
        }
        add(p, kClasses[pick(8)]);
    }

    void char_class(Pattern& p) {
        static const char* const kItems[] = {"a",
                                             "b-d",
                                             "0-9",
                                             "\\d",
                                             "\\s",
                                             "_",
                                             "\\-",
                                             "\xC3\xA9",
                                             "\xC3\xA0-\xC3\xBF",
                                             "\\w",
                                             "\xCE\x91-\xCF\x89",
                                             "\\p{Lu}",
                                             "\\P{L}",
                                             "\\]",
                                             "\\n",
                                             "z"};
        add(p, pick(3) == 0 ? "[^" : "[");
        for (int i = 1 + static_cast<int>(pick(3)); i > 0; --i) add(p, kItems[pick(16)]);
        add(p, "]");
    }

    std::mt19937 rng_;
};

// Strings that match: PCRE2 finds them as substrings of random strings (so they come from both engines' truth
// rather than from the generator's guesses), plus random strings and mutations.
std::vector<std::string> strings_for(Generator& g, int count) {
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
        std::string s = g.sample_string();
        if (i % 3 == 1 && !out.empty()) s = g.mutate(out[g.pick(out.size())]);
        out.push_back(s);
    }
    return out;
}

TEST(RegexAgainstPcre2, RandomPatternsTimesRandomStrings) {
    Generator g(20240601);
    pcre2_compile_context* compile_context = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(compile_context, PCRE2_NEWLINE_LF);
    pcre2_match_context* match_context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(match_context, 1000000);
    CompileLimits limits;
    limits.max_states = 20000;  // a few random patterns of many overlapping Unicode classes need more: not the point
    int patterns = 0, over_limits = 0, pairs = 0, matched = 0, skipped = 0, disagreements = 0;
    for (int i = 0; i < 3000; ++i) {
        const Pattern p = g.pattern();
        int error = 0;
        PCRE2_SIZE error_offset = 0;
        pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.pcre2.data()), p.pcre2.size(), PCRE2_UTF,
                                         &error, &error_offset, compile_context);
        ASSERT_NE(code, nullptr) << "PCRE2 refused " << p.pcre2;
        Dfa dfa;
        try {
            dfa = compile_regex(p.mine, limits);
        } catch (const LimitError& e) {  // a pattern whose automaton exceeds the limits is refused, and counted
            ++over_limits;
            pcre2_code_free(code);
            continue;
        }
        ++patterns;
        pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
        // Strings: random ones, mutations, and the substrings PCRE2 finds in longer random texts (which match).
        std::vector<std::string> strings = strings_for(g, 24);
        for (int k = 0; k < 8; ++k) {
            std::string text = g.sample_string() + g.sample_string() + g.sample_string();
            if (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, match_context) >=
                0) {
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
                strings.push_back(text.substr(ov[0], ov[1] - ov[0]));
            }
        }
        for (const std::string& s : strings) {
            const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                                       PCRE2_ANCHORED | PCRE2_ENDANCHORED, data, match_context);
            if (rc == PCRE2_ERROR_MATCHLIMIT) {
                ++skipped;
                continue;
            }
            // An invalid UTF-8 subject is an error for PCRE2 and no match for the automaton.
            const bool expected = rc >= 0;
            ASSERT_TRUE(rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc <= PCRE2_ERROR_UTF8_ERR1) << rc;
            ++pairs;
            matched += expected ? 1 : 0;
            if (dfa.matches(s) != expected) {
                if (++disagreements <= 20) {
                    ADD_FAILURE() << "pattern /" << p.mine << "/ (PCRE2 /" << p.pcre2 << "/) on \"" << s
                                  << "\": automaton " << !expected << ", PCRE2 " << expected;
                }
            }
        }
        pcre2_match_data_free(data);
        pcre2_code_free(code);
    }
    pcre2_match_context_free(match_context);
    pcre2_compile_context_free(compile_context);
    std::printf(
        "regex vs PCRE2: %d patterns compiled (%d more over 20,000 states), %d pattern x string "
        "pairs (%d matching), %d agreeing, %d disagreeing, %d skipped at PCRE2's match limit\n",
        patterns, over_limits, pairs, matched, pairs - disagreements, disagreements, skipped);
    EXPECT_EQ(disagreements, 0);
    EXPECT_LT(over_limits, patterns / 100);
    EXPECT_GT(matched, pairs / 10);  // the strings exercise both answers
}

}  // namespace
}  // namespace rudder::grammar
