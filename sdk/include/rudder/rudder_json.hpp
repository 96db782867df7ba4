// Reading JSON objects that people write (recipes, model and training configs, a controller's params) with every
// problem found in one pass: each names the JSON pointer of the value and what was expected, and a misspelt key or
// name gets a "did you mean". Rudder reads all of its JSON input through this header, and the first-party
// controllers read their params with it, so one mistake is reported the same way wherever it is made.
//
// Header-only C++17 on nlohmann/json (Debian: nlohmann-json3-dev; link nlohmann_json::nlohmann_json). It is a
// helper, not part of the plugin ABI: a controller may read its params any way it likes.
//
//     std::vector<rudder::json_input::Issue> issues;
//     rudder::json_input::ObjectReader r(params, "", issues);        // "" = the document's root
//     const int64_t tokens = r.integer("tokens", 1, 4096, rudder::json_input::kRequired).value_or(1);
//     const std::string mode = r.choice("mode", {"soft", "hard"}).value_or("soft");
//     r.reject_unknown_keys();                                        // after every key has been asked for
//     if (!issues.empty()) throw rudder::Error(rudder::json_input::describe(issues));
//
// Messages: "missing; expected an integer in [1, 4096] (required)", "expected a number in [0, 1], got \"high\"",
// "expected one of \"soft\", \"hard\", got \"sfot\"; did you mean \"soft\"?", "unknown key 'tokns'; did you mean
// 'tokens'?". Values are shown as JSON (cut at 60 characters), key names in single quotes.
//
// A document whose key order matters (a recipe, a request, a JSON Schema, a chat template's variables) is read as a
// rudder::JsonDocument with parse_document() and read with a DocumentReader: the same checks and messages, and the
// keys stay in the order the text gives them.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rudder {

// The host's JSON documents: recipes, request bodies, OpenAI bodies, JSON Schemas, a chat template's variables. Keys
// keep the text's order (a schema's properties are written in the order it gives; a controller's params are handed
// on as they were written), so each document is parsed once and never sorted and re-ordered. Lookups in it are
// linear: large lookup tables (a tokenizer's vocab.json, a safetensors header, a weight index) stay nlohmann::json,
// a sorted map with logarithmic lookups.
using JsonDocument = nlohmann::ordered_json;

}  // namespace rudder

namespace rudder::json_input {

// One problem: where (a JSON pointer; "" for the whole document) and what.
struct Issue {
    std::string pointer;
    std::string message;
};

// One "<pointer>: <message>" line per issue; `root` stands for the pointer "".
inline std::string describe(const std::vector<Issue>& issues, const std::string& root = "(document)") {
    std::string out;
    for (const auto& issue : issues)
        out += (out.empty() ? "" : "\n") + (issue.pointer.empty() ? root : issue.pointer) + ": " + issue.message;
    return out;
}

// ----- parsing ---------------------------------------------------------------------------------------------------

// The deepest nesting of objects and arrays a document may have. Recipes and configs nest a few levels; a document
// nested 100,000 deep (200 KB of brackets) would overflow the stack when it is later copied or destroyed, so
// deeper ones are refused while they are parsed.
constexpr int kMaxDepth = 100;

// A well-formed document parse() does not accept; pointer() says where (a JSON pointer, "" for the whole).
class Refused : public std::invalid_argument {
public:
    Refused(std::string pointer, const std::string& message)
        : std::invalid_argument(message), pointer_(std::move(pointer)) {}
    const std::string& pointer() const { return pointer_; }

private:
    std::string pointer_;
};

// Thrown by parse() for a document nested deeper than its limit.
class TooDeep : public Refused {
public:
    explicit TooDeep(int max_depth)
        : Refused("", "nested deeper than " + std::to_string(max_depth) + " levels of objects and arrays") {}
};

namespace detail {

// "~" and "/" escaped as a JSON pointer token needs.
inline std::string pointer_token(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
    return out;
}

// What is wrong with a string of the document, or "": a NUL (which would cut the string short wherever it is
// handed on as C text, error messages included) or a bidirectional override (U+202A-U+202E, U+2066-U+2069), which
// makes a name display as another ("Trojan Source").
inline std::string string_problem(const std::string& text) {
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == 0) return "holds a NUL character (\\u0000)";
        if (c == 0xE2 && i + 2 < text.size()) {
            const auto b = static_cast<unsigned char>(text[i + 1]), d = static_cast<unsigned char>(text[i + 2]);
            if ((b == 0x80 && d >= 0xAA && d <= 0xAE) || (b == 0x81 && d >= 0xA6 && d <= 0xA9)) {
                char code[8];
                std::snprintf(code, sizeof code, "%04X", b == 0x80 ? 0x2000 + (d - 0x80) : 0x2040 + (d - 0x80));
                return std::string("holds the bidirectional control U+") + code +
                       ", which makes text display otherwise than it reads";
            }
        }
    }
    return "";
}

}  // namespace detail

