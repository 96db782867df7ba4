// The filters chat templates use (`x | trim`, `x | tojson(indent=2)`), as Jinja2 and transformers define them: a table
// from the name to its function.
#include "builtins.hpp"

#include <rudder/text/utf8.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>

namespace rudder::jinja {

namespace {

using Filter = Value (*)(const Call&);

Value trim(const Call& c) {
    const std::optional<Data> chars = c.keyword("chars", 0);
    return Value(Data(
        strip(to_text(c.value), chars ? as_string(*chars, "trim's characters", c.line) : kWhitespace, true, true)));
}

Value tojson(const Call& c) {
    const std::optional<Data> indent = c.keyword("indent", 0);
    int64_t spaces = -1;  // json.dumps: no indent; an indent of 0 or less is newlines without spaces
    const size_t limit = c.renderer.limits().max_value_bytes;
    if (indent && !indent->is_null()) {
        spaces = std::max<int64_t>(0, as_integer(*indent, "tojson's indent", c.line));
        spaces = std::min<int64_t>(spaces, static_cast<int64_t>(limit));
    }
    std::string out;
    dump_json(c.value.defined ? c.data() : Data(), spaces, 0, out, limit, c.line);
    return Value(Data(out));
}

// length and count: a string's characters, a list's or dict's items; 0 for undefined.
Value length(const Call& c) {
    const Data& d = c.data();
    if (d.is_string()) return Value(Data(static_cast<int64_t>(utf8::count(d.get_ref<const std::string&>()))));
    if (d.is_array() || d.is_object()) return Value(Data(static_cast<int64_t>(d.size())));
    if (!c.value.defined) return Value(Data(int64_t{0}));
    fail(c.line, "length of " + shown(d));
}

Value as_text(const Call& c) { return Value(Data(to_text(c.value))); }

// upper, lower, title, capitalize and replace: the string method of the value's text.
Value text_method(const Call& c) {
    static const Arguments none;
    return apply_method(c.renderer, Value(Data(to_text(c.value))), c.name, c.name == "replace" ? c.args : none, c.line);
}

Value unchanged(const Call& c) { return c.value; }  // safe, escape: no autoescaping in chat templates

Value default_value(const Call& c) {
    const std::optional<Data> boolean = c.keyword("boolean", 1);
    const bool falsy_too = boolean && truthy(Value(*boolean));
    if (!c.value.defined || (falsy_too && !truthy(c.value))) return Value(c.keyword("default_value", 0).value_or(""));
    return c.value;
}

// first and last, of a list or a string's characters; undefined when empty.
Value end_item(const Call& c) {
    const Data& d = c.data();
    const bool first = c.name == "first";
    if (d.is_array()) return d.empty() ? Value::undefined() : Value(first ? d.front() : d.back());
    if (d.is_string()) {
        const Chars chars(d.get_ref<const std::string&>());
        if (chars.size() == 0) return Value::undefined();
        return Value(Data(chars.at(first ? 0 : chars.size() - 1)));
    }
    fail(c.line, c.name + " of " + shown(d));
}

Value dict_items(const Call& c) {
    static const Arguments none;
    return apply_method(c.renderer, c.data().is_null() ? Value(Data::object()) : c.value, "items", none, c.line);
}

Value list(const Call& c) {
    const Data& d = c.data();
    if (d.is_array()) return c.value;
    Data out = Data::array();
    if (d.is_string()) {
        const Chars chars(d.get_ref<const std::string&>());
        c.renderer.may_grow(d.get_ref<const std::string&>().size(), chars.size() * kItemBytes, c.line);  // first
        for (size_t k = 0; k < chars.size(); ++k) out.push_back(chars.at(k));
    } else if (d.is_object()) {
        for (const auto& [k, v] : d.items()) out.push_back(k);
    } else {
        fail(c.line, "list of " + shown(d));
    }
    return Value(out);
}

Value reverse(const Call& c) {
    const Data& d = c.data();
    if (d.is_string()) {
        const Chars chars(d.get_ref<const std::string&>());
        std::string out;
        out.reserve(d.get_ref<const std::string&>().size());
        for (size_t k = chars.size(); k-- > 0;) out += chars.at(k);
        return Value(Data(out));
    }
    if (!d.is_array()) fail(c.line, "reverse of " + shown(d));
    return Value(Data(Data::array_t(d.rbegin(), d.rend())));
}

Value join(const Call& c) {
    const Data& d = c.data();
    const std::optional<Data> separator = c.keyword("d", 0);
    const std::string sep = separator ? as_string(*separator, "join's separator", c.line) : "";
    const std::optional<Data> attribute = c.keyword("attribute", 1);
    std::string out;
    if (!d.is_array()) fail(c.line, "join of " + shown(d));
    for (size_t k = 0; k < d.size(); ++k) {
        Value item(d[k]);
        if (attribute) item = c.renderer.member(item, *attribute, c.line);
        const std::string text = to_text(item);
        c.renderer.may_grow(out.size(), (k ? sep.size() : 0) + text.size(), c.line);  // a long list, a long separator
        if (k) out += sep;
        out += text;
    }
    c.renderer.charge(d.size(), c.line);
    return Value(Data(out));
}

// int(x) of a float: Python's is exact at any size; here past 64 bits is an error (and NaN, as Jinja2's, is 0).
int64_t float_to_integer(double x, int line) {
    if (std::isnan(x)) return 0;
    if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0))  // [-2**63, 2**63) after truncation
        if (std::trunc(x) != -9223372036854775808.0) fail(line, "int: " + python_float(x) + " is beyond 64 bits");
    return static_cast<int64_t>(x);
}

