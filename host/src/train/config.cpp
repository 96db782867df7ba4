#include "train/config.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <rudder/plugins/suggest.hpp>

#include "meaning.hpp"  // controllers/common: E2E meaning representations

namespace rudder::train {
using json = nlohmann::json;

namespace {

std::string describe_issues(const std::string& source, const std::vector<ConfigIssue>& issues) {
    std::string text = source + ": invalid config (" + std::to_string(issues.size()) +
                       (issues.size() == 1 ? " problem)" : " problems)");
    for (const auto& issue : issues)
        text += "\n  " + (issue.pointer.empty() ? std::string("(config)") : issue.pointer) + ": " + issue.message;
    return text;
}

std::string shown(const json& v) {
    std::string text = v.dump();
    return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

std::string number_text(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

}  // namespace

ConfigError::ConfigError(std::string source, std::vector<ConfigIssue> issues)
    : std::runtime_error(describe_issues(source, issues)), source_(std::move(source)), issues_(std::move(issues)) {}

ObjectReader::ObjectReader(const json& value, std::string pointer, std::vector<ConfigIssue>& issues)
    : value_(value), pointer_(std::move(pointer)), issues_(issues), is_object_(value.is_object()) {
    if (!is_object_) issues_.push_back({pointer_, "expected an object, got " + shown(value)});
}

bool ObjectReader::has(const std::string& key) const { return is_object_ && value_.contains(key); }

void ObjectReader::issue(const std::string& key, const std::string& message) {
    issues_.push_back({pointer(key), message});
}

const json* ObjectReader::field(const std::string& key, bool required, const std::string& expected) {
    known_.push_back(key);
    if (!is_object_) return nullptr;
    auto it = value_.find(key);
    if (it == value_.end()) {
        if (required) issue(key, "missing; expected " + expected);
        return nullptr;
    }
    return &*it;
}

int64_t ObjectReader::integer(const std::string& key, std::optional<int64_t> fallback, int64_t min, int64_t max) {
    const std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    const json* v = field(key, !fallback, expected);
    if (!v) return fallback.value_or(min);
    // 3.0 is accepted as 3: JSON writers differ on whether integral numbers get a ".0".
    if (v->is_number()) {
        const double d = v->get<double>();
        if (std::floor(d) == d && d >= static_cast<double>(min) && d <= static_cast<double>(max)) {
            if (v->is_number_unsigned()) return static_cast<int64_t>(v->get<uint64_t>());
            if (v->is_number_integer()) return v->get<int64_t>();
            return static_cast<int64_t>(d);
        }
    }
    issue(key, "expected " + expected + ", got " + shown(*v));
    return fallback.value_or(min);
}

double ObjectReader::number(const std::string& key, std::optional<double> fallback, double min, double max) {
    const std::string expected = "a number in [" + number_text(min) + ", " + number_text(max) + "]";
    const json* v = field(key, !fallback, expected);
    if (!v) return fallback.value_or(min);
    if (v->is_number() && v->get<double>() >= min && v->get<double>() <= max) return v->get<double>();
    issue(key, "expected " + expected + ", got " + shown(*v));
    return fallback.value_or(min);
}

double ObjectReader::positive(const std::string& key, std::optional<double> fallback, double max) {
    const std::string expected = "a number > 0 and <= " + number_text(max);
    const json* v = field(key, !fallback, expected);
    if (!v) return fallback.value_or(1.0);
    if (v->is_number() && v->get<double>() > 0 && v->get<double>() <= max) return v->get<double>();
    issue(key, "expected " + expected + ", got " + shown(*v));
    return fallback.value_or(1.0);
}

bool ObjectReader::boolean(const std::string& key, std::optional<bool> fallback) {
    const json* v = field(key, !fallback, "true or false");
    if (!v) return fallback.value_or(false);
    if (v->is_boolean()) return v->get<bool>();
    issue(key, "expected true or false, got " + shown(*v));
    return fallback.value_or(false);
}

std::string ObjectReader::string(const std::string& key, std::optional<std::string> fallback,
                                 const std::vector<std::string>& allowed) {
    std::string expected = "a string";
    if (!allowed.empty()) {
        expected = "one of";
        for (size_t i = 0; i < allowed.size(); ++i) expected += (i ? ", \"" : " \"") + allowed[i] + "\"";
    }
    const json* v = field(key, !fallback, expected);
    if (!v) return fallback.value_or("");
    if (!v->is_string()) {
        issue(key, "expected " + expected + ", got " + shown(*v));
        return fallback.value_or("");
    }
    const auto text = v->get<std::string>();
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
        std::string message = "expected " + expected + ", got \"" + text + "\"";
        const std::string guess = plugins::closest_match(text, allowed);
        if (!guess.empty()) message += "; did you mean \"" + guess + "\"?";
        issue(key, message);
        return fallback.value_or("");
    }
    if (allowed.empty() && text.empty()) {
        issue(key, "expected a non-empty string");
        return fallback.value_or("");
    }
    return text;
}

std::vector<std::string> ObjectReader::strings(const std::string& key, bool required) {
    const std::string expected = "an array of distinct non-empty strings";
    const json* v = field(key, required, expected);
    if (!v) return {};
    std::vector<std::string> out;
    bool ok = v->is_array();
    if (ok) {
        for (const auto& item : *v) {
            if (!item.is_string() || item.get<std::string>().empty() ||
                std::find(out.begin(), out.end(), item.get<std::string>()) != out.end()) {
                ok = false;
                break;
            }
            out.push_back(item.get<std::string>());
        }
    }
    if (!ok) {
        issue(key, "expected " + expected + ", got " + shown(*v));
        return {};
    }
    return out;
}

json ObjectReader::object(const std::string& key, bool required) {
    const json* v = field(key, required, "an object");
    if (!v) return json::object();
    if (!v->is_object()) {
        issue(key, "expected an object, got " + shown(*v));
        return json::object();
    }
    return *v;
}

json ObjectReader::array(const std::string& key, bool required) {
    const json* v = field(key, required, "an array");
    if (!v) return json::array();
    if (!v->is_array()) {
        issue(key, "expected an array, got " + shown(*v));
        return json::array();
    }
    return *v;
}

void ObjectReader::reject_unknown_keys() {
    if (!is_object_) return;
    for (const auto& [key, value] : value_.items()) {
        if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
        std::string message = "unknown key '" + key + "'";
        const std::string guess = plugins::closest_match(key, known_);
        if (!guess.empty()) message += "; did you mean '" + guess + "'?";
        issue(key, message);
    }
}

json read_attribute_classes(ObjectReader& parent, const std::string& key, bool required, std::vector<ConfigIssue>& issues) {
    json attribute = parent.object(key, required);
    if (!parent.has(key)) return attribute;
    ObjectReader r(attribute, parent.pointer(key), issues);
    r.string("field", std::nullopt);
    const json classes = r.object("classes", true);
    if (r.has("classes") && classes.size() < 2) r.issue("classes", "expected at least two classes, each {\"name\": [MR values]}");
    ObjectReader values(classes, r.pointer("classes"), issues);
    std::set<std::string> seen;
    for (const auto& item : classes.items())
        for (const auto& v : values.strings(item.key(), true))
            if (!seen.insert(v).second) values.issue(item.key(), "the value \"" + v + "\" is in two classes");
    r.reject_unknown_keys();
    return attribute;
}

std::string attribute_class(const json& attribute, const std::string& mr) {
    const std::string field = attribute.at("field").get<std::string>();
    std::vector<meaning::Field> fields;
    try {
        fields = meaning::parse(mr);
    } catch (const Error& e) {
        throw std::runtime_error(e.what());
    }
    for (const auto& f : fields) {
        if (f.attribute != field) continue;
        for (const auto& item : attribute.at("classes").items())
            for (const auto& value : item.value())
                if (value == f.value) return item.key();
    }
    return "";
}

}  // namespace rudder::train