// Json::parse (Json: nlohmann::json or JsonDocument) that also refuses, with a Refused naming the place: nesting
// deeper than `max_depth` (TooDeep), a key given twice in one object (nlohmann would silently keep the last), and,
// when `check_strings`, keys and strings holding a NUL or a bidirectional override. Throws nlohmann's parse errors
// (the same types for both) for malformed text.
template <class Json>
Json parse_as(const std::string& text, int max_depth = kMaxDepth, bool check_strings = true) {
    struct Frame {
        bool object;
        std::string key;     // the object's current key
        int64_t index = -1;  // the array's current element
        std::unordered_set<std::string> keys;
    };
    std::vector<Frame> frames;
    auto pointer = [&frames](size_t depth) {
        std::string out;
        for (size_t i = 0; i < depth && i < frames.size(); ++i)
            out += "/" + (frames[i].object ? detail::pointer_token(frames[i].key) : std::to_string(frames[i].index));
        return out;
    };
    auto element_starts = [&frames] {
        if (!frames.empty() && !frames.back().object) ++frames.back().index;
    };
    using Event = typename Json::parse_event_t;
    return Json::parse(text, [&](int depth, Event event, Json& parsed) {
        if (depth > max_depth) throw TooDeep(max_depth);
        switch (event) {
            case Event::object_start:
            case Event::array_start:
                element_starts();
                frames.push_back(Frame{event == Event::object_start, "", -1, {}});
                break;
            case Event::object_end:
            case Event::array_end:
                if (!frames.empty()) frames.pop_back();
                break;
            case Event::key: {
                Frame& object = frames.back();
                object.key = parsed.template get<std::string>();
                if (check_strings) {
                    const std::string problem = detail::string_problem(object.key);
                    if (!problem.empty()) throw Refused(pointer(frames.size() - 1), "a key " + problem);
                }
                if (!object.keys.insert(object.key).second)
                    throw Refused(pointer(frames.size()), "given twice in the same object (only one would be kept)");
                break;
            }
            case Event::value:
                element_starts();
                if (check_strings && parsed.is_string()) {
                    const std::string problem = detail::string_problem(parsed.template get_ref<const std::string&>());
                    if (!problem.empty()) throw Refused(pointer(frames.size()), "the string " + problem);
                }
                break;
        }
        return true;
    });
}

// parse_as with keys sorted (nlohmann::json): configs, tables looked up by key, a plugin's params.
inline nlohmann::json parse(const std::string& text, int max_depth = kMaxDepth, bool check_strings = true) {
    return parse_as<nlohmann::json>(text, max_depth, check_strings);
}

// parse_as with keys in the text's order: the host's documents (JsonDocument).
inline JsonDocument parse_document(const std::string& text, int max_depth = kMaxDepth, bool check_strings = true) {
    return parse_as<JsonDocument>(text, max_depth, check_strings);
}

// ----- "did you mean" --------------------------------------------------------------------------------------------

// The longest model or plugin name or path, controller name, or other name a host looks up (PATH_MAX): a longer one
// cannot name a file, and is refused before any lookup or "did you mean" runs on it.
constexpr size_t kMaxNameBytes = 4096;

// Edit distance in which inserting, deleting or changing a character, or swapping two neighbours, costs one
// (optimal string alignment: Levenshtein plus the commonest typo, "lenght"). Three rows of b's length, not a matrix.
inline size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        current[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            current[j] =
                std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                current[j] = std::min(current[j], before[j - 2] + 1);
        }
        std::swap(before, previous);
        std::swap(previous, current);
    }
    return previous[b.size()];
}

// Candidates within two edits of `name`, or one a prefix of the other; nearest first, at most `limit`. Strings whose
// lengths differ by more than two are more than two edits apart, so their distance is never computed.
inline std::vector<std::string> near_misses(const std::string& name, const std::vector<std::string>& candidates,
                                            size_t limit = 3) {
    std::vector<std::pair<size_t, std::string>> scored;
    for (const auto& candidate : candidates) {
        const size_t gap =
            name.size() > candidate.size() ? name.size() - candidate.size() : candidate.size() - name.size();
        const size_t distance = gap > 2 ? gap : edit_distance(name, candidate);
        const bool prefix = !name.empty() && (candidate.rfind(name, 0) == 0 || name.rfind(candidate, 0) == 0);
        if (distance <= 2 || prefix) scored.emplace_back(distance, candidate);
    }
    std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<std::string> names;
    for (size_t i = 0; i < scored.size() && i < limit; ++i) names.push_back(scored[i].second);
    return names;
}