Value to_int(const Call& c) {
    const Data& d = c.data();
    if (d.is_number_integer()) return Value(Data(as_integer(d, "int", c.line)));
    if (d.is_number()) return Value(Data(float_to_integer(d.get<double>(), c.line)));
    // Jinja2's int: int(text), else int(float(text)), else 0; a bound past 64 bits is an error, not 0.
    const std::string text = strip(to_text(c.value), kWhitespace, true, true);
    errno = 0;
    char* end = nullptr;
    const long long i = std::strtoll(text.c_str(), &end, 10);
    if (!text.empty() && end == text.c_str() + text.size()) {
        if (errno == ERANGE) fail(c.line, "int: " + shown(Data(text)) + " is beyond 64 bits");
        return Value(Data(static_cast<int64_t>(i)));
    }
    const double x = std::strtod(text.c_str(), &end);
    if (!text.empty() && end == text.c_str() + text.size() && !std::isnan(x))
        return Value(Data(float_to_integer(x, c.line)));
    return Value(Data(int64_t{0}));
}

Value to_float(const Call& c) {
    if (c.data().is_number()) return Value(Data(c.data().get<double>()));
    const std::string text = to_text(c.value);
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);  // std::stod throws its own error past DBL_MAX
    return Value(Data(end != text.c_str() ? x : 0.0));
}

Value absolute(const Call& c) {
    const Data& d = c.data();
    if (d.is_number_integer()) {
        const int64_t i = as_integer(d, "abs", c.line);
        return Value(Data(checked(i == INT64_MIN, i < 0 && i != INT64_MIN ? -i : i, "abs", c.line)));
    }
    if (d.is_number()) return Value(Data(std::fabs(d.get<double>())));
    fail(c.line, "abs of " + shown(d));
}

Value indent(const Call& c) {
    const std::optional<Data> width_arg = c.keyword("width", 0), first_arg = c.keyword("first", 1);
    const int64_t width = width_arg ? as_integer(*width_arg, "indent's width", c.line) : 4;
    const bool first = first_arg && truthy(Value(*first_arg));
    const std::string s = to_text(c.value);
    if (width > static_cast<int64_t>(c.renderer.limits().max_value_bytes)) c.renderer.too_large(c.line);
    const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    std::string out = first && !s.empty() ? pad : "";
    for (size_t k = 0; k < s.size(); ++k) {
        out += s[k];
        if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') {
            c.renderer.may_grow(out.size(), pad.size(), c.line);
            out += pad;
        }
    }
    c.renderer.charge(out.size() / kBytesPerStep, c.line);
    return Value(Data(out));
}

