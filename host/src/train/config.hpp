// Checked reading of JSON configuration objects (training configs, network configs): every problem is collected
// with the JSON pointer of the value and what was expected, and all of them are reported together.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::train {

struct ConfigIssue {
    std::string pointer;  // "/training/lr"; "" for the whole document
    std::string message;
};

// Thrown with every problem found. what() is "<source>: invalid config (N problems)" followed by one
// "  <pointer>: <message>" line per problem.
class ConfigError : public std::runtime_error {
public:
    ConfigError(std::string source, std::vector<ConfigIssue> issues);
    const std::string& source() const { return source_; }
    const std::vector<ConfigIssue>& issues() const { return issues_; }

private:
    std::string source_;
    std::vector<ConfigIssue> issues_;
};

// Reads the fields of one JSON object. A missing required field, a value of the wrong type or out of range is
// recorded in `issues` and the default (or a zero value) is returned in its place, so reading goes on and every
// problem is found in one pass. A value that is not an object is itself one issue.
class ObjectReader {
public:
    ObjectReader(const nlohmann::json& value, std::string pointer, std::vector<ConfigIssue>& issues);

    bool has(const std::string& key) const;
    const std::string& pointer() const { return pointer_; }
    std::string pointer(const std::string& key) const { return pointer_ + "/" + key; }

    // `fallback` empty = required. Ranges are inclusive.
    int64_t integer(const std::string& key, std::optional<int64_t> fallback, int64_t min, int64_t max);
    double number(const std::string& key, std::optional<double> fallback, double min, double max);
    // Like number(), but the value must be strictly greater than `min`.
    double positive(const std::string& key, std::optional<double> fallback, double max);
    bool boolean(const std::string& key, std::optional<bool> fallback);
    // `allowed` non-empty: the value must be one of them (with "did you mean" for a near miss).
    std::string string(const std::string& key, std::optional<std::string> fallback,
                       const std::vector<std::string>& allowed = {});
    // An array of non-empty, distinct strings; missing and not required gives an empty list.
    std::vector<std::string> strings(const std::string& key, bool required);
    // An object field; missing and not required gives an empty object.
    nlohmann::json object(const std::string& key, bool required);
    // An array field; missing and not required gives an empty array.
    nlohmann::json array(const std::string& key, bool required);
    // Records a problem at this object's `key`.
    void issue(const std::string& key, const std::string& message);

    // Reports every key that none of the calls above asked for, suggesting the closest known key.
    void reject_unknown_keys();

private:
    const nlohmann::json* field(const std::string& key, bool required, const std::string& expected);

    nlohmann::json value_;  // a copy: readers are often made from temporaries
    std::string pointer_;
    std::vector<ConfigIssue>& issues_;
    std::vector<std::string> known_;
    bool is_object_;
};

// An attribute's classes as E2E meaning representations give them (the attribute_classifier's labels, the
// sentiment targets of `rudder eval`): {"field": "customer rating", "classes": {"negative": ["low", "1 out of 5"],
// "positive": ["high", "5 out of 5"]}}, at least two classes, no value in two. Reads it from `parent`'s `key`
// (an empty object if missing and not required), recording problems in `issues`.
nlohmann::json read_attribute_classes(ObjectReader& parent, const std::string& key, bool required,
                                      std::vector<ConfigIssue>& issues);
// The class the meaning representation's field value falls in, or "" (no such field, or a value of no class).
// Throws std::runtime_error for a malformed meaning representation.
std::string attribute_class(const nlohmann::json& attribute, const std::string& mr);

}  // namespace rudder::train
