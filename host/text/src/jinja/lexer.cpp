#include "lexer.hpp"

#include <rudder/text/jinja.hpp>
#include <rudder/text/utf8.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace rudder::jinja {

void fail(int line, const std::string& what) {
    throw JinjaError("chat template line " + std::to_string(line) + ": " + what);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Scanner {
public:
    explicit Scanner(std::string source) : s_(std::move(source)) {
        if (!s_.empty() && s_.back() == '\n') s_.pop_back();  // keep_trailing_newline off, as Jinja2's default
    }

    std::vector<Token> scan() {
        bool strip_next_text = false;  // after a '-' closing marker
        while (pos_ < s_.size()) {
            const size_t open = next_open(pos_);
            std::string text = s_.substr(pos_, open - pos_);
            if (strip_next_text) {
                text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\f\v")));
                strip_next_text = false;
            }
            if (open == s_.size()) {
                push_text(std::move(text));
                break;
            }
            const char kind = s_[open + 1];  // '{', '%' or '#'
            size_t after = open + 2;
            const char marker = after < s_.size() ? s_[after] : '\0';
            if (marker == '-') {
                text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
                ++after;
            } else if (kind != '{' && marker != '+') {
                lstrip_block(text, open);
            } else if (marker == '+') {
                ++after;
            }
            push_text(std::move(text));
            line_ = line_at(open);
            if (kind == '#') {
                const size_t close = s_.find("#}", after);
                if (close == std::string::npos) fail(line_, "a comment '{#' without its '#}'");
                const bool strip = close > after && s_[close - 1] == '-';
                pos_ = close + 2;
                if (strip)
                    strip_next_text = true;
                else
                    trim_block();
                continue;
            }
            tokens_.push_back({kind == '{' ? TokenType::expr_begin : TokenType::stmt_begin, "", line_});
            pos_ = after;
            bool strip = false;
            scan_tag(kind == '{' ? '}' : '%', strip);
            if (strip)
                strip_next_text = true;
            else if (kind == '%')
                trim_block();
        }
        return std::move(tokens_);
    }

private:
    size_t next_open(size_t from) const {
        for (size_t p = s_.find('{', from); p != std::string::npos; p = s_.find('{', p + 1))
            if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
        return s_.size();
    }

    int line_at(size_t p) {
        while (counted_ < p) {
            if (s_[counted_] == '\n') ++counted_line_;
            ++counted_;
        }
        return counted_line_;
    }

    // lstrip_blocks: spaces and tabs from the start of the line to a block or comment tag.
    void lstrip_block(std::string& text, size_t open) const {
        size_t p = open;
        while (p > 0 && (s_[p - 1] == ' ' || s_[p - 1] == '\t')) --p;
        if (p != 0 && s_[p - 1] != '\n') return;
        const size_t n = std::min(open - p, text.size());
        text.erase(text.size() - n);
    }

    // trim_blocks: the first newline after a block or comment tag.
    void trim_block() {
        if (pos_ < s_.size() && s_[pos_] == '\n')
            ++pos_;
        else if (pos_ + 1 < s_.size() && s_[pos_] == '\r' && s_[pos_ + 1] == '\n')
            pos_ += 2;
    }

    void push_text(std::string text) {
        if (!text.empty()) tokens_.push_back({TokenType::text, std::move(text), line_});
    }

    // The tokens of a tag up to its closing "}}" or "%}" (with `strip` for a '-' before it).
    void scan_tag(char closer, bool& strip) {
        int depth = 0;  // of '{' inside the tag (a dict literal)
        for (;;) {
            while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
            if (pos_ >= s_.size()) fail(line_, std::string("a tag without its closing '") + closer + "}'");
            const int line = line_at(pos_);
            const char c = s_[pos_];
            if (depth == 0) {
                if (c == '-' && pos_ + 2 < s_.size() && s_[pos_ + 1] == closer && s_[pos_ + 2] == '}') {
                    strip = true;
                    pos_ += 3;
                    tokens_.push_back({TokenType::end, "", line});
                    return;
                }
                if (c == '+' && closer == '%' && pos_ + 2 < s_.size() && s_[pos_ + 1] == '%' && s_[pos_ + 2] == '}') {
                    pos_ += 3;  // "+%}": the newline after the tag is kept
                    tokens_.push_back({TokenType::end, "", line});
                    return;
                }
                if (c == closer && pos_ + 1 < s_.size() && s_[pos_ + 1] == '}') {
                    pos_ += 2;
                    tokens_.push_back({TokenType::end, "", line});
                    return;
                }
            }
            if (is_name_start(c)) {
                size_t e = pos_;
                while (e < s_.size() && (is_name_start(s_[e]) || is_digit(s_[e]))) ++e;
                tokens_.push_back({TokenType::name, s_.substr(pos_, e - pos_), line});
                pos_ = e;
            } else if (is_digit(c)) {
                size_t e = pos_;
                while (e < s_.size() && (is_digit(s_[e]) || s_[e] == '_')) ++e;
                bool real = false;
                if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
                    real = true;
                    ++e;
                    while (e < s_.size() && is_digit(s_[e])) ++e;
                }
                std::string digits = s_.substr(pos_, e - pos_);
                digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
                tokens_.push_back({real ? TokenType::number : TokenType::integer, digits, line});
                pos_ = e;
            } else if (c == '\'' || c == '"') {
                tokens_.push_back({TokenType::string, string_literal(c), line});
            } else {
                static const char* const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                                  ">",  "|",  ".",  ",",  ":",  "(",  ")", "[", "]", "{", "}", "="};
                const char* found = nullptr;
                for (const char* op : ops)
                    if (s_.compare(pos_, std::char_traits<char>::length(op), op) == 0) {
                        found = op;
                        break;
                    }
                if (found == nullptr) fail(line, std::string("unexpected character '") + c + "'");
                const std::string op = found;
                if (op == "{") ++depth;
                if (op == "}") --depth;
                tokens_.push_back({TokenType::op, op, line});
                pos_ += op.size();
            }
        }
    }

    // A quoted string with Python's escapes: \n \t \r \b \f \0, \\ \' \", and \u with four hex digits.
    std::string string_literal(char quote) {
        const int line = line_at(pos_);
        std::string out;
        ++pos_;
        while (pos_ < s_.size() && s_[pos_] != quote) {
            char c = s_[pos_++];
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= s_.size()) break;
            c = s_[pos_++];
            switch (c) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case '0': out += '\0'; break;
                case 'u': {
                    uint32_t cp = 0;
                    for (int k = 0; k < 4; ++k, ++pos_) {  // by hand: std::stoul takes "+1" or " 1f" and throws its own
                        const char h = pos_ < s_.size() ? s_[pos_] : '\0';
                        const int v = is_digit(h)              ? h - '0'
                                      : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                      : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                               : -1;
                        if (v < 0) fail(line, "a \\u escape without 4 hex digits");
                        cp = cp * 16 + static_cast<uint32_t>(v);
                    }
                    utf8::append(out, cp);
                    break;
                }
                case '\n': break;
                default: out += c;  // \\ \' \" and unknown escapes keep the character
            }
        }
        if (pos_ >= s_.size()) fail(line, "a string without its closing quote");
        ++pos_;
        return out;
    }

    std::string s_;
    size_t pos_ = 0;
    int line_ = 1;
    size_t counted_ = 0;
    int counted_line_ = 1;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> scan(std::string source) { return Scanner(std::move(source)).scan(); }

}  // namespace rudder::jinja
