// Regular expressions compiled to a minimal byte automaton that accepts a text exactly when the whole text matches
// the pattern (full match, as PCRE2_ANCHORED | PCRE2_ENDANCHORED). The syntax is documented in
// docs/structured-output.md; anything outside it is refused with the byte offset where it starts.
#pragma once

#include <rudder/grammar/dfa.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rudder::grammar {

// A pattern outside the supported syntax; what() says why ("backreferences are not regular: ...") and ends with
// " (at byte N)"; `offset` is N, the byte offset in the pattern.
struct RegexError : std::runtime_error {
    RegexError(size_t offset, const std::string& why);
    size_t offset;
};

// Where the meanings of a few constructs come from. Both are the same syntax; they differ only where PCRE2 (without
// PCRE2_UCP) and ECMAScript (JSON Schema's `pattern`) differ:
//   pcre2  `.` is any code point but \n; `\s` is [\t\n\v\f\r ] (ASCII).
//   ecma   `.` is any code point but \n, \r, U+2028, U+2029; `\s` is ECMAScript's White_Space and line terminators.
// In both `\d` is [0-9] and `\w` is [A-Za-z0-9_], and `\v` is U+000B (not PCRE2's vertical-space class).
enum class RegexDialect { pcre2, ecma };

// The automaton of the texts that `pattern` matches as a whole. Throws RegexError for a pattern outside the syntax
// (invalid UTF-8 included) and LimitError when the automaton would exceed `limits`.
Dfa compile_regex(std::string_view pattern, const CompileLimits& limits = {},
                  RegexDialect dialect = RegexDialect::pcre2);

}  // namespace rudder::grammar
