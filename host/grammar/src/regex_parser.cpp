#include "regex_parser.hpp"

#include <rudder/grammar/regex.hpp>

#include <cctype>
#include <optional>
#include <string>

namespace rudder::grammar {

RegexError::RegexError(size_t at, const std::string& why)
    : std::runtime_error(why + " (at byte " + std::to_string(at) + ")"), offset(at) {}

namespace {

constexpr int kMaxRepeat = 65535;    // PCRE2's largest repetition count
constexpr int kMaxGroupDepth = 256;  // keeps the recursive descent's stack small

CodePointSet digit_set() { return CodePointSet::range('0', '9'); }

CodePointSet word_set() {
    CodePointSet set = CodePointSet::range('a', 'z');
    set.add('A', 'Z');
    set.add('0', '9');
    set.add('_', '_');
    return set;
}

CodePointSet space_set(RegexDialect dialect) {
    CodePointSet set = CodePointSet::range('\t', '\r');
    set.add(' ', ' ');
    if (dialect == RegexDialect::ecma) {  // ECMAScript's WhiteSpace and LineTerminator
        for (uint32_t cp : {0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) set.add(cp, cp);
        set.add(0x2000, 0x200A);
    }
    return set;
}

CodePointSet dot_set(RegexDialect dialect) {
    CodePointSet excluded = CodePointSet::single('\n');
    if (dialect == RegexDialect::ecma) {
        excluded.add('\r', '\r');
        excluded.add(0x2028, 0x2029);
    }
    return excluded.complement();
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

struct Branch {
    LangPtr lang;
    bool anchored_start = false;
    bool anchored_end = false;
};

class Parser {
public:
    Parser(std::string_view pattern, RegexDialect dialect) : text_(pattern), dialect_(dialect) {
        for (size_t i = 0; i < text_.size();) {
            if (!decode_utf8(text_, i)) throw RegexError(i, "the pattern is not valid UTF-8");
        }
    }

    std::vector<Branch> parse_top() {
        std::vector<Branch> branches;
        while (true) {
            Branch branch;
            if (peek('^')) {
                ++pos_;
                branch.anchored_start = true;
            }
            branch.lang = parse_concat(true, &branch.anchored_end);
            branches.push_back(branch);
            if (at_end()) break;
            if (peek(')')) throw RegexError(pos_, "unmatched ')'");
            ++pos_;  // '|'
        }
        return branches;
    }

private:
    bool at_end() const { return pos_ >= text_.size(); }
    bool peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
    bool peek_at(size_t offset, char c) const { return pos_ + offset < text_.size() && text_[pos_ + offset] == c; }

    uint32_t take_code_point() {
        size_t at = pos_;
        const auto cp = decode_utf8(text_, at);
        pos_ = at;
        return *cp;  // the constructor checked the encoding
    }

    LangPtr parse_alternation() {
        std::vector<LangPtr> options;
        while (true) {
            options.push_back(parse_concat(false, nullptr));
            if (!peek('|')) break;
            ++pos_;
        }
        return options.size() == 1 ? options[0] : choice(std::move(options));
    }

    // A concatenation up to '|', ')' or the end. At the top level `end_anchor` receives a final '$'.
    LangPtr parse_concat(bool top, bool* end_anchor) {
        std::vector<LangPtr> parts;
        while (!at_end() && !peek('|') && !peek(')')) {
            if (peek('$')) {
                const bool last = pos_ + 1 == text_.size() || peek_at(1, '|');
                if (!top || !last) {
                    throw RegexError(pos_,
                                     "'$' is supported only at the end of the pattern or of a top-level "
                                     "alternative (write \\$ for a dollar sign)");
                }
                ++pos_;
                *end_anchor = true;
                break;
            }
            if (peek('^')) {
                throw RegexError(pos_,
                                 "'^' is supported only at the start of the pattern or of a top-level "
                                 "alternative (write \\^ for a caret)");
            }
            parts.push_back(parse_quantifiers(parse_atom()));
        }
        return sequence(std::move(parts));
    }

    LangPtr parse_quantifiers(LangPtr atom) {
        bool quantified = false;
        while (!at_end()) {
            const size_t at = pos_;
            int min = 0, max = 0;
            if (peek('*')) {
                min = 0, max = -1, ++pos_;
            } else if (peek('+')) {
                min = 1, max = -1, ++pos_;
            } else if (peek('?')) {
                min = 0, max = 1, ++pos_;
            } else if (peek('{')) {
                parse_braces(min, max);
            } else {
                break;
            }
            if (quantified) throw RegexError(at, "a quantifier cannot follow another quantifier; use a group");
            quantified = true;
            if (peek('+')) throw RegexError(pos_, "possessive quantifiers are not supported");
            if (peek('?')) ++pos_;  // lazy: the same language
            atom = repeat(std::move(atom), min, max);
        }
        return atom;
    }

    void parse_braces(int& min, int& max) {
        const size_t at = pos_++;
        auto number = [&]() -> std::optional<int> {
            if (at_end() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) return std::nullopt;
            long value = 0;
            while (!at_end() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
                value = value * 10 + (text_[pos_++] - '0');
                if (value > kMaxRepeat) throw RegexError(at, "a repetition count is over 65535");
            }
            return static_cast<int>(value);
        };
        const auto lo = number();
        if (!lo) throw RegexError(at, "'{' does not start a quantifier {m}, {m,} or {m,n} (write \\{ for a brace)");
        min = max = *lo;
        if (peek(',')) {
            ++pos_;
            const auto hi = number();
            max = hi ? *hi : -1;
        }
        if (!peek('}'))
            throw RegexError(at, "'{' does not start a quantifier {m}, {m,} or {m,n} (write \\{ for a brace)");
        ++pos_;
        if (max >= 0 && max < min) throw RegexError(at, "a quantifier's maximum is below its minimum");
    }

    LangPtr parse_atom() {
        const size_t at = pos_;
        const char c = text_[pos_];
        switch (c) {
            case '(': return parse_group();
            case '[': return code_points(parse_class());
            case '.': ++pos_; return code_points(dot_set(dialect_));
            case '\\': return code_points(parse_escape(false));
            case '*':
            case '+':
            case '?': throw RegexError(at, std::string("nothing to repeat before '") + c + "'");
            case '{': throw RegexError(at, "nothing to repeat before '{' (write \\{ for a brace)");
            default: return code_points(CodePointSet::single(take_code_point()));
        }
    }

    LangPtr parse_group() {
        const size_t at = pos_++;
        if (peek('?')) parse_group_prefix(at);
        if (++depth_ > kMaxGroupDepth) throw RegexError(at, "groups nest deeper than 256");
        LangPtr inner = parse_alternation();
        --depth_;
        if (!peek(')')) throw RegexError(at, "'(' is not closed");
        ++pos_;
        return inner;
    }

    // What may follow "(?": a non-capturing or a named group; everything else is refused by name.
    void parse_group_prefix(size_t at) {
        ++pos_;
        auto starts = [&](std::string_view s) { return text_.substr(pos_, s.size()) == s; };
        if (starts(":")) {
            ++pos_;
            return;
        }
        if (starts("=") || starts("!") || starts("<=") || starts("<!")) {
            throw RegexError(at, "look-around assertions are not supported (they are not compiled to an automaton)");
        }
        if (starts("P=")) throw RegexError(at, "backreferences are not regular: (?P=name) is not supported");
        if (starts("P>") || starts("&") || starts("R") || starts("+") ||
            (!at_end() && std::isdigit(static_cast<unsigned char>(text_[pos_])))) {
            throw RegexError(at, "recursion and subroutine calls are not supported");
        }
        if (starts("<") || starts("P<") || starts("'")) {
            const char close = starts("'") ? '\'' : '>';
            pos_ += starts("P<") ? 2 : 1;
            const size_t name_at = pos_;
            while (!at_end() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
            if (pos_ == name_at || std::isdigit(static_cast<unsigned char>(text_[name_at])) || !peek(close)) {
                throw RegexError(at, "a group name must be letters, digits and _, not starting with a digit");
            }
            ++pos_;
            return;
        }
        if (starts(">")) throw RegexError(at, "atomic groups are not supported");
        if (starts("#")) throw RegexError(at, "comments (?#...) are not supported");
        if (starts("|")) throw RegexError(at, "branch-reset groups are not supported");
        throw RegexError(
            at, "inline flags and other (?...) constructs are not supported; only (?:...) and named groups are");
    }

    CodePointSet parse_class() {
        const size_t at = pos_++;
        bool negated = false;
        if (peek('^')) {
            negated = true;
            ++pos_;
        }
        if (peek(']')) throw RegexError(pos_, "an empty class matches nothing; write \\] for a closing bracket");
        CodePointSet set;
        while (!peek(']')) {
            if (at_end()) throw RegexError(at, "'[' is not closed");
            const size_t item_at = pos_;
            bool is_class = false;
            const CodePointSet item = parse_class_item(is_class);
            if (peek('-') && !peek_at(1, ']') && pos_ + 1 < text_.size()) {
                ++pos_;
                bool end_is_class = false;
                const CodePointSet end = parse_class_item(end_is_class);
                if (is_class || end_is_class)
                    throw RegexError(item_at, "a range cannot start or end at a class such as \\d");
                const uint32_t lo = item.ranges()[0].first, hi = end.ranges()[0].first;
                if (lo > hi) throw RegexError(item_at, "a range's end is before its start");
                set.add(lo, hi);
            } else {
                set.add(item);
            }
        }
        ++pos_;
        return negated ? set.complement() : set;
    }

    CodePointSet parse_class_item(bool& is_class) {
        if (peek('['))
            throw RegexError(pos_, "'[' inside a class must be escaped as \\[ (POSIX classes are not supported)");
        if (peek('\\')) {
            if (peek_at(1, 'b')) {  // a backspace inside a class
                pos_ += 2;
                return CodePointSet::single('\b');
            }
            const char letter = pos_ + 1 < text_.size() ? text_[pos_ + 1] : 0;
            is_class = std::string_view("dDwWsSpP").find(letter) != std::string_view::npos && letter != 0;
            CodePointSet set = parse_escape(true);
            return set;
        }
        return CodePointSet::single(take_code_point());
    }

    CodePointSet parse_escape(bool in_class);
    CodePointSet parse_property(size_t at, bool negated);
    uint32_t parse_hex(size_t at, size_t digits, bool braces_allowed);

    std::string_view text_;
    RegexDialect dialect_;
    size_t pos_ = 0;
    int depth_ = 0;
};

uint32_t Parser::parse_hex(size_t at, size_t digits, bool braces_allowed) {
    uint64_t value = 0;
    if (braces_allowed && peek('{')) {
        ++pos_;
        size_t count = 0;
        while (!at_end() && hex_value(text_[pos_]) >= 0) {
            value = value * 16 + static_cast<uint64_t>(hex_value(text_[pos_++]));
            if (value > kMaxCodePoint) throw RegexError(at, "a code point is above U+10FFFF");
            ++count;
        }
        if (count == 0 || !peek('}')) throw RegexError(at, "expected hexadecimal digits and '}'");
        ++pos_;
    } else {
        for (size_t i = 0; i < digits; ++i) {
            if (at_end() || hex_value(text_[pos_]) < 0) {
                throw RegexError(at, "expected " + std::to_string(digits) + " hexadecimal digits");
            }
            value = value * 16 + static_cast<uint64_t>(hex_value(text_[pos_++]));
        }
    }
    if (value >= 0xD800 && value <= 0xDFFF) throw RegexError(at, "a surrogate code point cannot be matched in UTF-8");
    return static_cast<uint32_t>(value);
}

CodePointSet Parser::parse_property(size_t at, bool negated) {
    std::string name;
    if (peek('{')) {
        ++pos_;
        while (!at_end() && !peek('}')) name += text_[pos_++];
        if (!peek('}')) throw RegexError(at, "\\p{ is not closed");
        ++pos_;
    } else if (!at_end()) {
        name = std::string(1, text_[pos_++]);
    }
    if (!name.empty() && name[0] == '^') {
        negated = !negated;
        name.erase(0, 1);
    }
    const auto set = general_category(name);
    if (!set) {
        throw RegexError(at, "unknown Unicode property '" + name +
                                 "': only general categories (L, Lu, Ll, Lt, Lm, Lo, L&, M, N, Nd, P, S, Z, C, ...) "
                                 "are supported");
    }
    return negated ? set->complement() : *set;
}

CodePointSet Parser::parse_escape(bool in_class) {
    const size_t at = pos_++;
    if (at_end()) throw RegexError(at, "the pattern ends with a lone backslash");
    const char c = text_[pos_];
    if (static_cast<unsigned char>(c) >= 0x80) return CodePointSet::single(take_code_point());
    ++pos_;
    switch (c) {
        case 'd': return digit_set();
        case 'D': return digit_set().complement();
        case 'w': return word_set();
        case 'W': return word_set().complement();
        case 's': return space_set(dialect_);
        case 'S': return space_set(dialect_).complement();
        case 'p': return parse_property(at, false);
        case 'P': return parse_property(at, true);
        case 'n': return CodePointSet::single('\n');
        case 't': return CodePointSet::single('\t');
        case 'r': return CodePointSet::single('\r');
        case 'f': return CodePointSet::single('\f');
        case 'v': return CodePointSet::single('\v');
        case '0':
            if (!at_end() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
                throw RegexError(at, "octal escapes are not supported; write \\xHH");
            }
            return CodePointSet::single(0);
        case 'x': return CodePointSet::single(parse_hex(at, 2, true));
        case 'u': return CodePointSet::single(parse_hex(at, 4, true));
        case 'b':
        case 'B': throw RegexError(at, "word-boundary assertions are not supported");
        case 'A':
        case 'z':
        case 'Z':
        case 'G': throw RegexError(at, "anchors other than ^ at the start and $ at the end are not supported");
        case 'k':
        case 'g': throw RegexError(at, "backreferences are not regular: \\" + std::string(1, c) + " is not supported");
        default: break;
    }
    if (c >= '1' && c <= '9') {
        throw RegexError(at, "backreferences are not regular: \\" + std::string(1, c) + " is not supported");
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
        throw RegexError(at, std::string("unsupported escape \\") + c + (in_class ? " in a class" : ""));
    }
    return CodePointSet::single(
        static_cast<uint8_t>(c));  // an escaped punctuation character or space stands for itself
}

LangPtr any_text() { return repeat(code_points(CodePointSet::all()), 0, -1); }

}  // namespace

LangPtr parse_regex(std::string_view pattern, RegexDialect dialect) {
    std::vector<LangPtr> options;
    for (auto& branch : Parser(pattern, dialect).parse_top()) options.push_back(branch.lang);
    return options.size() == 1 ? options[0] : choice(std::move(options));
}

LangPtr parse_regex_search(std::string_view pattern, RegexDialect dialect) {
    std::vector<LangPtr> options;
    for (auto& branch : Parser(pattern, dialect).parse_top()) {
        std::vector<LangPtr> parts;
        if (!branch.anchored_start) parts.push_back(any_text());
        parts.push_back(branch.lang);
        if (!branch.anchored_end) parts.push_back(any_text());
        options.push_back(sequence(std::move(parts)));
    }
    return options.size() == 1 ? options[0] : choice(std::move(options));
}

Dfa compile_regex(std::string_view pattern, const CompileLimits& limits, RegexDialect dialect) {
    return build_dfa(parse_regex(pattern, dialect), limits, "the pattern");
}

}  // namespace rudder::grammar
