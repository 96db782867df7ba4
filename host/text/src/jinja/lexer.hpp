// The Jinja subset's scanner (rudder/text/jinja.hpp): the source split into text and the tokens of its tags, with
// trim_blocks, lstrip_blocks and the '-' and '+' markers applied. And `fail`, the error of every part of the library.
#pragma once

#include <string>
#include <vector>

namespace rudder::jinja {

// A JinjaError "chat template line N: what".
[[noreturn]] void fail(int line, const std::string& what);

enum class TokenType { text, expr_begin, stmt_begin, end, name, string, integer, number, op };

struct Token {
    TokenType type;
    std::string text;
    int line = 1;
};

// The tokens of a template's source (its one trailing newline dropped, as Jinja2's keep_trailing_newline off).
std::vector<Token> scan(std::string source);

}  // namespace rudder::jinja
