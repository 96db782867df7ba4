// The Jinja subset's parser: recursive descent with Jinja2's precedence (or < and < not < comparisons < + - < ~ <
// * / // % < ** < unary - < filters, tests, attributes, calls), nesting bounded by kJinjaMaxBlockNesting and
// kJinjaMaxExpressionDepth.
#pragma once

#include "ast.hpp"

#include <string>

namespace rudder::jinja {

// The tree of `source`; JinjaError with the line of the first problem (any other failure inside becomes one too).
NodePtr parse(const std::string& source);

}  // namespace rudder::jinja
