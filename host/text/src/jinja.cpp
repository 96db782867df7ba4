// A Jinja2 subset for chat templates (rudder/text/jinja.hpp): a scanner that splits the source into text and tags
// (applying trim_blocks, lstrip_blocks and the '-' markers), a recursive-descent parser with Jinja2's precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary - < filters, tests, attributes, calls), and a tree
// walker whose values are JSON (ordered objects) plus "undefined" and callables.
#include <rudder/text/jinja.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace rudder {

using Data = nlohmann::ordered_json;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Scanning

enum class TokenType { text, expr_begin, stmt_begin, end, name, string, integer, number, op };

struct Token {
    TokenType type;
    std::string text;
    int line = 1;
};

[[noreturn]] void fail(int line, const std::string& what) {
    throw JinjaError("chat template line " + std::to_string(line) + ": " + what);
}

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
                    if (cp < 0x80) {
                        out += static_cast<char>(cp);
                    } else if (cp < 0x800) {
                        out += static_cast<char>(0xC0 | (cp >> 6));
                        out += static_cast<char>(0x80 | (cp & 0x3F));
                    } else {
                        out += static_cast<char>(0xE0 | (cp >> 12));
                        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                        out += static_cast<char>(0x80 | (cp & 0x3F));
                    }
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

// ---------------------------------------------------------------------------------------------------------------
// The tree

struct JinjaTemplate::Node {
    enum class Kind {
        // statements
        sequence,
        text,
        emit,
        if_,
        for_,
        set,
        set_block,
        macro,
        break_,
        continue_,
        // expressions
        literal,
        name,
        attribute,
        item,
        slice,
        call,
        filter,
        test,
        unary,
        binary,
        ternary,
        list,
        dict,
        tuple
    };
    Kind kind;
    int line = 1;
    std::string text;                               // name, operator, filter/test/attribute name, literal text
    Data literal;                                   // literal
    std::vector<std::shared_ptr<const Node>> kids;  // operands, statements, arguments
    std::vector<std::string> names;                 // keyword names per argument ("" positional); loop targets
    bool negated = false;                           // `is not`
    int height = 1;                                 // of the subtree: the renderer recurses this deep through it
};

namespace {

using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<const Node>;
using Kind = Node::Kind;

// A node whose kids are all in place: its height is set, and an expression deeper than the limit refused while the
// tree is still shallow (a chain `1+1+...+1` or `x|f|f|...` is parsed by a loop, but rendering it, and destroying
// it, recurses once per link).
NodePtr sealed(std::shared_ptr<Node> n) {
    for (const auto& kid : n->kids)
        if (kid) n->height = std::max(n->height, kid->height + 1);
    if (n->kind >= Kind::literal && n->height > kJinjaMaxExpressionDepth)
        fail(n->line, "an expression nested more than " + std::to_string(kJinjaMaxExpressionDepth) +
                          " deep (operators, filters, attributes, calls or brackets inside each other)");
    return n;
}

NodePtr make(Kind kind, int line, std::string text = {}, std::vector<NodePtr> kids = {}) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->line = line;
    n->text = std::move(text);
    n->kids = std::move(kids);
    return sealed(std::move(n));
}

NodePtr literal(Data value, int line) {
    auto n = std::make_shared<Node>();
    n->kind = Kind::literal;
    n->line = line;
    n->literal = std::move(value);
    return n;
}

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

    NodePtr parse_template() {
        std::string stopped_at;
        return statements({}, stopped_at);
    }

