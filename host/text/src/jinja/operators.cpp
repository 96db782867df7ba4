#include "renderer.hpp"

#include <algorithm>
#include <cmath>

namespace rudder::jinja {

Value Renderer::unary(const Node& node) {
    const Value x = eval(*node.kids[0]);
    if (node.text == "not") return Value(Data(!truthy(x)));
    if (!x.data.is_number()) fail(node.line, "unary " + node.text + " of a non-number");
    if (node.text == "+") return x;
    if (x.data.is_number_float()) return Value(Data(-x.data.get<double>()));
    const int64_t i = as_integer(x.data, "unary -", node.line);
    return Value(Data(checked(i == INT64_MIN, i == INT64_MIN ? 0 : -i, "unary -", node.line)));
}

Value Renderer::binary(const Node& node) {
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

}  // namespace rudder::jinja
