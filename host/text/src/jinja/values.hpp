// The values a Jinja template computes with: JSON (ordered objects) plus "undefined", callables and a loop's `loop`;
// what Python's str() and repr() and json.dumps write of them, their characters, and checked int64 arithmetic.
#pragma once

#include "ast.hpp"
#include "lexer.hpp"  // fail

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rudder::jinja {

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

bool truthy(const Value& v);
// Jinja2's ==: undefined equals only undefined.
bool equal(const Value& a, const Value& b);
// float's str() as Python writes it: the shortest text that reads back ("0.1", "1e+16", "inf").
std::string python_float(double x);
// str(x) as Python writes it, which is what Jinja2 outputs.
std::string to_text(const Value& v);
std::string python_repr(const Data& d);
// A value in a message: its repr, cut short at a character's boundary (a message is no place for a 16 MB value).
std::string shown(const Data& d);

// The UTF-8 characters of a string, for iteration, indexing and slicing, without a string per character (a 16 MB
// string would be a gigabyte of them): ASCII is indexed as bytes, anything else through the characters' offsets.
class Chars {
public:
    explicit Chars(const std::string& s);
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

// The checked reads of an argument or operand: a JinjaError naming `what`, never a JSON library's type error.
const std::string& as_string(const Data& d, const std::string& what, int line);
int64_t as_integer(const Data& d, const std::string& what, int line);
double as_number(const Data& d, const std::string& what, int line);

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson writes it: ", " and ": " without an
// indent (-1), "," and ": " with one; `limit` bounds the text (a large indent times a deep value is large).
void dump_json(const Data& d, int64_t indent, int64_t depth, std::string& out, size_t limit, int line);

extern const std::string kWhitespace;  // Python's str.strip() characters
std::string strip(const std::string& s, const std::string& chars, bool left, bool right);

// Checked int64 arithmetic: Python's integers have no bound, these have 64 bits, so a result past them is an error
// rather than a wrapped number (or, for INT64_MIN // -1, SIGFPE).
int64_t checked(bool overflowed, int64_t result, const char* op, int line);
// Python's floor division and modulo (the remainder takes the divisor's sign).
std::pair<int64_t, int64_t> floor_divide(int64_t x, int64_t y, const char* op, int line);
int64_t integer_power(int64_t base, int64_t exponent, int line);

}  // namespace rudder::jinja
