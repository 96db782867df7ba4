// A configuration that cannot be used (a network's "network" object, a training config, an evaluation suite), with
// every problem found, each at its JSON pointer. Configs are read with rudder/rudder_json.hpp's ObjectReader.
#pragma once

#include <rudder/rudder_json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace rudder {

using ConfigIssue = json_input::Issue;

// what() is "<source>: invalid config (N problems)" followed by one "  <pointer>: <message>" line per problem.
class ConfigError : public std::runtime_error {
public:
    ConfigError(std::string source, std::vector<ConfigIssue> issues);
    const std::string& source() const { return source_; }
    const std::vector<ConfigIssue>& issues() const { return issues_; }

private:
    std::string source_;
    std::vector<ConfigIssue> issues_;
};

}  // namespace rudder
