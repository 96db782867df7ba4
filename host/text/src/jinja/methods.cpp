// Python's methods of strings and dicts that chat templates call (`s.strip()`, `d.items()`), a table for each type.
#include "builtins.hpp"

#include <cctype>
#include <string>
#include <unordered_map>
#include <vector>

namespace rudder::jinja {

namespace {

using Method = Value (*)(const Call&);
using Table = std::unordered_map<std::string, Method>;

const std::string& self_text(const Call& c) { return c.data().get_ref<const std::string&>(); }

// The characters strip(), lstrip() and rstrip() take away: their argument, whitespace without one (or with None).
std::string strip_chars(const Call& c) {
    return c.args.empty() || c.args[0].second.data.is_null()
               ? kWhitespace
               : as_string(c.args[0].second.data, c.name + "()'s characters", c.line);
}

Value strip_both(const Call& c) { return Value(Data(strip(self_text(c), strip_chars(c), true, true))); }
Value strip_left(const Call& c) { return Value(Data(strip(self_text(c), strip_chars(c), true, false))); }
Value strip_right(const Call& c) { return Value(Data(strip(self_text(c), strip_chars(c), false, true))); }

// upper() and lower(): ASCII letters only, as the C locale has them.
Value change_case(const Call& c) {
    std::string out = self_text(c);
    for (char& ch : out) {
        const unsigned char u = static_cast<unsigned char>(ch);
        ch = static_cast<char>(c.name == "upper" ? std::toupper(u) : std::tolower(u));
    }
    return Value(Data(out));
}

// title() (every word) and capitalize() (the first letter only), the rest lower-cased.
Value capitalised(const Call& c) {
    const bool every_word = c.name == "title";
    std::string out = self_text(c);
    bool start = true;
    for (char& ch : out) {
        const unsigned char u = static_cast<unsigned char>(ch);
        ch = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = every_word ? !std::isalpha(u) : false;
    }
    return Value(Data(out));
}

// startswith() and endswith(), of a string or of any of a list of them.
Value affixed(const Call& c) {
    const std::string& s = self_text(c);
    const Data& what = c.positional(0);
    std::vector<std::string> options;
    if (what.is_array())
        for (const auto& o : what) options.push_back(as_string(o, c.name + "()'s argument", c.line));
    else
        options.push_back(as_string(what, c.name + "()'s argument", c.line));
    for (const auto& o : options) {
        const bool hit =
            o.size() <= s.size() && (c.name == "startswith" ? s.compare(0, o.size(), o) == 0
                                                            : s.compare(s.size() - o.size(), o.size(), o) == 0);
        if (hit) return Value(Data(true));
    }
    return Value(Data(false));
}

Value split(const Call& c) {
    const std::string& s = self_text(c);
    Data out = Data::array();
    size_t bytes = kItemBytes;
    const auto piece = [&](std::string text) {  // a piece weighs its item besides its text: split('') of 16 MB
        c.renderer.may_grow(bytes, kItemBytes + text.size(), c.line);
        bytes += kItemBytes + text.size();
        out.push_back(std::move(text));
    };
    const bool by_whitespace = c.args.empty() || c.args[0].second.data.is_null();
    const int64_t max_splits = c.args.size() > 1 ? as_integer(c.args[1].second.data, "split()'s count", c.line) : -1;
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
        return Value(out);
    }
    const std::string& sep = as_string(c.args[0].second.data, "split()'s separator", c.line);
    if (sep.empty()) fail(c.line, "split() with an empty separator");
    size_t p = 0;
    int64_t splits = 0;
    for (size_t q = s.find(sep); q != std::string::npos && (max_splits < 0 || splits < max_splits);
         q = s.find(sep, p), ++splits) {
        piece(s.substr(p, q - p));
        p = q + sep.size();
    }
    piece(s.substr(p));
    return Value(out);
}

Value replace(const Call& c) {
    const std::string& s = self_text(c);
    const std::string& from = as_string(c.positional(0), "replace()'s old text", c.line);
    const std::string& to = as_string(c.positional(1), "replace()'s new text", c.line);
    if (from.empty()) return Value(Data(s));
    std::string out;
    size_t p = 0;
    for (size_t q = s.find(from); q != std::string::npos; q = s.find(from, p)) {
        c.renderer.may_grow(out.size(), q - p + to.size(), c.line);  // 'a' * 100000, each 'a' made a long text
        out.append(s, p, q - p);
        out += to;
        p = q + from.size();
    }
    c.renderer.may_grow(out.size(), s.size() - p, c.line);
    c.renderer.charge(out.size() / kBytesPerStep, c.line);
    return Value(Data(out.append(s, p, std::string::npos)));
}

Value count(const Call& c) {
    const std::string& s = self_text(c);
    const std::string& what = as_string(c.positional(0), "count()'s argument", c.line);
    int64_t n = 0;
    if (!what.empty())
        for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
    return Value(Data(n));
}

Value find(const Call& c) {
    const size_t p = self_text(c).find(as_string(c.positional(0), "find()'s argument", c.line));
    return Value(Data(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p)));
}

Value items(const Call& c) {
    Data out = Data::array();
    for (const auto& [k, v] : c.data().items()) out.push_back(Data::array({k, v}));
    return Value(out);
}

// keys() and values(), as lists.
Value keys_or_values(const Call& c) {
    Data out = Data::array();
    for (const auto& [k, v] : c.data().items()) out.push_back(c.name == "keys" ? Data(k) : v);
    return Value(out);
}

Value get(const Call& c) {
    const Data& key = c.positional(0);
    if (key.is_string() && c.data().contains(key.get<std::string>())) return Value(c.data()[key.get<std::string>()]);
    return c.args.size() > 1 ? c.args[1].second : Value(Data());
}

const Table& string_methods() {
    static const Table table = {
        {"strip", strip_both},  {"lstrip", strip_left}, {"rstrip", strip_right},     {"upper", change_case},
        {"lower", change_case}, {"title", capitalised}, {"capitalize", capitalised}, {"startswith", affixed},
        {"endswith", affixed},  {"split", split},       {"replace", replace},        {"count", count},
        {"find", find},
    };
    return table;
}

const Table& dict_methods() {
    static const Table table = {{"items", items}, {"keys", keys_or_values}, {"values", keys_or_values}, {"get", get}};
    return table;
}

}  // namespace

Value apply_method(Renderer& r, const Value& self, const std::string& name, const Arguments& args, int line) {
    const Data& d = self.data;
    const Table* table = nullptr;
    if (d.is_string()) {
        r.charge(d.get_ref<const std::string&>().size() / kBytesPerStep, line);
        table = &string_methods();
    } else if (d.is_object()) {
        table = &dict_methods();
    }
    if (table != nullptr) {
        const auto found = table->find(name);
        if (found != table->end()) return found->second(Call{r, name, self, args, line});
    }
    fail(line, "no method '" + name + "' of " + shown(d));
}

}  // namespace rudder::jinja
