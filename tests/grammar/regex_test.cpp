// The regex compiler: the documented syntax, its refusals with offsets, Unicode, UTF-8 validity and the limits.
#include <rudder/grammar/regex.hpp>

#include <gtest/gtest.h>

#include <string>

namespace rudder::grammar {
namespace {

bool full(const std::string& pattern, const std::string& text) { return compile_regex(pattern).matches(text); }

size_t refusal_offset(const std::string& pattern, const std::string& words) {
    try {
        compile_regex(pattern);
    } catch (const RegexError& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << pattern << ": " << e.what();
        return e.offset;
    }
    ADD_FAILURE() << pattern << " was not refused";
    return std::string::npos;
}

TEST(Regex, LiteralsAlternationGroupsAndQuantifiers) {
    EXPECT_TRUE(full("abc", "abc"));
    EXPECT_FALSE(full("abc", "abcd"));
    EXPECT_FALSE(full("abc", "ab"));
    EXPECT_TRUE(full("", ""));
    EXPECT_FALSE(full("", "a"));
    EXPECT_TRUE(full("ab|cd", "cd"));
    EXPECT_TRUE(full("a(b|c)*d", "abcbcd"));
    EXPECT_TRUE(full("(?:ab)+", "ababab"));
    EXPECT_FALSE(full("(?:ab)+", ""));
    EXPECT_TRUE(full("a{2,3}", "aaa"));
    EXPECT_FALSE(full("a{2,3}", "aaaa"));
    EXPECT_TRUE(full("a{2,}", "aaaaaaa"));
    EXPECT_TRUE(full("a{3}", "aaa"));
    EXPECT_TRUE(full("a??b*?c+?", "abbc"));
    EXPECT_TRUE(full("(?<year>[0-9]{4})-(?P<m>[0-9]{2})", "2024-05"));
    EXPECT_TRUE(full("^abc$", "abc"));
    EXPECT_TRUE(full("^a$|^b$", "b"));
    EXPECT_TRUE(full("a|", ""));
    EXPECT_TRUE(full("a}]", "a}]"));
}

TEST(Regex, EscapesAndClasses) {
    EXPECT_TRUE(full("\\n\\t\\r\\f\\v\\0", std::string("\n\t\r\f\v") + '\0'));
    EXPECT_TRUE(full("\\x41\\x{42}\\u0043\\u{44}", "ABCD"));
    EXPECT_TRUE(full("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/", ".*+?()[]{}|^$\\/"));
    EXPECT_TRUE(full("[a-c_]+", "abc_"));
    EXPECT_FALSE(full("[a-c]", "d"));
    EXPECT_TRUE(full("[^a-c]", "d"));
    EXPECT_FALSE(full("[^a-c]", "b"));
    EXPECT_TRUE(full("[^a]", "\xC3\xA9"));  // é: one code point, two bytes
    EXPECT_TRUE(full("[-a]+", "-a"));
    EXPECT_TRUE(full("[a-]+", "-a"));
    EXPECT_TRUE(full("[\\d\\s]+", "1 2\t"));
    EXPECT_TRUE(full("[\\b]", "\b"));
    EXPECT_TRUE(full("\\d\\w\\s", "7_ "));
    EXPECT_FALSE(full("\\d", "\xD9\xA3"));  // ARABIC-INDIC DIGIT THREE: \d is ASCII
    EXPECT_TRUE(full("\\D", "\xD9\xA3"));
    EXPECT_TRUE(full("\\W\\S", "\xC3\xA9\xC3\xA9"));
    EXPECT_TRUE(full(".", "\xF0\x9F\x98\x80"));  // one code point of four bytes
    EXPECT_FALSE(full(".", "\n"));
    EXPECT_TRUE(full(".", "\r"));
}

TEST(Regex, UnicodeCategories) {
    EXPECT_TRUE(full("\\p{L}+", "h\xC3\xA9ll\xC3\xB6\xE4\xB8\xAD"));  // héllö中
    EXPECT_FALSE(full("\\p{L}", "1"));
    EXPECT_TRUE(full("\\p{Lu}\\p{Ll}", "\xC3\x89t"));  // Ét
    EXPECT_FALSE(full("\\p{Lu}", "t"));
    EXPECT_TRUE(full("\\P{L}", "1"));
    EXPECT_TRUE(full("\\pN\\p{Nd}",
                     "\xD9\xA3"
                     "3"));
    EXPECT_TRUE(full("[\\p{Lu}\\d]+", "A1B2"));
    EXPECT_TRUE(full("\\p{L&}", "a"));
    EXPECT_TRUE(full("\\p{Zs}", " "));
    refusal_offset("a\\p{Greek}", "unknown Unicode property");
}

TEST(Regex, AcceptsOnlyValidUtf8) {
    const Dfa dfa = compile_regex("[^a]*");
    EXPECT_TRUE(dfa.matches("\xE4\xB8\xAD\xF0\x9F\x98\x80"));
    EXPECT_FALSE(dfa.matches("\xFF"));
    EXPECT_FALSE(dfa.matches("\xC0\xAF"));          // overlong '/'
    EXPECT_FALSE(dfa.matches("\xED\xA0\x80"));      // a surrogate
    EXPECT_FALSE(dfa.matches("\xF4\x90\x80\x80"));  // above U+10FFFF
    EXPECT_FALSE(dfa.matches("\xE4\xB8"));          // truncated
    EXPECT_EQ(refusal_offset("ab\xFF", "not valid UTF-8"), 2u);
}

TEST(Regex, RefusesWhatIsNotRegularOrNotSupported) {
    EXPECT_EQ(refusal_offset("(a)\\1", "backreferences are not regular"), 3u);
    EXPECT_EQ(refusal_offset("(?<n>a)\\k<n>", "backreferences are not regular"), 7u);
    EXPECT_EQ(refusal_offset("a(?=b)", "look-around"), 1u);
    EXPECT_EQ(refusal_offset("a(?<!b)", "look-around"), 1u);
    EXPECT_EQ(refusal_offset("(?i)a", "inline flags"), 0u);
    EXPECT_EQ(refusal_offset("a*+", "possessive"), 2u);
    EXPECT_EQ(refusal_offset("a**", "another quantifier"), 2u);
    EXPECT_EQ(refusal_offset("(?>a)", "atomic"), 0u);
    EXPECT_EQ(refusal_offset("a^b", "'^'"), 1u);
    EXPECT_EQ(refusal_offset("a$b", "'$'"), 1u);
    EXPECT_EQ(refusal_offset("(a$)", "'$'"), 2u);
    EXPECT_EQ(refusal_offset("\\bword", "word-boundary"), 0u);
    EXPECT_EQ(refusal_offset("*a", "nothing to repeat"), 0u);
    EXPECT_EQ(refusal_offset("a{", "quantifier"), 1u);
    EXPECT_EQ(refusal_offset("a{3,2}", "below its minimum"), 1u);
    EXPECT_EQ(refusal_offset("(ab", "not closed"), 0u);
    EXPECT_EQ(refusal_offset("ab)", "unmatched"), 2u);
    EXPECT_EQ(refusal_offset("[ab", "not closed"), 0u);
    EXPECT_EQ(refusal_offset("[]a]", "empty class"), 1u);
    EXPECT_EQ(refusal_offset("[z-a]", "before its start"), 1u);
    EXPECT_EQ(refusal_offset("[\\d-z]", "range"), 1u);
    EXPECT_EQ(refusal_offset("[[:alpha:]]", "POSIX"), 1u);
    EXPECT_EQ(refusal_offset("\\q", "unsupported escape"), 0u);
    EXPECT_EQ(refusal_offset("\\x{D800}", "surrogate"), 0u);
    EXPECT_EQ(refusal_offset("a\\", "lone backslash"), 1u);
    EXPECT_EQ(refusal_offset("\\012", "octal"), 0u);
    EXPECT_EQ(refusal_offset(std::string(300, '(') + std::string(300, ')'), "deeper"), 256u);
}

TEST(Regex, LimitsTurnBlowUpIntoAnError) {
    CompileLimits limits;
    limits.max_states = 1000;
    try {
        compile_regex("(a|b)*a(a|b){12}", limits);
        ADD_FAILURE() << "not refused";
    } catch (const LimitError& e) {
        EXPECT_NE(std::string(e.what()).find("the pattern needs more than 1000 states"), std::string::npos) << e.what();
    }
    limits = {};
    limits.max_nfa_states = 5000;
    EXPECT_THROW(compile_regex("(a{100}){100}", limits), LimitError);
    EXPECT_EQ(compile_regex("(a|b)*a(a|b){12}").size(), 1 << 13);  // the textbook 2^(n+1) states, within the default
}

TEST(Regex, SearchDialectDiffers) {
    EXPECT_TRUE(compile_regex(".", {}, RegexDialect::pcre2).matches("\r"));
    EXPECT_FALSE(compile_regex(".", {}, RegexDialect::ecma).matches("\r"));
    EXPECT_FALSE(compile_regex("\\s", {}, RegexDialect::pcre2).matches("\xC2\xA0"));
    EXPECT_TRUE(compile_regex("\\s", {}, RegexDialect::ecma).matches("\xC2\xA0"));
}

}  // namespace
}  // namespace rudder::grammar