// The nearest of near_misses(), or "" when there is none.
inline std::string closest_match(const std::string& name, const std::vector<std::string>& candidates) {
    const auto best = near_misses(name, candidates, 1);
    return best.empty() ? std::string() : best.front();
}

// ----- reading one object ----------------------------------------------------------------------------------------

// A value as a message shows it: its JSON text, cut to 60 characters.
inline std::string shown(const nlohmann::json& value) {
    std::string text = value.dump();
    return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}
// The same for a document's value: an object's keys shown sorted, as for nlohmann::json, so that one value is shown
// one way wherever it was read.
inline std::string shown(const JsonDocument& value) { return shown(nlohmann::json(value)); }

// A key as one token of a JSON pointer ("~" and "/" escaped, RFC 6901).
inline std::string pointer_token(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
}

enum class Need { optional, required };
constexpr Need kOptional = Need::optional;
constexpr Need kRequired = Need::required;

// Reads the keys of one JSON object. Each getter returns the value when it is present and valid; otherwise it
// records an issue (wrong type, out of range, or missing with kRequired) and returns std::nullopt, so reading goes
// on and every problem is found in one pass. A missing optional key is std::nullopt without an issue: the caller
// keeps its default (`.value_or(default)`). A value that is not an object is itself one issue, and then every key
// reads as missing without further issues. Json is nlohmann::json (ObjectReader) or JsonDocument (DocumentReader);
// the messages are the same for both, unknown keys reported in sorted order.
template <class Json>
class BasicObjectReader {
public:
    // `pointer`: where the object sits in its document, e.g. "/sampler" ("" for the root). `issues` must outlive
    // the reader. The object is copied: readers are often made from temporaries.
    BasicObjectReader(const Json& value, std::string pointer, std::vector<Issue>& issues)
        : value_(value), pointer_(std::move(pointer)), issues_(issues), is_object_(value.is_object()) {
        if (!is_object_) issues_.push_back({pointer_, "expected an object, got " + shown(value)});
    }

    bool is_object() const { return is_object_; }
    bool has(const std::string& key) const { return is_object_ && value_.contains(key); }
    const Json& value() const { return value_; }
    const std::string& pointer() const { return pointer_; }
    std::string pointer(const std::string& key) const { return pointer_ + "/" + pointer_token(key); }
    // Records a problem at this object's `key`.
    void issue(const std::string& key, const std::string& message) { issues_.push_back({pointer(key), message}); }
    // Where the problems go: a reader for a nested object shares them.
    std::vector<Issue>& issues() { return issues_; }

