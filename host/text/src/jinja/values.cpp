#include "values.hpp"

#include <rudder/text/utf8.hpp>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace rudder::jinja {

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

bool equal(const Value& a, const Value& b) {
    if (!a.defined || !b.defined) return a.defined == b.defined;
    return a.data == b.data;
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

std::string to_text(const Value& v) {
    if (!v.defined) return "";
    if (v.function) return "<function>";
    const Data& d = v.data;
    if (d.is_string()) return d.get<std::string>();
    return python_repr(d);
}

Chars::Chars(const std::string& s) : s_(s) {
    ascii_ = utf8::is_ascii(s);
    if (ascii_) return;
    if (s.size() > UINT32_MAX) throw JinjaError("chat template: a string of more than 4 GB");
    for (size_t i = 0; i < s.size(); i += utf8::sequence_length(s[i])) starts_.push_back(static_cast<uint32_t>(i));
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

std::string shown(const Data& d) {
    if (d.is_string() && d.get_ref<const std::string&>().size() > 200) return "a string";
    std::string s = python_repr(d);
    if (s.size() <= 60) return s;
    return s.substr(0, utf8::character_start(s, 57)) + "...";
}

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

const std::string kWhitespace = " \t\n\r\f\v";

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && chars.find(s[b]) != std::string::npos) ++b;
    if (right)
        while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
}

int64_t checked(bool overflowed, int64_t result, const char* op, int line) {
    if (overflowed) fail(line, std::string("integer overflow in '") + op + "' (integers are 64-bit here)");
    return result;
}

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

}  // namespace rudder::jinja