private:
    // Statements until one of `ends` (a block tag's name), which is consumed up to its name; "" at the end.
    NodePtr statements(const std::vector<std::string>& ends, std::string& stopped_at) {
        // Each open block is a few frames of this parser and of the renderer, and a level of the tree.
        if (static_cast<int>(blocks_open_.size()) > kJinjaMaxBlockNesting)
            fail(blocks_open_.back(), "blocks nested more than " + std::to_string(kJinjaMaxBlockNesting) +
                                          " deep (if, for, macro, set or generation inside each other)");
        auto seq = std::make_shared<Node>();
        seq->kind = Kind::sequence;
        while (i_ < t_.size()) {
            const Token& tok = t_[i_];
            if (tok.type == TokenType::text) {
                seq->kids.push_back(make(Kind::text, tok.line, tok.text));
                ++i_;
            } else if (tok.type == TokenType::expr_begin) {
                ++i_;
                NodePtr e = expression();
                expect_end();
                seq->kids.push_back(make(Kind::emit, tok.line, {}, {e}));
            } else if (tok.type == TokenType::stmt_begin) {
                const Token& name = t_.at(i_ + 1);
                if (name.type != TokenType::name) fail(name.line, "a block tag without a statement name");
                if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
                    stopped_at = name.text;
                    i_ += 2;
                    return sealed(seq);
                }
                if (is_end_tag(name.text))
                    fail(name.line,
                         "'" + name.text + "' where " +
                             (ends.empty() ? std::string("no block is open") : "'" + ends.back() + "' was expected"));
                i_ += 2;
                blocks_open_.push_back(name.line);
                NodePtr s = statement(name);
                blocks_open_.pop_back();
                if (s) seq->kids.push_back(s);
            } else {
                fail(tok.line, "unexpected token");
            }
        }
        if (!ends.empty()) fail(line(), "a block without its '" + ends.back() + "'");
        stopped_at.clear();
        return sealed(seq);
    }

    static bool is_end_tag(const std::string& name) {
        return name == "elif" || name == "else" || name == "endif" || name == "endfor" || name == "endset" ||
               name == "endmacro" || name == "endgeneration";
    }

    NodePtr statement(const Token& name) {
        const int ln = name.line;
        const std::string& n = name.text;
        if (n == "if") return if_statement(ln);
        if (n == "for") return for_statement(ln);
        if (n == "set") return set_statement(ln);
        if (n == "macro") return macro_statement(ln);
        if (n == "generation") {  // transformers' marker of assistant text: rendered as its body
            expect_end();
            std::string stopped;
            NodePtr body = statements({"endgeneration"}, stopped);
            expect_end();
            return body;
        }
        if (n == "break" || n == "continue") {
            expect_end();
            return make(n == "break" ? Kind::break_ : Kind::continue_, ln);
        }
        fail(ln, "the statement '" + n + "' is not supported");
    }

    NodePtr if_statement(int ln) {
        auto node = std::make_shared<Node>();
        node->kind = Kind::if_;
        node->line = ln;
        node->kids.push_back(expression());
        expect_end();
        for (;;) {
            std::string stopped;
            node->kids.push_back(statements({"elif", "else", "endif"}, stopped));
            if (stopped == "endif") {
                expect_end();
                return sealed(node);
            }
            if (stopped == "elif") {
                node->kids.push_back(expression());
                expect_end();
            } else if (stopped == "else") {
                expect_end();
                node->kids.push_back(literal(true, ln));
            } else {
                fail(ln, "an 'if' without its 'endif'");
            }
        }
    }

    NodePtr for_statement(int ln) {
        auto node = std::make_shared<Node>();
        node->kind = Kind::for_;
        node->line = ln;
        for (;;) {
            const Token& target = next();
            if (target.type != TokenType::name) fail(target.line, "expected a loop variable's name");
            node->names.push_back(target.text);
            if (!accept_op(",")) break;
        }
        if (!accept_name("in")) fail(ln, "expected 'in' in a 'for'");
        NodePtr iterable = or_expression();  // not a ternary: a trailing `if` filters the items
        NodePtr condition;
        if (accept_name("if")) condition = or_expression();
        expect_end();
        std::string stopped;
        NodePtr body = statements({"else", "endfor"}, stopped);
        NodePtr otherwise;
        if (stopped == "else") {
            expect_end();
            otherwise = statements({"endfor"}, stopped);
        }
        expect_end();
        node->kids = {iterable, body, condition, otherwise};
        return sealed(node);
    }

    NodePtr set_statement(int ln) {
        const Token& target = next();
        if (target.type != TokenType::name) fail(target.line, "expected a variable's name after 'set'");
        auto node = std::make_shared<Node>();
        node->line = ln;
        node->names.push_back(target.text);
        if (accept_op(".")) {
            const Token& attr = next();
            if (attr.type != TokenType::name) fail(attr.line, "expected an attribute's name");
            node->names.push_back(attr.text);
        }
        if (accept_op("=")) {
            node->kind = Kind::set;
            node->kids.push_back(expression());
            expect_end();
            return sealed(node);
        }
        expect_end();
        node->kind = Kind::set_block;
        std::string stopped;
        node->kids.push_back(statements({"endset"}, stopped));
        expect_end();
        return sealed(node);
    }

    NodePtr macro_statement(int ln) {
        const Token& name = next();
        if (name.type != TokenType::name) fail(name.line, "expected the macro's name");
        auto node = std::make_shared<Node>();
        node->kind = Kind::macro;
        node->line = ln;
        node->text = name.text;
        expect_op("(");
        // names: the parameters; kids[0]: the body; kids[1..]: defaults (null where none).
        std::vector<NodePtr> defaults;
        if (!accept_op(")")) {
            for (;;) {
                const Token& p = next();
                if (p.type != TokenType::name) fail(p.line, "expected a parameter's name");
                node->names.push_back(p.text);
                defaults.push_back(accept_op("=") ? expression() : nullptr);
                if (accept_op(")")) break;
                expect_op(",");
            }
        }
        expect_end();
        std::string stopped;
        node->kids.push_back(statements({"endmacro"}, stopped));
        expect_end();
        for (auto& d : defaults) node->kids.push_back(d);
        return sealed(node);
    }

    // Expressions, lowest precedence first.
    // The parser's own recursion, which brackets and `(((x)))` deepen without deepening the tree.
    class Nested {
    public:
        Nested(Parser& p) : p_(p) {  // NOLINT: a guard made at the top of each recursive level
            if (++p_.nesting_ > kJinjaMaxExpressionDepth) too_deep(p_.line());
        }
        [[noreturn]] [[gnu::noinline]] static void too_deep(int line) {
            fail(line, "an expression nested more than " + std::to_string(kJinjaMaxExpressionDepth) +
                           " deep (brackets, arguments, signs or 'not' inside each other)");
        }
        ~Nested() { --p_.nesting_; }
        Nested(const Nested&) = delete;
        Nested& operator=(const Nested&) = delete;

    private:
        Parser& p_;
    };

    NodePtr expression() {
        const Nested nested(*this);
        NodePtr value = or_expression();
        return peek_name("if") ? conditional(std::move(value)) : value;
    }

    // `value if condition else otherwise`, after `value`.
    [[gnu::noinline]] NodePtr conditional(NodePtr value) {
        const int ln = next().line;
        NodePtr condition = or_expression();
        NodePtr otherwise = accept_name("else") ? expression() : nullptr;
        return make(Kind::ternary, ln, {}, {condition, value, otherwise});
    }

    // The binary operator at the next token and its precedence (Jinja2's: or 1, and 2, comparisons and `in` 4,
    // + - 5, ~ 6, * / // % 7, ** 8; `not` as a prefix is 3), or 0; `tokens`: 2 for "not in".
    int binary_operator(std::string& op, int& tokens) const {
        tokens = 1;
        if (i_ >= t_.size()) return 0;
        const Token& tok = t_[i_];
        if (tok.type == TokenType::name) {
            if (tok.text == "or" || tok.text == "and" || tok.text == "in") {
                op = tok.text;
                return tok.text == "or" ? 1 : tok.text == "and" ? 2 : 4;
            }
            if (tok.text == "not" && i_ + 1 < t_.size() && t_[i_ + 1].type == TokenType::name &&
                t_[i_ + 1].text == "in") {
                op = "not in";
                tokens = 2;
                return 4;
            }
            return 0;
        }
        if (tok.type != TokenType::op) return 0;
        static const std::pair<const char*, int> table[] = {{"==", 4}, {"!=", 4}, {"<", 4}, {">", 4}, {"<=", 4},
                                                            {">=", 4}, {"+", 5},  {"-", 5}, {"~", 6}, {"*", 7},
                                                            {"/", 7},  {"//", 7}, {"%", 7}, {"**", 8}};
        for (const auto& [text, precedence] : table)
            if (tok.text == text) {
                op = text;
                return precedence;
            }
        return 0;
    }

    // Binary operators of precedence `least` and above, left-associative, by precedence climbing: one loop for
    // every level, so that a bracket costs the parser a few frames rather than one per level (its recursion is what
    // kJinjaMaxExpressionDepth bounds, on a small stack under AddressSanitizer too).
    NodePtr binary_expression(int least) {
        // `not a == b` is not (a == b); `a and not b or c`
        NodePtr left = least <= 3 && peek_name("not") ? negated() : unary();
        for (;;) {
            std::string op;
            int tokens = 1;
            const int precedence = binary_operator(op, tokens);
            if (precedence == 0 || precedence < least) return left;
            const int ln = t_[i_].line;
            i_ += static_cast<size_t>(tokens);
            left = joined(std::move(left), op, ln, binary_expression(precedence + 1));
        }
    }

    [[gnu::noinline]] static NodePtr joined(NodePtr left, const std::string& op, int line, NodePtr right) {
        return make(Kind::binary, line, op, {std::move(left), std::move(right)});
    }

    [[gnu::noinline]] NodePtr negated() {
        const Nested nested(*this);
        const int ln = next().line;
        return make(Kind::unary, ln, "not", {binary_expression(3)});
    }

    NodePtr or_expression() { return binary_expression(1); }

    // As Jinja2: a sign applies before the filters that follow (`-3 | abs` is 3).
    // The functions on the parser's recursive path (expression, binary_expression, unary, primary, and what
    // brackets, arguments and subscripts add) keep their frames small by leaving the work of each case to a function
    // of its own, out of line: under AddressSanitizer every temporary there takes its slot in the frame (6.6 KB a
    // bracket before, 512 KiB a hundred brackets deep).
    NodePtr unary(bool with_filters = true) {
        NodePtr value = peek_op("-") || peek_op("+") ? signed_operand() : postfix(primary());
        return with_filters ? filtered(std::move(value)) : value;
    }

    [[gnu::noinline]] NodePtr signed_operand() {
        const Nested nested(*this);
        const Token& tok = next();
        return make(Kind::unary, tok.line, tok.text, {unary(false)});
    }

    // Filters and tests after a value: `x | f(a) | g`, `x is defined`, `x is not none`.
    [[gnu::noinline]] NodePtr filtered(NodePtr value) {
        for (;;) {
            if (accept_op("|")) {
                const Token& name = next();
                if (name.type != TokenType::name) fail(name.line, "expected a filter's name after '|'");
                auto node = std::make_shared<Node>();
                node->kind = Kind::filter;
                node->line = name.line;
                node->text = name.text;
                node->kids.push_back(value);
                node->names.push_back("");
                if (accept_op("(")) arguments(*node);
                value = sealed(node);
            } else if (peek_name("is")) {
                const int ln = next().line;
                auto node = std::make_shared<Node>();
                node->kind = Kind::test;
                node->line = ln;
                node->negated = accept_name("not");
                const Token& name = next();
                if (name.type != TokenType::name) fail(name.line, "expected a test's name after 'is'");
                node->text = name.text;
                node->kids.push_back(value);
                node->names.push_back("");
                if (accept_op("(")) {
                    arguments(*node);
                } else if (peek().type == TokenType::string || peek().type == TokenType::integer ||
                           peek().type == TokenType::number) {
                    node->kids.push_back(primary());  // `is divisibleby 3`, `is equalto 'x'`
                    node->names.push_back("");
                }
                value = sealed(node);
            } else {
                return value;
            }
        }
    }

    // Call arguments after '(' into `node` (kids and names), up to ')'.
    [[gnu::noinline]] void arguments(Node& node) {
        if (accept_op(")")) return;
        for (;;) {
            if (peek().type == TokenType::name && i_ + 1 < t_.size() && t_[i_ + 1].type == TokenType::op &&
                t_[i_ + 1].text == "=") {
                node.names.push_back(next().text);
                ++i_;
            } else {
                node.names.push_back("");
            }
            node.kids.push_back(expression());
            if (accept_op(")")) return;
            expect_op(",");
        }
    }

    [[gnu::noinline]] NodePtr postfix(NodePtr value) {
        for (;;) {
            if (peek_op(".")) {
                const int ln = next().line;
                const Token& name = next();
                if (name.type != TokenType::name && name.type != TokenType::integer)
                    fail(name.line, "expected an attribute's name after '.'");
                value = make(Kind::attribute, ln, name.text, {value});
            } else if (peek_op("[")) {
                const int ln = next().line;
                NodePtr a, b, c;
                bool sliced = false;
                if (!peek_op(":")) a = expression();
                if (accept_op(":")) {
                    sliced = true;
                    if (!peek_op(":") && !peek_op("]")) b = expression();
                    if (accept_op(":") && !peek_op("]")) c = expression();
                }
                expect_op("]");
                value = sliced ? make(Kind::slice, ln, {}, {value, a, b, c}) : make(Kind::item, ln, {}, {value, a});
            } else if (peek_op("(")) {
                const int ln = next().line;
                auto node = std::make_shared<Node>();
                node->kind = Kind::call;
                node->line = ln;
                node->kids.push_back(value);
                node->names.push_back("");
                arguments(*node);
                value = sealed(node);
            } else {
                return value;
            }
        }
    }

    NodePtr primary() {
        const Token& tok = next();
        if (tok.type == TokenType::op && (tok.text == "(" || tok.text == "[" || tok.text == "{")) return bracketed(tok);
        return atom(tok);
    }

    // A literal or a name.
    [[gnu::noinline]] NodePtr atom(const Token& tok) {
        switch (tok.type) {
            case TokenType::string: {
                std::string s = tok.text;
                while (peek().type == TokenType::string) s += next().text;  // adjacent literals join
                return literal(s, tok.line);
            }
            case TokenType::integer: {
                try {
                    return literal(static_cast<int64_t>(std::stoll(tok.text)), tok.line);
                } catch (const std::exception&) {
                    fail(tok.line, "the integer " + (tok.text.size() > 30 ? tok.text.substr(0, 30) + "..." : tok.text) +
                                       " is too large (integers are 64-bit here)");
                }
            }
            case TokenType::number: {
                return literal(std::strtod(tok.text.c_str(), nullptr), tok.line);  // inf past DBL_MAX, as Python
            }
            case TokenType::name: {
                if (tok.text == "true" || tok.text == "True") return literal(true, tok.line);
                if (tok.text == "false" || tok.text == "False") return literal(false, tok.line);
                if (tok.text == "none" || tok.text == "None") return literal(nullptr, tok.line);
                return make(Kind::name, tok.line, tok.text);
            }
            default: break;
        }
        fail(tok.line, tok.type == TokenType::end ? std::string("an expression ends too soon")
                                                  : "unexpected '" + tok.text + "' in an expression");
    }

    // A parenthesised expression or a tuple, a list, a dict: after its opening bracket `tok`.
    [[gnu::noinline]] NodePtr bracketed(const Token& tok) {
        if (tok.text == "(") {
            if (accept_op(")")) return make(Kind::tuple, tok.line);
            NodePtr first = expression();
            if (accept_op(")")) return first;
            std::vector<NodePtr> items{first};
            while (accept_op(",")) {
                if (peek_op(")")) break;
                items.push_back(expression());
            }
            expect_op(")");
            return make(Kind::tuple, tok.line, {}, items);
        }
        if (tok.text == "[") {
            std::vector<NodePtr> items;
            while (!accept_op("]")) {
                items.push_back(expression());
                if (!accept_op(",")) {
                    expect_op("]");
                    break;
                }
            }
            return make(Kind::list, tok.line, {}, items);
        }
        std::vector<NodePtr> items;  // a dict: key, value, key, value...
        while (!accept_op("}")) {
            items.push_back(expression());
            expect_op(":");
            items.push_back(expression());
            if (!accept_op(",")) {
                expect_op("}");
                break;
            }
        }
        return make(Kind::dict, tok.line, {}, items);
    }

    const Token& peek() const {
        if (i_ >= t_.size()) fail(t_.empty() ? 1 : t_.back().line, "the template ends inside a tag");
        return t_[i_];
    }
    const Token& next() {
        const Token& tok = peek();
        ++i_;
        return tok;
    }
    int line() const { return i_ < t_.size() ? t_[i_].line : (t_.empty() ? 1 : t_.back().line); }
    bool peek_op(const char* op) const { return i_ < t_.size() && t_[i_].type == TokenType::op && t_[i_].text == op; }
    bool peek_name(const char* name) const {
        return i_ < t_.size() && t_[i_].type == TokenType::name && t_[i_].text == name;
    }
    bool accept_op(const char* op) {
        if (!peek_op(op)) return false;
        ++i_;
        return true;
    }
    bool accept_name(const char* name) {
        if (!peek_name(name)) return false;
        ++i_;
        return true;
    }
    void expect_op(const char* op) {
        if (!accept_op(op)) fail(line(), std::string("expected '") + op + "'");
    }
    void expect_end() {
        const Token& tok = peek();
        if (tok.type != TokenType::end) fail(tok.line, "expected the end of the tag, found '" + tok.text + "'");
        ++i_;
    }

    std::vector<Token> t_;
    size_t i_ = 0;
    int nesting_ = 0;               // expression levels the parser is inside
    std::vector<int> blocks_open_;  // the lines of the blocks it is inside
};