// select and reject (by the items), selectattr and rejectattr (by an attribute of them), with a test or truthiness.
Value selected(const Call& c) {
    const Data& d = c.data();
    if (!d.is_array()) fail(c.line, c.name + " of " + shown(d));
    const bool by_attribute = c.name == "selectattr" || c.name == "rejectattr";
    const bool keep_true = c.name == "selectattr" || c.name == "select";
    size_t k = 0;
    std::string attribute;
    if (by_attribute) attribute = as_string(c.positional(k++), c.name + "'s attribute", c.line);
    Data out = Data::array();
    for (const auto& item : d) {
        c.renderer.charge(1, c.line);
        Value subject = by_attribute ? c.renderer.member(Value(item), Data(attribute), c.line) : Value(item);
        bool hit;
        if (k < c.args.size()) {
            const std::string& test_name = as_string(c.args[k].second.data, c.name + "'s test", c.line);
            Arguments rest(c.args.begin() + static_cast<long>(k) + 1, c.args.end());
            hit = apply_test(c.renderer, test_name, subject, rest, c.line);
        } else {
            hit = truthy(subject);
        }
        if (hit == keep_true) out.push_back(item);
    }
    return Value(out);
}

Value map(const Call& c) {
    const Data& d = c.data();
    if (!d.is_array()) fail(c.line, "map of " + shown(d));
    Data out = Data::array();
    const std::optional<Data> attribute = c.keyword("attribute", 99);
    if (!attribute) fail(c.line, "map() takes attribute=... here");
    const Data fallback = c.keyword("default", 99).value_or(Data());
    size_t bytes = kItemBytes;
    for (const auto& item : d) {
        Value v = c.renderer.member(Value(item), *attribute, c.line);
        bytes = c.renderer.weigh(v.defined ? v.data : fallback, 1, bytes);  // a long list times a large default
        out.push_back(v.defined ? v.data : fallback);
    }
    return Value(out);
}

Value unique(const Call& c) {
    const Data& d = c.data();
    if (!d.is_array()) fail(c.line, "unique of " + shown(d));
    Data out = Data::array();
    for (const auto& item : d) {
        c.renderer.charge(1 + out.size(), c.line);  // quadratic: each item against those kept
        if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    return Value(out);
}

Value rounded(const Call& c) {
    const std::optional<Data> precision_arg = c.keyword("precision", 0);
    const int64_t precision = precision_arg ? as_integer(*precision_arg, "round's precision", c.line) : 0;
    const double x = as_number(c.data(), "round's value", c.line);
    const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -400, 400)));
    const double result = std::round(x * scale) / scale;
    return Value(Data(std::isfinite(result) || !std::isfinite(x) ? result : x));
}

const std::unordered_map<std::string, Filter>& filters() {
    static const std::unordered_map<std::string, Filter> table = {
        {"trim", trim},           {"tojson", tojson},         {"length", length},
        {"count", length},        {"string", as_text},        {"upper", text_method},
        {"lower", text_method},   {"title", text_method},     {"capitalize", text_method},
        {"replace", text_method}, {"safe", unchanged},        {"e", unchanged},
        {"escape", unchanged},    {"default", default_value}, {"d", default_value},
        {"first", end_item},      {"last", end_item},         {"items", dict_items},
        {"list", list},           {"reverse", reverse},       {"join", join},
        {"int", to_int},          {"float", to_float},        {"abs", absolute},
        {"indent", indent},       {"selectattr", selected},   {"rejectattr", selected},
        {"select", selected},     {"reject", selected},       {"map", map},
        {"unique", unique},       {"round", rounded},
    };
    return table;
}

}  // namespace

Value apply_filter(Renderer& r, const std::string& name, const Value& value, const Arguments& args, int line) {
    if (value.data.is_string()) r.charge(value.data.get_ref<const std::string&>().size() / kBytesPerStep, line);
    const auto found = filters().find(name);
    if (found == filters().end()) fail(line, "the filter '" + name + "' is not supported");
    return found->second(Call{r, name, value, args, line});
}

}  // namespace rudder::jinja