    // An integer in [lo, hi]. 3.0 reads as 3: JSON writers differ on whether integral numbers get a ".0".
    std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi, Need need = kOptional) {
        const std::string expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        const Json* v = field(key, need, expected);
        if (!v) return std::nullopt;
        // Compared as integers: through a double, 2^63 would pass for 2^63 - 1.
        std::optional<int64_t> value;
        if (v->is_number_unsigned()) {
            if (v->template get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX))
                value = static_cast<int64_t>(v->template get<uint64_t>());
        } else if (v->is_number_integer()) {
            value = v->template get<int64_t>();
        } else if (v->is_number_float()) {
            const double d = v->template get<double>();
            constexpr double kTwo63 = 9223372036854775808.0;
            if (std::floor(d) == d && d >= -kTwo63 && d < kTwo63) value = static_cast<int64_t>(d);
        }
        if (value && *value >= lo && *value <= hi) return value;
        return wrong<int64_t>(key, expected, *v);
    }

    // A finite number in [lo, hi].
    std::optional<double> number(const std::string& key, double lo, double hi, Need need = kOptional) {
        const std::string expected = "a number in [" + number_text(lo) + ", " + number_text(hi) + "]";
        const Json* v = field(key, need, expected);
        if (!v) return std::nullopt;
        if (v->is_number() && std::isfinite(v->template get<double>()) && v->template get<double>() >= lo &&
            v->template get<double>() <= hi)
            return v->template get<double>();
        return wrong<double>(key, expected, *v);
    }

    // A number in (0, hi].
    std::optional<double> positive(const std::string& key, double hi, Need need = kOptional) {
        const std::string expected = "a number > 0 and <= " + number_text(hi);
        const Json* v = field(key, need, expected);
        if (!v) return std::nullopt;
        if (v->is_number() && v->template get<double>() > 0 && v->template get<double>() <= hi)
            return v->template get<double>();
        return wrong<double>(key, expected, *v);
    }

    std::optional<bool> boolean(const std::string& key, Need need = kOptional) {
        const Json* v = field(key, need, "true or false");
        if (!v) return std::nullopt;
        if (v->is_boolean()) return v->template get<bool>();
        return wrong<bool>(key, "true or false", *v);
    }

    // A string with something other than white space in it.
    std::optional<std::string> text(const std::string& key, Need need = kOptional) {
        const Json* v = field(key, need, "a string");
        if (!v) return std::nullopt;
        if (!v->is_string()) return wrong<std::string>(key, "a string", *v);
        if (v->template get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos)
            return wrong<std::string>(key, "a non-empty string", *v);
        return v->template get<std::string>();
    }

    // One of `options`, with "did you mean" for a near miss.
    std::optional<std::string> choice(const std::string& key, const std::vector<std::string>& options,
                                      Need need = kOptional) {
        std::string expected = "one of";
        for (size_t i = 0; i < options.size(); ++i) expected += (i ? ", " : " ") + nlohmann::json(options[i]).dump();
        const Json* v = field(key, need, expected);
        if (!v) return std::nullopt;
        if (v->is_string() &&
            std::find(options.begin(), options.end(), v->template get<std::string>()) != options.end())
            return v->template get<std::string>();
        std::string message = "expected " + expected + ", got " + shown(*v);
        if (v->is_string()) {
            const std::string guess = closest_match(v->template get<std::string>(), options);
            if (!guess.empty()) message += "; did you mean " + nlohmann::json(guess).dump() + "?";
        }
        issue(key, message);
        return std::nullopt;
    }

    // An array of distinct non-empty strings.
    std::optional<std::vector<std::string>> texts(const std::string& key, Need need = kOptional) {
        const std::string expected = "an array of distinct non-empty strings";
        const Json* v = field(key, need, expected);
        if (!v) return std::nullopt;
        std::vector<std::string> out;
        bool ok = v->is_array();
        for (size_t i = 0; ok && i < v->size(); ++i) {
            const Json& item = (*v)[i];
            ok = item.is_string() && !item.template get<std::string>().empty() &&
                 std::find(out.begin(), out.end(), item.template get<std::string>()) == out.end();
            if (ok) out.push_back(item.template get<std::string>());
        }
        if (ok) return out;
        return wrong<std::vector<std::string>>(key, expected, *v);
    }

    // An object, or an array, as it is (read it with another ObjectReader at pointer(key)).
    std::optional<Json> object(const std::string& key, Need need = kOptional) {
        return of_type(key, need, "an object", &Json::is_object);
    }
    std::optional<Json> array(const std::string& key, Need need = kOptional) {
        return of_type(key, need, "an array", &Json::is_array);
    }
    // Any value: the caller checks it. Marks the key as known.
    const Json* any(const std::string& key, Need need = kOptional, const std::string& expected = "a value") {
        return field(key, need, expected);
    }

    // Reports every key that none of the calls above asked for, with the closest known key or the list of them.
    void reject_unknown_keys() {
        if (!is_object_) return;
        std::vector<std::string> unknown;
        for (auto it = value_.begin(); it != value_.end(); ++it)
            if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) unknown.push_back(it.key());
        std::sort(unknown.begin(), unknown.end());  // a document's keys come in its order; the messages, sorted
        for (const std::string& key : unknown) {
            std::string message = "unknown key '" + key + "'";
            const std::string guess = closest_match(key, known_);
            if (!guess.empty()) {
                message += "; did you mean '" + guess + "'?";
            } else if (!known_.empty()) {
                message += " (allowed:";
                for (size_t i = 0; i < known_.size(); ++i) message += (i ? ", '" : " '") + known_[i] + "'";
                message += ")";
            }
            issue(key, message);
        }
    }

private:
    static std::string number_text(double d) {
        std::ostringstream out;
        out << d;
        return out.str();
    }

    const Json* field(const std::string& key, Need need, const std::string& expected) {
        if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
        if (!is_object_) return nullptr;
        auto it = value_.find(key);
        if (it == value_.end()) {
            if (need == kRequired) issue(key, "missing; expected " + expected + " (required)");
            return nullptr;
        }
        return &*it;
    }

    template <class T>
    std::optional<T> wrong(const std::string& key, const std::string& expected, const Json& v) {
        issue(key, "expected " + expected + ", got " + shown(v));
        return std::nullopt;
    }

    std::optional<Json> of_type(const std::string& key, Need need, const std::string& expected,
                                bool (Json::*is)() const noexcept) {
        const Json* v = field(key, need, expected);
        if (!v) return std::nullopt;
        if (((*v).*is)()) return *v;
        return wrong<Json>(key, expected, *v);
    }

    Json value_;
    std::string pointer_;
    std::vector<Issue>& issues_;
    std::vector<std::string> known_;
    bool is_object_;
};

using ObjectReader = BasicObjectReader<nlohmann::json>;
using DocumentReader = BasicObjectReader<JsonDocument>;

}  // namespace rudder::json_input