// ---------------------------------------------------------------------------------------------------------------
// Values

// Where a for loop is, for its `loop` variable: read in place (loop.index, ...), so that an iteration does not build
// a dict of nine entries (which was most of a loop's cost); `loop` as a whole value is that dict, built when used.
struct LoopState {
    int64_t index0 = 0, length = 0;
    const Data* previous = nullptr;  // the items before and after this one (null at the ends)
    const Data* next = nullptr;
};

struct Value;
using Arguments = std::vector<std::pair<std::string, Value>>;  // name ("" positional), value
using Function = std::function<Value(const Arguments&, int line)>;

struct Value {
    bool defined = true;
    Data data;
    std::shared_ptr<const Function> function;
    const LoopState* loop = nullptr;  // a loop's `loop` where it is bound, never copied out of its scope

    Value() = default;
    Value(Data d) : data(std::move(d)) {}  // NOLINT: values are made from JSON everywhere
    static Value undefined() {
        Value v;
        v.defined = false;
        return v;
    }
    static Value callable(Function f) {
        Value v;
        v.function = std::make_shared<const Function>(std::move(f));
        return v;
    }
};

bool truthy(const Value& v) {
    if (!v.defined) return false;
    if (v.function) return true;
    const Data& d = v.data;
    switch (d.type()) {
        case Data::value_t::null: return false;
        case Data::value_t::boolean: return d.get<bool>();
        case Data::value_t::number_integer: return d.get<int64_t>() != 0;
        case Data::value_t::number_unsigned: return d.get<uint64_t>() != 0;
        case Data::value_t::number_float: return d.get<double>() != 0.0;
        case Data::value_t::string: return !d.get_ref<const std::string&>().empty();
        case Data::value_t::array:
        case Data::value_t::object: return !d.empty();
        default: return false;
    }
}

std::string python_float(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[40];
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, x);
        if (std::strtod(buf, nullptr) == x) break;
    }
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

std::string python_repr(const Data& d);

// str(x) as Python writes it, which is what Jinja2 outputs.
std::string to_text(const Value& v) {
    if (!v.defined) return "";
    if (v.function) return "<function>";
    const Data& d = v.data;
    if (d.is_string()) return d.get<std::string>();
    return python_repr(d);
}

// The number of bytes of a UTF-8 character from its first byte; a stray byte counts as a character of its own.
size_t char_length(char first) {
    const unsigned char c = static_cast<unsigned char>(first);
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

// The UTF-8 characters of a string, for iteration, indexing and slicing, without a string per character (a 16 MB
// string would be a gigabyte of them): ASCII is indexed as bytes, anything else through the characters' offsets.
class Chars {
public:
    explicit Chars(const std::string& s) : s_(s) {
        ascii_ = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
        if (ascii_) return;
        if (s.size() > UINT32_MAX) throw JinjaError("chat template: a string of more than 4 GB");
        for (size_t i = 0; i < s.size(); i += char_length(s[i])) starts_.push_back(static_cast<uint32_t>(i));
    }
    size_t size() const { return ascii_ ? s_.size() : starts_.size(); }
    std::string at(size_t k) const {
        const size_t b = ascii_ ? k : starts_[k];
        const size_t e = k + 1 < size() ? (ascii_ ? k + 1 : starts_[k + 1]) : s_.size();
        return s_.substr(b, e - b);
    }

private:
    const std::string& s_;
    bool ascii_ = true;
    std::vector<uint32_t> starts_;
};

size_t count_characters(const std::string& s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); i += char_length(s[i])) ++n;
    return n;
}

std::string python_repr(const Data& d) {
    switch (d.type()) {
        case Data::value_t::null: return "None";
        case Data::value_t::boolean: return d.get<bool>() ? "True" : "False";
        case Data::value_t::number_integer: return std::to_string(d.get<int64_t>());
        case Data::value_t::number_unsigned: return std::to_string(d.get<uint64_t>());  // past INT64_MAX from JSON
        case Data::value_t::number_float: return python_float(d.get<double>());
        case Data::value_t::string: {
            const std::string& s = d.get_ref<const std::string&>();
            const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
            std::string out(1, quote);
            for (char c : s) {
                if (c == quote || c == '\\') out += '\\';
                if (c == '\n')
                    out += "\\n";
                else
                    out += c;
            }
            return out + quote;
        }
        case Data::value_t::array: {
            std::string out = "[";
            for (size_t i = 0; i < d.size(); ++i) out += (i ? ", " : "") + python_repr(d[i]);
            return out + "]";
        }
        case Data::value_t::object: {
            std::string out = "{";
            bool first = true;
            for (const auto& [k, v] : d.items()) {
                out += (first ? "" : ", ") + python_repr(Data(k)) + ": " + python_repr(v);
                first = false;
            }
            return out + "}";
        }
        default: return "";
    }
}

// A value in a message: its repr, cut short at a character's boundary (a message is no place for a 16 MB value).
std::string shown(const Data& d) {
    if (d.is_string() && d.get_ref<const std::string&>().size() > 200) return "a string";
    std::string s = python_repr(d);
    if (s.size() <= 60) return s;
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return s.substr(0, cut) + "...";
}

// The checked reads of an argument or operand: a JinjaError naming `what`, never a JSON library's type error.
const std::string& as_string(const Data& d, const std::string& what, int line) {
    if (!d.is_string()) fail(line, what + " must be a string, not " + shown(d));
    return d.get_ref<const std::string&>();
}

int64_t as_integer(const Data& d, const std::string& what, int line) {
    if (d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        fail(line, what + ": the integer " + shown(d) + " is beyond 64 bits");
    if (!d.is_number_integer()) fail(line, what + " must be an integer, not " + shown(d));
    return d.get<int64_t>();
}

double as_number(const Data& d, const std::string& what, int line) {
    if (!d.is_number()) fail(line, what + " must be a number, not " + shown(d));
    return d.get<double>();
}

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson writes it: ", " and ": " without an
// indent (-1), "," and ": " with one; `limit` bounds the text (a large indent times a deep value is large).
void dump_json(const Data& d, int64_t indent, int64_t depth, std::string& out, size_t limit, int line) {
    const auto grown = [&](size_t more) {
        if (more > limit || out.size() > limit - more)
            fail(line,
                 "tojson: a text of more than " + std::to_string(limit) + " bytes (RenderLimits::max_value_bytes)");
    };
    const auto newline = [&](int64_t level) {
        const auto spaces = static_cast<uint64_t>(indent) * static_cast<uint64_t>(level);  // both small: checked
        grown(static_cast<size_t>(spaces) + 1);
        out += '\n';
        out.append(static_cast<size_t>(spaces), ' ');
    };
    switch (d.type()) {
        case Data::value_t::string: {
            const std::string& s = d.get_ref<const std::string&>();
            grown(s.size() + 2);
            out += '"';
            for (unsigned char c : s) {
                switch (c) {
                    case '"': out += "\\\""; break;
                    case '\\': out += "\\\\"; break;
                    case '\n': out += "\\n"; break;
                    case '\r': out += "\\r"; break;
                    case '\t': out += "\\t"; break;
                    case '\b': out += "\\b"; break;
                    case '\f': out += "\\f"; break;
                    default:
                        if (c < 0x20) {
                            char buf[8];
                            std::snprintf(buf, sizeof buf, "\\u%04x", c);
                            out += buf;
                        } else {
                            out += static_cast<char>(c);
                        }
                }
            }
            out += '"';
            return;
        }
        case Data::value_t::array:
        case Data::value_t::object: {
            const bool object = d.is_object();
            out += object ? '{' : '[';
            if (d.empty()) {
                out += object ? '}' : ']';
                return;
            }
            bool first = true;
            for (auto it = d.begin(); it != d.end(); ++it) {
                if (!first) out += indent >= 0 ? "," : ", ";
                first = false;
                if (indent >= 0) newline(depth + 1);
                if (object) {
                    dump_json(Data(it.key()), indent, depth + 1, out, limit, line);
                    out += ": ";
                }
                dump_json(it.value(), indent, depth + 1, out, limit, line);
            }
            if (indent >= 0) newline(depth);
            out += object ? '}' : ']';
            grown(0);
            return;
        }
        case Data::value_t::null: out += "null"; return;
        case Data::value_t::boolean: out += d.get<bool>() ? "true" : "false"; return;
        case Data::value_t::number_float: out += python_float(d.get<double>()); return;
        default: out += d.dump(); return;
    }
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && chars.find(s[b]) != std::string::npos) ++b;
    if (right)
        while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

// Checked int64 arithmetic: Python's integers have no bound, these have 64 bits, so a result past them is an error
// rather than a wrapped number (or, for INT64_MIN // -1, SIGFPE).
int64_t checked(bool overflowed, int64_t result, const char* op, int line) {
    if (overflowed) fail(line, std::string("integer overflow in '") + op + "' (integers are 64-bit here)");
    return result;
}

// Python's floor division and modulo (the remainder takes the divisor's sign).
std::pair<int64_t, int64_t> floor_divide(int64_t x, int64_t y, const char* op, int line) {
    if (y == 0) fail(line, "integer division or modulo by zero");
    if (y == -1) {  // x % -1 is 0 for every x; only INT64_MIN // -1 leaves 64 bits
        if (op[0] == '%') return {0, 0};
        return {checked(x == INT64_MIN, x == INT64_MIN ? 0 : -x, op, line), 0};
    }
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
        --q;  // cannot wrap: |y| > 1 here, so |q| < |x| / 2 + 1
        r += y;
    }
    return {q, r};
}

