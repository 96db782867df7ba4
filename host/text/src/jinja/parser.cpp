#include "parser.hpp"

#include "lexer.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <new>
#include <utility>

namespace rudder::jinja {

namespace {

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

}  // namespace

NodePtr parse(const std::string& source) {
    try {
        return Parser(scan(source)).parse_template();
    } catch (const JinjaError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw JinjaError("chat template: out of memory while parsing");
    } catch (const std::exception&) {
        throw JinjaError("chat template: a construct the parser does not take (an internal error of the parser)");
    }
}

}  // namespace rudder::jinja
