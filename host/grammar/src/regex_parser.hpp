// The regular-expression parser: a pattern to a Lang (docs/structured-output.md, "Regular expressions").
#pragma once

#include "lang.hpp"

#include <rudder/grammar/regex.hpp>

#include <string_view>

namespace rudder::grammar {

// The texts that match `pattern` as a whole. Throws RegexError.
LangPtr parse_regex(std::string_view pattern, RegexDialect dialect);
// The texts in which `pattern` matches somewhere (a search, as JSON Schema's `pattern`): each top-level alternative
// not anchored by ^ may be preceded, and one not anchored by $ followed, by any text. Throws RegexError.
LangPtr parse_regex_search(std::string_view pattern, RegexDialect dialect);

}  // namespace rudder::grammar