int64_t integer_power(int64_t base, int64_t exponent, int line) {
    int64_t result = 1;
    while (exponent > 0) {
        if (exponent & 1) result = checked(__builtin_mul_overflow(result, base, &result), result, "**", line);
        exponent >>= 1;
        if (exponent > 0) base = checked(__builtin_mul_overflow(base, base, &base), base, "**", line);
    }
    return result;
}

}  // namespace

bool nests_deeper_than(const nlohmann::ordered_json& value, int max_depth) {
    // (container, its next child, its depth) on an explicit stack: the value may be nested a million deep.
    struct Open {
        const Data* container;
        Data::const_iterator next;
        int depth;
    };
    if (!value.is_structured()) return max_depth < 0;
    std::vector<Open> stack{{&value, value.cbegin(), 1}};
    if (max_depth < 1) return true;
    while (!stack.empty()) {
        Open& top = stack.back();
        if (top.next == top.container->cend()) {
            stack.pop_back();
            continue;
        }
        const Data& child = *top.next++;
        if (!child.is_structured()) continue;
        const int depth = top.depth + 1;
        if (depth > max_depth) return true;
        stack.push_back({&child, child.cbegin(), depth});
    }
    return false;
}

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Rendering

// Jinja2's sandbox (transformers renders in ImmutableSandboxedEnvironment) refuses a longer range() too.
constexpr int64_t kMaxRange = 100000;
constexpr uint64_t kPollSteps = 1024;  // how often RenderLimits::cancelled is asked
constexpr size_t kBytesPerStep = 256;  // a value's copy or build costs a step per this many bytes
constexpr size_t kItemBytes = 16;      // what a list's or dict's item weighs besides its contents

class Renderer {
public:
    Renderer(const Data& variables, const RenderLimits& limits) : limits_(limits) {
        out_limit_ = limits_.max_output_bytes;
        scopes_.emplace_back();
        auto& globals = scopes_.back();
        globals["raise_exception"] = Value::callable([](const Arguments& args, int line) -> Value {
            fail(line, "raise_exception: " + (args.empty() ? std::string() : to_text(args[0].second)));
        });
        globals["namespace"] = Value::callable([this](const Arguments& args, int line) -> Value {
            Data ns = Data::object();
            for (const auto& [name, value] : args) {
                if (!name.empty())
                    ns[name] = value.data;
                else if (value.data.is_object())
                    ns.update(value.data);
                else
                    fail(line, "namespace() takes keyword arguments or a dict");
            }
            return admit(Value(ns), line);
        });
        globals["range"] = Value::callable([this](const Arguments& args, int line) -> Value {
            std::vector<int64_t> a;
            for (const auto& [name, value] : args) a.push_back(as_integer(value.data, "range()'s arguments", line));
            if (a.empty() || a.size() > 3) fail(line, "range() takes 1 to 3 integers");
            const int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0];
            const int64_t step = a.size() > 2 ? a[2] : 1;
            if (step == 0) fail(line, "range() with a step of 0");
            // The count in unsigned arithmetic, which cannot overflow: stop - start of two int64s fits in a uint64.
            const bool up = step > 0;
            const uint64_t span = up ? (stop > start ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) : 0)
                                     : (start > stop ? static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) : 0);
            const uint64_t stride = up ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
            const uint64_t n = span / stride + (span % stride != 0 ? 1 : 0);
            if (n > static_cast<uint64_t>(kMaxRange))
                fail(line, "range() of more than " + std::to_string(kMaxRange) +
                               " numbers (Jinja2's sandbox, in which transformers renders templates, refuses it too)");
            charge(n, line);
            Data out = Data::array();
            for (uint64_t k = 0; k < n; ++k)  // start + k * step lies between start and stop
                out.push_back(static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step)));
            return Value(out);
        });
        // transformers' global: the local date and time in strftime's format (Llama 3.2's template writes today's).
        globals["strftime_now"] = Value::callable([](const Arguments& args, int line) -> Value {
            const std::string format =
                as_string(positional(args, 0, "strftime_now", line), "strftime_now's format", line);
            const std::time_t now = std::time(nullptr);
            std::tm local{};
            localtime_r(&now, &local);
            char buf[256];
            const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
            return Value(Data(std::string(buf, n)));
        });
        scopes_.emplace_back();  // the template's own variables
        for (const auto& [name, value] : variables.items()) {
            weigh(value, 0, 0);  // before the copy, which recurses: a variable nested too deep stops here
            scopes_.back()[name] = Value(value);
        }
    }

    void render(const Node& node, std::string& out) {
        const Deeper deeper(*this, node.line);
        switch (node.kind) {
            case Kind::sequence:
                for (const auto& kid : node.kids) {
                    render(*kid, out);
                    if (flow_ != Flow::normal) return;
                }
                return;
            case Kind::text: return write(out, node.text, node.line);
            case Kind::emit: return emit(node, out);
            case Kind::if_: return render_if(node, out);
            case Kind::for_: return render_for(node, out);
            case Kind::set: return set(node);
            case Kind::set_block: return set_block(node);
            case Kind::macro: return define(node);
            case Kind::break_: flow_ = Flow::break_loop; return;
            case Kind::continue_: flow_ = Flow::continue_loop; return;
            default: fail(node.line, "not a statement");
        }
    }

    int line() const { return line_; }

private:
    // render() and eval() are the renderer's recursion: each case's work is a function of its own, out of line, so
    // that their frames stay small (under AddressSanitizer every temporary takes its slot in the frame of the
    // function it is in: eval was 3.5 KB with its cases inlined, a recursive macro 9.7 KB a call).
    [[gnu::noinline]] void emit(const Node& node, std::string& out) {
        write(out, to_text(eval(*node.kids[0])), node.line);
    }
    [[gnu::noinline]] void render_if(const Node& node, std::string& out) {
        for (size_t k = 0; k + 1 < node.kids.size(); k += 2)
            if (truthy(eval(*node.kids[k]))) return render(*node.kids[k + 1], out);
    }
    [[gnu::noinline]] void set(const Node& node) { assign(node, admit(eval(*node.kids[0]), node.line)); }
    [[gnu::noinline]] void set_block(const Node& node) { assign(node, Value(Data(capture(*node.kids[0])))); }
    [[gnu::noinline]] void define(const Node& node) { scopes_.back()[node.text] = macro(node); }

    enum class Flow { normal, break_loop, continue_loop };
    using Scope = std::map<std::string, Value>;

    // A level of the renderer's recursion (a statement or expression), counted as a step and against the depth.
    class Deeper {
    public:
        Deeper(Renderer& r, int line) : r_(r) {
            r_.line_ = line;
            r_.charge(1, line);
            if (++r_.depth_ > r_.limits_.max_render_depth) r_.too_deep(line);
        }
        ~Deeper() { --r_.depth_; }
        Deeper(const Deeper&) = delete;
        Deeper& operator=(const Deeper&) = delete;

    private:
        Renderer& r_;
    };

    // The failures are out of line: their messages' temporaries would take room in every frame of the recursion.
    [[noreturn]] [[gnu::noinline]] void too_deep(int line) const {
        fail(line, "the render nested more than " + std::to_string(limits_.max_render_depth) +
                       " deep (RenderLimits::max_render_depth: statements, expressions and macro calls inside each "
                       "other)");
    }

    void charge(uint64_t steps, int line) {
        steps_ += steps;
        if (steps_ > limits_.max_steps || steps_ >= next_poll_) checkpoint(line);
    }

    [[gnu::noinline]] void checkpoint(int line) {
        if (steps_ > limits_.max_steps)
            fail(line, "the render took more than " + std::to_string(limits_.max_steps) +
                           " steps (RenderLimits::max_steps): loops or values too large for a chat template");
        next_poll_ = steps_ + kPollSteps;
        if (limits_.cancelled && limits_.cancelled()) fail(line, "the render was cancelled (RenderLimits::cancelled)");
    }

    [[noreturn]] [[gnu::noinline]] void too_large(int line) const {
        fail(line, "a value of more than " + std::to_string(limits_.max_value_bytes) +
                       " bytes (RenderLimits::max_value_bytes)");
    }

    // Fails unless a value of `have` bytes may grow by `more`.
    void may_grow(size_t have, size_t more, int line) const {
        if (more > limits_.max_value_bytes || have > limits_.max_value_bytes - more) too_large(line);
    }

    // What `d`, `level` containers deep, weighs (in the units of max_value_bytes) added to `so_far`; fails past the
    // value limits. Its recursion is bounded by max_value_depth, whatever `d`'s depth.
    size_t weigh(const Data& d, int level, size_t so_far) {
        so_far += kItemBytes;
        if (d.is_string()) {
            may_grow(so_far, d.get_ref<const std::string&>().size(), line_);
            return so_far + d.get_ref<const std::string&>().size();
        }
        if (!d.is_structured()) {
            may_grow(so_far, 0, line_);
            return so_far;
        }
        if (level + 1 > limits_.max_value_depth)
            fail(line_, "a value nests lists and dicts more than " + std::to_string(limits_.max_value_depth) +
                            " deep (RenderLimits::max_value_depth)");
        if (d.is_object()) {
            for (const auto& [k, v] : d.items()) {
                may_grow(so_far, k.size(), line_);
                so_far = weigh(v, level + 1, so_far + k.size());
            }
        } else {
            for (const auto& item : d) so_far = weigh(item, level + 1, so_far);
        }
        return so_far;
    }

    // A value built or copied: within the value limits, and its bytes charged as steps.
    Value admit(Value v, int line) {
        line_ = line;
        if (v.defined && !v.function) charge(weigh(v.data, 0, 0) / kBytesPerStep, line);
        return v;
    }

    // Text into the output or a capture, within its limit.
    [[gnu::noinline]] void write(std::string& out, const std::string& text, int line) {
        if (text.size() > out_limit_ || out.size() > out_limit_ - text.size()) {
            if (out_limit_ == limits_.max_output_bytes && capturing_ == 0)
                fail(line, "the rendered text passed " + std::to_string(limits_.max_output_bytes) +
                               " bytes (RenderLimits::max_output_bytes)");
            too_large(line);
        }
        charge(text.size() / kBytesPerStep, line);
        out += text;
    }

    // The text of a `{% set %}` block or a macro's body: a value, so within max_value_bytes while it is written.
    [[gnu::noinline]] std::string capture(const Node& body) {
        const size_t outer = out_limit_;
        out_limit_ = limits_.max_value_bytes;
        ++capturing_;
        std::string captured;
        render(body, captured);
        --capturing_;
        out_limit_ = outer;
        return captured;
    }

    const Value* find(const std::string& name) const {
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
            const auto found = it->find(name);
            if (found != it->end()) return &found->second;
        }
        return nullptr;
    }

    [[gnu::noinline]] Value lookup(const std::string& name, int line) {
        const Value* found = find(name);
        if (found == nullptr) return Value::undefined();
        if (found->loop != nullptr) return admit(Value(loop_data(*found->loop)), line);
        return admit(*found, line);  // a copy: charged by its size
    }

    void assign(const Node& node, Value value) {
        if (node.names.size() == 1) {
            scopes_.back()[node.names[0]] = std::move(value);
            return;
        }
        // `set ns.attr = value`: the namespace is changed where it lives, so a loop's changes outlast the loop.
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
            const auto found = it->find(node.names[0]);
            if (found == it->end()) continue;
            if (!found->second.data.is_object())
                fail(node.line, "'" + node.names[0] + "' is not a namespace; cannot set its attribute");
            found->second.data[node.names[1]] = std::move(value.data);
            // The namespace grows with each assignment (`ns.s = ns.s ~ ns.s`, `ns.me = ns`): weighed as a whole.
            charge(weigh(found->second.data, 0, 0) / kBytesPerStep, node.line);
            return;
        }
        fail(node.line, "'" + node.names[0] + "' is undefined; cannot set its attribute");
    }

    static Data loop_data(const LoopState& l) {
        const int64_t k = l.index0, n = l.length;
        Data loop = {{"index", k + 1}, {"index0", k},       {"first", k == 0},       {"last", k == n - 1},
                     {"length", n},    {"revindex", n - k}, {"revindex0", n - k - 1}};
        loop["previtem"] = *l.previous;
        loop["nextitem"] = *l.next;
        return loop;
    }

    static Value loop_member(const LoopState& l, const Data& key) {
        if (!key.is_string()) return Value::undefined();
        const std::string& name = key.get_ref<const std::string&>();
        const int64_t k = l.index0, n = l.length;
        if (name == "index") return Value(Data(k + 1));
        if (name == "index0") return Value(Data(k));
        if (name == "first") return Value(Data(k == 0));
        if (name == "last") return Value(Data(k == n - 1));
        if (name == "length") return Value(Data(n));
        if (name == "revindex") return Value(Data(n - k));
        if (name == "revindex0") return Value(Data(n - k - 1));
        if (name == "previtem") return Value(*l.previous);
        if (name == "nextitem") return Value(*l.next);
        return Value::undefined();
    }

    [[gnu::noinline]] void render_for(const Node& node, std::string& out) {
        const Value iterable = eval(*node.kids[0]);
        const Data& d = iterable.data;
        // The items by index, without copying a list or splitting a string into a string per character.
        std::optional<Chars> chars;
        std::vector<std::string> keys;
        size_t count = 0;
        if (!iterable.defined || d.is_null()) {
        } else if (d.is_array()) {
            count = d.size();
        } else if (d.is_object()) {
            for (const auto& [k, v] : d.items()) keys.push_back(k);
            count = keys.size();
        } else if (d.is_string()) {
            chars.emplace(d.get_ref<const std::string&>());
            count = chars->size();
        } else {
            fail(node.line, shown(d) + " is not iterable");
        }
        const auto item_at = [&](size_t k) -> Data {
            if (d.is_array()) return d[k];
            if (chars) return Data(chars->at(k));
            return Data(keys[k]);
        };
        const auto bind = [&](Scope& scope, const Data& item) {
            if (node.names.size() == 1) {
                scope[node.names[0]] = Value(item);
                return;
            }
            if (!item.is_array() || item.size() != node.names.size())
                fail(node.line,
                     "cannot unpack " + shown(item) + " into " + std::to_string(node.names.size()) + " loop variables");
            for (size_t k = 0; k < node.names.size(); ++k) scope[node.names[k]] = Value(item[k]);
        };
        std::vector<size_t> kept;  // the indices of the items that pass `for x in xs if cond`; all without one
        if (node.kids[2]) {        // loop.* counts the items that pass
            for (size_t k = 0; k < count; ++k) {
                scopes_.emplace_back();
                bind(scopes_.back(), item_at(k));
                const bool keep = truthy(eval(*node.kids[2]));
                scopes_.pop_back();
                if (keep) kept.push_back(k);
            }
            count = kept.size();
        }
        const auto nth = [&](size_t k) { return item_at(node.kids[2] ? kept[k] : k); };
        if (count == 0) {
            if (node.kids[3]) render(*node.kids[3], out);
            return;
        }
        const int64_t n = static_cast<int64_t>(count);
        Data previous;
        Data current = nth(0);
        LoopState state;
        state.length = n;
        for (int64_t k = 0; k < n; ++k) {
            charge(1, node.line);
            Data next = k + 1 < n ? nth(static_cast<size_t>(k + 1)) : Data();
            scopes_.emplace_back();
            bind(scopes_.back(), current);
            state.index0 = k;
            state.previous = &previous;
            state.next = &next;
            Value loop;
            loop.loop = &state;
            scopes_.back()["loop"] = std::move(loop);
            render(*node.kids[1], out);
            scopes_.pop_back();
            if (flow_ == Flow::break_loop) {
                flow_ = Flow::normal;
                break;
            }
            flow_ = Flow::normal;
            previous = std::move(current);
            current = std::move(next);
        }
    }

    Value macro(const Node& node) {
        return Value::callable([this, &node](const Arguments& args, int line) -> Value {
            // A recursive macro is a few levels of the renderer per call: counted on its own for a clear message, from
            // before its defaults are evaluated (`macro f(a=f())` recurses there).
            if (calls_ >= limits_.max_call_depth)
                fail(line, "macro calls nested more than " + std::to_string(limits_.max_call_depth) +
                               " deep (RenderLimits::max_call_depth), in '" + node.text + "'");
            const Deeper deeper(*this, line);  // and a call's frames count towards the render's depth
            struct Call {
                int& calls;
                explicit Call(int& c) : calls(++c) {}
                ~Call() { --calls; }
                Call(const Call&) = delete;
                Call& operator=(const Call&) = delete;
            } call(calls_);
            Scope local;
            size_t positional = 0;
            for (const auto& [name, value] : args) {
                if (name.empty()) {
                    if (positional >= node.names.size())
                        fail(line,
                             "macro '" + node.text + "' takes " + std::to_string(node.names.size()) + " arguments");
                    local[node.names[positional++]] = value;
                } else if (std::find(node.names.begin(), node.names.end(), name) == node.names.end()) {
                    fail(line, "macro '" + node.text + "' has no parameter '" + name + "'");
                } else {
                    local[name] = value;
                }
            }
            // A macro sees the template's variables and its own, not its caller's locals.
            std::vector<Scope> callers(std::make_move_iterator(scopes_.begin() + 2),
                                       std::make_move_iterator(scopes_.end()));
            scopes_.resize(2);
            for (size_t k = 0; k < node.names.size(); ++k)
                if (!local.count(node.names[k]))
                    local[node.names[k]] = node.kids[k + 1] ? eval(*node.kids[k + 1]) : Value::undefined();
            scopes_.push_back(std::move(local));
            std::string out = capture(*node.kids[0]);
            scopes_.pop_back();
            for (auto& scope : callers) scopes_.push_back(std::move(scope));
            flow_ = Flow::normal;
            return Value(Data(std::move(out)));
        });
    }

    Value eval(const Node& node) {
        const Deeper deeper(*this, node.line);
        switch (node.kind) {
            case Kind::literal: return Value(node.literal);
            case Kind::name: return lookup(node.text, node.line);
            case Kind::attribute: return member_of(*node.kids[0], Data(node.text), node.line);
            case Kind::item: return item(node);
            case Kind::slice: return slice(node);
            case Kind::list:
            case Kind::tuple: return list_literal(node);
            case Kind::dict: return dict_literal(node);
            case Kind::ternary: return conditional(node);
            case Kind::unary: return unary(node);
            case Kind::binary: return binary(node);
            case Kind::call: return call(node);
            case Kind::filter: return filter(node);
            case Kind::test: return test(node);
            default: fail(node.line, "not an expression");
        }
    }

    [[gnu::noinline]] Value item(const Node& node) {
        const Value key = eval(*node.kids[1]);
        return member_of(*node.kids[0], key.data, node.line);
    }

    [[gnu::noinline]] Value list_literal(const Node& node) {
        Data out = Data::array();
        size_t bytes = kItemBytes;
        for (const auto& kid : node.kids) {
            Value item = eval(*kid);
            bytes = weigh(item.data, 1, bytes);  // the list one level up: [[[...]]] is bounded here
            out.push_back(std::move(item.data));
        }
        return Value(out);
    }

    [[gnu::noinline]] Value dict_literal(const Node& node) {
        Data out = Data::object();
        size_t bytes = kItemBytes;
        for (size_t k = 0; k + 1 < node.kids.size(); k += 2) {
            const Value key = eval(*node.kids[k]);
            if (!key.data.is_string()) fail(node.line, "dict keys must be strings here");
            Value item = eval(*node.kids[k + 1]);
            bytes = weigh(item.data, 1, bytes + key.data.get_ref<const std::string&>().size());
            out[key.data.get<std::string>()] = std::move(item.data);
        }
        return Value(out);
    }

    [[gnu::noinline]] Value conditional(const Node& node) {
        if (truthy(eval(*node.kids[0]))) return eval(*node.kids[1]);
        return node.kids[2] ? eval(*node.kids[2]) : Value::undefined();
    }

    [[gnu::noinline]] Value unary(const Node& node) {
        const Value x = eval(*node.kids[0]);
        if (node.text == "not") return Value(Data(!truthy(x)));
        if (!x.data.is_number()) fail(node.line, "unary " + node.text + " of a non-number");
        if (node.text == "+") return x;
        if (x.data.is_number_float()) return Value(Data(-x.data.get<double>()));
        const int64_t i = as_integer(x.data, "unary -", node.line);
        return Value(Data(checked(i == INT64_MIN, i == INT64_MIN ? 0 : -i, "unary -", node.line)));
    }

    [[gnu::noinline]] Arguments arguments(const Node& node, size_t first) {
        Arguments args;
        for (size_t k = first; k < node.kids.size(); ++k) args.emplace_back(node.names[k], eval(*node.kids[k]));
        return args;
    }

    // `object.key` and `object[key]`: a variable's member is read where the variable lives, so `messages[0]` in a
    // loop does not copy every message each time.
    [[gnu::noinline]] Value member_of(const Node& object, const Data& key, int line) {
        if (object.kind == Kind::name) {
            const Deeper deeper(*this, object.line);
            const Value* found = find(object.text);
            if (found == nullptr) return Value::undefined();
            if (found->loop != nullptr) return admit(loop_member(*found->loop, key), line);
            return admit(member(*found, key, line), line);
        }
        return member(eval(object), key, line);
    }

    // x.name and x[key]: an object's member, a list's or a string's index; undefined when there is none.
    Value member(const Value& object, const Data& key, int line) {
        if (!object.defined) return Value::undefined();
        const Data& d = object.data;
        if (d.is_object() && key.is_string()) {
            const auto found = d.find(key.get<std::string>());
            return found == d.end() ? Value::undefined() : Value(*found);
        }
        if ((d.is_array() || d.is_string()) && key.is_number_integer()) {
            if (key.is_number_unsigned() && key.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
                return Value::undefined();
            std::optional<Chars> chars;
            if (d.is_string()) {
                charge(d.get_ref<const std::string&>().size() / kBytesPerStep, line);
                chars.emplace(d.get_ref<const std::string&>());
            }
            const int64_t size = static_cast<int64_t>(chars ? chars->size() : d.size());
            int64_t k = key.get<int64_t>();
            if (k < 0) k += size;
            if (k < 0 || k >= size) return Value::undefined();
            return chars ? Value(Data(chars->at(static_cast<size_t>(k)))) : Value(d[static_cast<size_t>(k)]);
        }
        return Value::undefined();
    }

    [[gnu::noinline]] Value slice(const Node& node) {
        const Value object = eval(*node.kids[0]);
        const auto bound = [&](const NodePtr& n) -> std::optional<int64_t> {
            if (!n) return std::nullopt;
            const Value v = eval(*n);
            if (v.data.is_null()) return std::nullopt;
            return as_integer(v.data, "a slice bound", node.line);
        };
        const std::optional<int64_t> a = bound(node.kids[1]), b = bound(node.kids[2]), c = bound(node.kids[3]);
        const bool text = object.data.is_string();
        std::optional<Chars> chars;
        if (text)
            chars.emplace(object.data.get_ref<const std::string&>());
        else if (!object.data.is_array())
            fail(node.line, "only lists and strings can be sliced");
        const int64_t n = static_cast<int64_t>(text ? chars->size() : object.data.size());
        const int64_t step = c.value_or(1);
        if (step == 0) fail(node.line, "a slice step of 0");
        const auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
            if (!v) return fallback;
            int64_t x = *v < 0 ? *v + n : *v;  // cannot wrap: n >= 0
            return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
        };
        const int64_t start = clamp(a, step > 0 ? 0 : n - 1), stop = clamp(b, step > 0 ? n : -1);
        Data out = text ? Data("") : Data::array();
        // k steps from start towards stop, never past INT64_MAX (a step of 2**62 is a slice of one item).
        for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
            if (text)
                out.get_ref<std::string&>() += chars->at(static_cast<size_t>(k));
            else
                out.push_back(object.data[static_cast<size_t>(k)]);
            if (step > 0 && stop - k <= step) break;  // k + step >= stop; going down, k >= 0 keeps k + step in range
            k += step;
        }
        return admit(Value(out), node.line);
    }

    [[gnu::noinline]] Value binary(const Node& node) {
        const std::string& op = node.text;
        if (op == "and") {
            Value a = eval(*node.kids[0]);
            return truthy(a) ? eval(*node.kids[1]) : a;
        }
        if (op == "or") {
            Value a = eval(*node.kids[0]);
            return truthy(a) ? a : eval(*node.kids[1]);
        }
        const Value a = eval(*node.kids[0]), b = eval(*node.kids[1]);
        const Data &x = a.data, &y = b.data;
        if (op == "==") return Value(Data(equal(a, b)));
        if (op == "!=") return Value(Data(!equal(a, b)));
        if (op == "in" || op == "not in") {
            bool found = false;
            if (!b.defined || y.is_null())
                found = false;
            else if (y.is_string() && x.is_string())
                found = y.get_ref<const std::string&>().find(x.get_ref<const std::string&>()) != std::string::npos;
            else if (y.is_array())
                found = std::find(y.begin(), y.end(), x) != y.end();
            else if (y.is_object() && x.is_string())
                found = y.contains(x.get<std::string>());
            else
                fail(node.line, "'in' needs a string, a list or a dict on its right");
            return Value(Data(op == "in" ? found : !found));
        }
        if (op == "~") {
            std::string left = to_text(a);
            const std::string right = to_text(b);
            may_grow(left.size(), right.size(), node.line);
            charge((left.size() + right.size()) / kBytesPerStep, node.line);
            return Value(Data(left += right));
        }
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
            if (!((x.is_number() && y.is_number()) || (x.is_string() && y.is_string())))
                fail(node.line, "cannot compare " + shown(x) + " and " + shown(y));
            const bool less = x < y, greater = y < x;
            if (op == "<") return Value(Data(less));
            if (op == ">") return Value(Data(greater));
            if (op == "<=") return Value(Data(!greater));
            return Value(Data(!less));
        }
        if (op == "+") {
            if (x.is_string() && y.is_string()) {
                const std::string &l = x.get_ref<const std::string&>(), &r = y.get_ref<const std::string&>();
                may_grow(l.size(), r.size(), node.line);
                return admit(Value(Data(l + r)), node.line);
            }
            if (x.is_array() && y.is_array()) {
                Data out = x;
                for (const auto& item : y) out.push_back(item);
                return admit(Value(out), node.line);
            }
        }
        if (op == "*" && ((x.is_string() && y.is_number_integer()) || (x.is_number_integer() && y.is_string()))) {
            const std::string& s = x.is_string() ? x.get_ref<const std::string&>() : y.get_ref<const std::string&>();
            const int64_t times = as_integer(x.is_string() ? y : x, "a string's repetition count", node.line);
            if (times <= 0 || s.empty()) return Value(Data(""));  // as Python: no copies
            if (static_cast<uint64_t>(times) > limits_.max_value_bytes / s.size()) too_large(node.line);
            std::string out;
            out.reserve(s.size() * static_cast<size_t>(times));
            for (int64_t k = 0; k < times; ++k) out += s;
            return admit(Value(Data(std::move(out))), node.line);
        }
        if (!x.is_number() || !y.is_number() || x.is_boolean() || y.is_boolean()) {
            if (!a.defined || !b.defined) fail(node.line, "'" + op + "' of an undefined value");
            fail(node.line, "unsupported operands for '" + op + "': " + shown(x) + " and " + shown(y));
        }
        const bool integers = x.is_number_integer() && y.is_number_integer();
        if (integers) {
            const int64_t ix = as_integer(x, "'" + op + "'", node.line), iy = as_integer(y, "'" + op + "'", node.line);
            const char* o = op.c_str();
            int64_t r = 0;
            if (op == "+") return Value(Data(checked(__builtin_add_overflow(ix, iy, &r), r, o, node.line)));
            if (op == "-") return Value(Data(checked(__builtin_sub_overflow(ix, iy, &r), r, o, node.line)));
            if (op == "*") return Value(Data(checked(__builtin_mul_overflow(ix, iy, &r), r, o, node.line)));
            if (op == "//") return Value(Data(floor_divide(ix, iy, o, node.line).first));
            if (op == "%") return Value(Data(floor_divide(ix, iy, o, node.line).second));
            if (op == "**" && iy >= 0) return Value(Data(integer_power(ix, iy, node.line)));
        }
        const double dx = x.get<double>(), dy = y.get<double>();
        if (op == "/" || op == "//" || op == "%") {
            if (dy == 0) fail(node.line, op == "/" ? "division by zero" : "float floor division or modulo by zero");
            if (op == "/") return Value(Data(dx / dy));
        }
        if (op == "+") return Value(Data(dx + dy));
        if (op == "-") return Value(Data(dx - dy));
        if (op == "*") return Value(Data(dx * dy));
        if (op == "//") return Value(Data(std::floor(dx / dy)));
        if (op == "%") return Value(Data(dx - std::floor(dx / dy) * dy));
        if (op == "**") return Value(Data(std::pow(dx, dy)));
        fail(node.line, "unknown operator '" + op + "'");
    }

    static bool equal(const Value& a, const Value& b) {
        if (!a.defined || !b.defined) return a.defined == b.defined;
        return a.data == b.data;
    }

    [[gnu::noinline]] Value call(const Node& node) {
        const Node& callee = *node.kids[0];
        Arguments args = arguments(node, 1);
        if (callee.kind == Kind::attribute) {
            const Value object = eval(*callee.kids[0]);
            if (object.defined && !object.function && !(object.data.is_object() && object.data.contains(callee.text)))
                return admit(method(object.data, callee.text, args, node.line), node.line);
        }
        const Value f = eval(callee);
        if (!f.function)
            fail(node.line,
                 (callee.kind == Kind::name ? "'" + callee.text + "'" : std::string("it")) + " is not a function");
        return (*f.function)(args, node.line);
    }

    static const Data& positional(const Arguments& args, size_t k, const std::string& what, int line) {
        if (k >= args.size() || !args[k].first.empty()) fail(line, what + " needs more arguments");
        return args[k].second.data;
    }

    // Python's methods of strings and dicts that templates call.
    Value method(const Data& self, const std::string& name, const Arguments& args, int line) {
        if (self.is_string()) {
            const std::string& s = self.get_ref<const std::string&>();
            charge(s.size() / kBytesPerStep, line);
            const auto chars = [&]() {
                return args.empty() || args[0].second.data.is_null()
                           ? kWhitespace
                           : as_string(args[0].second.data, name + "()'s characters", line);
            };
            if (name == "strip") return Value(Data(strip(s, chars(), true, true)));
            if (name == "lstrip") return Value(Data(strip(s, chars(), true, false)));
            if (name == "rstrip") return Value(Data(strip(s, chars(), false, true)));
            if (name == "upper" || name == "lower") {
                std::string out = s;
                for (char& c : out) {
                    const unsigned char u = static_cast<unsigned char>(c);
                    c = static_cast<char>(name == "upper" ? std::toupper(u) : std::tolower(u));
                }
                return Value(Data(out));
            }
            if (name == "title" || name == "capitalize") return Value(Data(capitalised(s, name == "title")));
            if (name == "startswith" || name == "endswith") {
                const Data& what = positional(args, 0, name, line);
                std::vector<std::string> options;
                if (what.is_array())
                    for (const auto& o : what) options.push_back(as_string(o, name + "()'s argument", line));
                else
                    options.push_back(as_string(what, name + "()'s argument", line));
                for (const auto& o : options) {
                    const bool hit = o.size() <= s.size() &&
                                     (name == "startswith" ? s.compare(0, o.size(), o) == 0
                                                           : s.compare(s.size() - o.size(), o.size(), o) == 0);
                    if (hit) return Value(Data(true));
                }
                return Value(Data(false));
            }
            if (name == "split") return Value(split(s, args, line));
            if (name == "replace") {
                const std::string& from = as_string(positional(args, 0, name, line), "replace()'s old text", line);
                const std::string& to = as_string(positional(args, 1, name, line), "replace()'s new text", line);
                return Value(Data(replaced(s, from, to, line)));
            }
            if (name == "count") {
                const std::string& what = as_string(positional(args, 0, name, line), "count()'s argument", line);
                int64_t n = 0;
                if (!what.empty())
                    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
                return Value(Data(n));
            }
            if (name == "find") {
                const size_t p = s.find(as_string(positional(args, 0, name, line), "find()'s argument", line));
                return Value(Data(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p)));
            }
        }
        if (self.is_object()) {
            if (name == "items") {
                Data out = Data::array();
                for (const auto& [k, v] : self.items()) out.push_back(Data::array({k, v}));
                return Value(out);
            }
            if (name == "keys" || name == "values") {
                Data out = Data::array();
                for (const auto& [k, v] : self.items()) out.push_back(name == "keys" ? Data(k) : v);
                return Value(out);
            }
            if (name == "get") {
                const Data& key = positional(args, 0, name, line);
                if (key.is_string() && self.contains(key.get<std::string>()))
                    return Value(self[key.get<std::string>()]);
                return args.size() > 1 ? args[1].second : Value(Data());
            }
        }
        fail(line, "no method '" + name + "' of " + shown(self));
    }

    static std::string capitalised(const std::string& s, bool every_word) {
        std::string out = s;
        bool start = true;
        for (char& c : out) {
            const unsigned char u = static_cast<unsigned char>(c);
            c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
            start = every_word ? !std::isalpha(u) : false;
        }
        return out;
    }

    std::string replaced(const std::string& s, const std::string& from, const std::string& to, int line) {
        if (from.empty()) return s;
        std::string out;
        size_t p = 0;
        for (size_t q = s.find(from); q != std::string::npos; q = s.find(from, p)) {
            may_grow(out.size(), q - p + to.size(), line);  // 'a' * 100000 with each 'a' replaced by a long text
            out.append(s, p, q - p);
            out += to;
            p = q + from.size();
        }
        may_grow(out.size(), s.size() - p, line);
        charge(out.size() / kBytesPerStep, line);
        return out.append(s, p, std::string::npos);
    }

    Data split(const std::string& s, const Arguments& args, int line) {
        Data out = Data::array();
        size_t bytes = kItemBytes;
        const auto piece = [&](std::string text) {  // a piece weighs its item besides its text: split('') of 16 MB
            may_grow(bytes, kItemBytes + text.size(), line);
            bytes += kItemBytes + text.size();
            out.push_back(std::move(text));
        };
        const bool by_whitespace = args.empty() || args[0].second.data.is_null();
        const int64_t max_splits = args.size() > 1 ? as_integer(args[1].second.data, "split()'s count", line) : -1;
        if (by_whitespace) {
            size_t p = 0;
            int64_t splits = 0;
            while (p < s.size()) {
                while (p < s.size() && kWhitespace.find(s[p]) != std::string::npos) ++p;
                if (p >= s.size()) break;
                if (max_splits >= 0 && splits == max_splits) {
                    piece(strip(s.substr(p), kWhitespace, false, true));
                    break;
                }
                size_t e = p;
                while (e < s.size() && kWhitespace.find(s[e]) == std::string::npos) ++e;
                piece(s.substr(p, e - p));
                ++splits;
                p = e;
            }
            return out;
        }
        const std::string& sep = as_string(args[0].second.data, "split()'s separator", line);
        if (sep.empty()) fail(line, "split() with an empty separator");
        size_t p = 0;
        int64_t splits = 0;
        for (size_t q = s.find(sep); q != std::string::npos && (max_splits < 0 || splits < max_splits);
             q = s.find(sep, p), ++splits) {
            piece(s.substr(p, q - p));
            p = q + sep.size();
        }
        piece(s.substr(p));
        return out;
    }

    [[gnu::noinline]] Value filter(const Node& node) {
        const Value value = eval(*node.kids[0]);
        const Arguments args = arguments(node, 1);
        return admit(apply_filter(node, value, args), node.line);
    }

    Value apply_filter(const Node& node, const Value& value, const Arguments& args) {
        const std::string& name = node.text;
        const Data& d = value.data;
        const int line = node.line;
        const auto keyword = [&](const std::string& key, size_t position) -> std::optional<Data> {
            for (const auto& [n, v] : args)
                if (n == key) return v.data;
            size_t k = 0;
            for (const auto& [n, v] : args)
                if (n.empty() && k++ == position) return v.data;
            return std::nullopt;
        };
        if (d.is_string()) charge(d.get_ref<const std::string&>().size() / kBytesPerStep, line);
        if (name == "trim") {
            const std::optional<Data> chars = keyword("chars", 0);
            return Value(Data(
                strip(to_text(value), chars ? as_string(*chars, "trim's characters", line) : kWhitespace, true, true)));
        }
        if (name == "tojson") {
            const std::optional<Data> indent = keyword("indent", 0);
            int64_t spaces = -1;  // json.dumps: no indent; an indent of 0 or less is newlines without spaces
            if (indent && !indent->is_null()) {
                spaces = std::max<int64_t>(0, as_integer(*indent, "tojson's indent", line));
                spaces = std::min<int64_t>(spaces, static_cast<int64_t>(limits_.max_value_bytes));
            }
            std::string out;
            dump_json(value.defined ? d : Data(), spaces, 0, out, limits_.max_value_bytes, line);
            return Value(Data(out));
        }
        if (name == "length" || name == "count") {
            if (d.is_string())
                return Value(Data(static_cast<int64_t>(count_characters(d.get_ref<const std::string&>()))));
            if (d.is_array() || d.is_object()) return Value(Data(static_cast<int64_t>(d.size())));
            if (!value.defined) return Value(Data(int64_t{0}));
            fail(line, "length of " + shown(d));
        }
        if (name == "string") return Value(Data(to_text(value)));
        if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
            return method(Data(to_text(value)), name, {}, line);
        if (name == "replace") return method(Data(to_text(value)), name, args, line);
        if (name == "safe" || name == "e" || name == "escape") return value;  // no autoescaping in chat templates
        if (name == "default" || name == "d") {
            const std::optional<Data> boolean = keyword("boolean", 1);
            const bool falsy_too = boolean && truthy(Value(*boolean));
            if (!value.defined || (falsy_too && !truthy(value))) return Value(keyword("default_value", 0).value_or(""));
            return value;
        }
        if (name == "first" || name == "last") {
            if (d.is_array()) return d.empty() ? Value::undefined() : Value(name == "first" ? d.front() : d.back());
            if (d.is_string()) {
                const Chars chars(d.get_ref<const std::string&>());
                if (chars.size() == 0) return Value::undefined();
                return Value(Data(chars.at(name == "first" ? 0 : chars.size() - 1)));
            }
            fail(line, name + " of " + shown(d));
        }
        if (name == "items") return method(d.is_null() ? Data::object() : d, "items", {}, line);
        if (name == "list") {
            if (d.is_array()) return value;
            Data out = Data::array();
            if (d.is_string()) {
                const Chars chars(d.get_ref<const std::string&>());
                may_grow(d.get_ref<const std::string&>().size(), chars.size() * kItemBytes, line);  // before the items
                for (size_t k = 0; k < chars.size(); ++k) out.push_back(chars.at(k));
            } else if (d.is_object()) {
                for (const auto& [k, v] : d.items()) out.push_back(k);
            } else {
                fail(line, "list of " + shown(d));
            }
            return Value(out);
        }
        if (name == "reverse") {
            if (d.is_string()) {
                const Chars chars(d.get_ref<const std::string&>());
                std::string out;
                out.reserve(d.get_ref<const std::string&>().size());
                for (size_t k = chars.size(); k-- > 0;) out += chars.at(k);
                return Value(Data(out));
            }
            if (!d.is_array()) fail(line, "reverse of " + shown(d));
            return Value(Data(Data::array_t(d.rbegin(), d.rend())));
        }
        if (name == "join") {
            const std::optional<Data> separator = keyword("d", 0);
            const std::string sep = separator ? as_string(*separator, "join's separator", line) : "";
            const std::optional<Data> attribute = keyword("attribute", 1);
            std::string out;
            if (!d.is_array()) fail(line, "join of " + shown(d));
            for (size_t k = 0; k < d.size(); ++k) {
                Value item(d[k]);
                if (attribute) item = member(item, *attribute, line);
                const std::string text = to_text(item);
                may_grow(out.size(), (k ? sep.size() : 0) + text.size(), line);  // a long list and a long separator
                if (k) out += sep;
                out += text;
            }
            charge(d.size(), line);
            return Value(Data(out));
        }
        if (name == "int") {
            if (d.is_number_integer()) return Value(Data(as_integer(d, "int", line)));
            if (d.is_number()) return Value(Data(float_to_integer(d.get<double>(), line)));
            // Jinja2's int: int(text), else int(float(text)), else 0; a bound past 64 bits is an error, not 0.
            const std::string text = strip(to_text(value), kWhitespace, true, true);
            errno = 0;
            char* end = nullptr;
            const long long i = std::strtoll(text.c_str(), &end, 10);
            if (!text.empty() && end == text.c_str() + text.size()) {
                if (errno == ERANGE) fail(line, "int: " + shown(Data(text)) + " is beyond 64 bits");
                return Value(Data(static_cast<int64_t>(i)));
            }
            const double x = std::strtod(text.c_str(), &end);
            if (!text.empty() && end == text.c_str() + text.size() && !std::isnan(x))
                return Value(Data(float_to_integer(x, line)));
            return Value(Data(int64_t{0}));
        }
        if (name == "float") {
            if (d.is_number()) return Value(Data(d.get<double>()));
            const std::string text = to_text(value);
            char* end = nullptr;
            const double x = std::strtod(text.c_str(), &end);  // std::stod throws its own error past DBL_MAX
            return Value(Data(end != text.c_str() ? x : 0.0));
        }
        if (name == "abs") {
            if (d.is_number_integer()) {
                const int64_t i = as_integer(d, "abs", line);
                return Value(Data(checked(i == INT64_MIN, i < 0 && i != INT64_MIN ? -i : i, "abs", line)));
            }
            if (d.is_number()) return Value(Data(std::fabs(d.get<double>())));
            fail(line, "abs of " + shown(d));
        }
        if (name == "indent") {
            const std::optional<Data> width_arg = keyword("width", 0), first_arg = keyword("first", 1);
            const int64_t width = width_arg ? as_integer(*width_arg, "indent's width", line) : 4;
            const bool first = first_arg && truthy(Value(*first_arg));
            const std::string s = to_text(value);
            if (width > static_cast<int64_t>(limits_.max_value_bytes)) too_large(line);
            const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
            std::string out = first && !s.empty() ? pad : "";
            for (size_t k = 0; k < s.size(); ++k) {
                out += s[k];
                if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') {
                    may_grow(out.size(), pad.size(), line);
                    out += pad;
                }
            }
            charge(out.size() / kBytesPerStep, line);
            return Value(Data(out));
        }
        if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
            if (!d.is_array()) fail(line, name + " of " + shown(d));
            const bool by_attribute = name == "selectattr" || name == "rejectattr";
            const bool keep_true = name == "selectattr" || name == "select";
            size_t k = 0;
            std::string attribute;
            if (by_attribute) attribute = as_string(positional(args, k++, name, line), name + "'s attribute", line);
            Data out = Data::array();
            for (const auto& item : d) {
                charge(1, line);
                Value subject = by_attribute ? member(Value(item), Data(attribute), line) : Value(item);
                bool hit;
                if (k < args.size()) {
                    const std::string& test_name = as_string(args[k].second.data, name + "'s test", line);
                    Arguments rest(args.begin() + static_cast<long>(k) + 1, args.end());
                    hit = named_test(test_name, subject, rest, line);
                } else {
                    hit = truthy(subject);
                }
                if (hit == keep_true) out.push_back(item);
            }
            return Value(out);
        }
        if (name == "map") {
            if (!d.is_array()) fail(line, "map of " + shown(d));
            Data out = Data::array();
            const std::optional<Data> attribute = keyword("attribute", 99);
            if (!attribute) fail(line, "map() takes attribute=... here");
            const Data fallback = keyword("default", 99).value_or(Data());
            size_t bytes = kItemBytes;
            for (const auto& item : d) {
                Value v = member(Value(item), *attribute, line);
                bytes = weigh(v.defined ? v.data : fallback, 1, bytes);  // a long list times a large default
                out.push_back(v.defined ? v.data : fallback);
            }
            return Value(out);
        }
        if (name == "unique") {
            if (!d.is_array()) fail(line, "unique of " + shown(d));
            Data out = Data::array();
            for (const auto& item : d) {
                charge(1 + out.size(), line);  // quadratic: each item against those kept
                if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
            }
            return Value(out);
        }
        if (name == "round") {
            const std::optional<Data> precision_arg = keyword("precision", 0);
            const int64_t precision = precision_arg ? as_integer(*precision_arg, "round's precision", line) : 0;
            const double x = as_number(d, "round's value", line);
            const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -400, 400)));
            const double rounded = std::round(x * scale) / scale;
            return Value(Data(std::isfinite(rounded) || !std::isfinite(x) ? rounded : x));
        }
        fail(line, "the filter '" + name + "' is not supported");
    }

    // int(x) of a float: Python's is exact at any size; here past 64 bits is an error (and NaN, as Jinja2's, is 0).
    static int64_t float_to_integer(double x, int line) {
        if (std::isnan(x)) return 0;
        if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0))  // [-2**63, 2**63) after truncation
            if (std::trunc(x) != -9223372036854775808.0) fail(line, "int: " + python_float(x) + " is beyond 64 bits");
        return static_cast<int64_t>(x);
    }

    [[gnu::noinline]] Value test(const Node& node) {
        const Value value = eval(*node.kids[0]);
        const bool result = named_test(node.text, value, arguments(node, 1), node.line);
        return Value(Data(node.negated ? !result : result));
    }

    bool named_test(const std::string& name, const Value& value, const Arguments& args, int line) {
        const Data& d = value.data;
        if (name == "defined") return value.defined;
        if (name == "undefined") return !value.defined;
        if (name == "none") return value.defined && d.is_null();
        if (name == "string") return value.defined && d.is_string();
        if (name == "number") return value.defined && d.is_number() && !d.is_boolean();
        if (name == "integer") return value.defined && d.is_number_integer();
        if (name == "float") return value.defined && d.is_number_float();
        if (name == "boolean") return value.defined && d.is_boolean();
        if (name == "true") return value.defined && d.is_boolean() && d.get<bool>();
        if (name == "false") return value.defined && d.is_boolean() && !d.get<bool>();
        if (name == "mapping") return value.defined && d.is_object();
        if (name == "sequence" || name == "iterable")
            return value.defined && (d.is_array() || d.is_string() || d.is_object());
        if (name == "callable") return value.function != nullptr;
        if (name == "odd" || name == "even") {
            if (!d.is_number_integer()) fail(line, name + " of a non-integer");
            const bool odd = d.is_number_unsigned() ? d.get<uint64_t>() % 2 != 0 : d.get<int64_t>() % 2 != 0;
            return odd == (name == "odd");
        }
        if (name == "divisibleby") {
            const int64_t n = as_integer(positional(args, 0, name, line), "divisibleby's divisor", line);
            if (n == 0 || !d.is_number_integer()) return false;
            if (n == -1) return true;  // INT64_MIN % -1 traps
            return as_integer(d, "divisibleby", line) % n == 0;
        }
        if (name == "lower" || name == "upper") {
            if (!d.is_string()) return false;
            const std::string& s = d.get_ref<const std::string&>();
            return method(d, name, {}, line).data.get_ref<const std::string&>() == s;
        }
        if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
            return equal(value, args.empty() ? Value::undefined() : args[0].second);
        if (name == "ne" || name == "!=") return !equal(value, args.empty() ? Value::undefined() : args[0].second);
        if (name == "in") {
            const Data& within = positional(args, 0, name, line);
            if (within.is_array()) {
                charge(within.size(), line);
                return std::find(within.begin(), within.end(), d) != within.end();
            }
            if (within.is_object()) return d.is_string() && within.contains(d.get<std::string>());
            if (within.is_string() && d.is_string())
                return within.get_ref<const std::string&>().find(d.get_ref<const std::string&>()) != std::string::npos;
            return false;
        }
        fail(line, "the test '" + name + "' is not supported");
    }

    const RenderLimits& limits_;
    std::vector<Scope> scopes_;
    Flow flow_ = Flow::normal;
    uint64_t steps_ = 0;
    uint64_t next_poll_ = kPollSteps;
    int depth_ = 0;         // the renderer's recursion
    int calls_ = 0;         // macro calls inside each other
    int line_ = 1;          // of the node being rendered, for a message
    size_t out_limit_ = 0;  // of the text being written: the output's, or a value's while capturing
    int capturing_ = 0;
};

}  // namespace

namespace {

NodePtr parse(const std::string& source) {
    try {
        return Parser(Scanner(source).scan()).parse_template();
    } catch (const JinjaError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw JinjaError("chat template: out of memory while parsing");
    } catch (const std::exception&) {
        throw JinjaError("chat template: a construct the parser does not take (an internal error of the parser)");
    }
}

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& source) : root_(parse(source)) {}
JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& variables, const RenderLimits& limits) const {
    if (!variables.is_object()) throw JinjaError("a template's variables must be a JSON object");
    // The object itself is one level (a caller's INT_MAX is taken as no bound, not wrapped).
    if (nests_deeper_than(variables, limits.max_value_depth < INT_MAX ? limits.max_value_depth + 1 : INT_MAX))
        throw JinjaError("a template's variables nest lists and objects more than " +
                         std::to_string(limits.max_value_depth) + " deep (RenderLimits::max_value_depth)");
    std::optional<Renderer> renderer;
    try {
        renderer.emplace(variables, limits);
        std::string out;
        renderer->render(*root_, out);
        return out;
    } catch (const JinjaError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw JinjaError("chat template line " + std::to_string(renderer ? renderer->line() : 1) +
                         ": out of memory while rendering");
    } catch (const std::exception&) {
        // Every operation checks its operands; this is the net under one that does not, so that a template's
        // problem is still a JinjaError, with where it happened.
        throw JinjaError("chat template line " + std::to_string(renderer ? renderer->line() : 1) +
                         ": an operation on values it does not take (an internal error of the renderer)");
    }
}

}  // namespace rudder
