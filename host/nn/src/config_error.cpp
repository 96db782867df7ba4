#include <rudder/nn/config_error.hpp>

namespace rudder {
namespace {

std::string describe_issues(const std::string& source, const std::vector<ConfigIssue>& issues) {
    std::string text = source + ": invalid config (" + std::to_string(issues.size()) +
                       (issues.size() == 1 ? " problem)" : " problems)");
    for (const auto& issue : issues)
        text += "\n  " + (issue.pointer.empty() ? std::string("(config)") : issue.pointer) + ": " + issue.message;
    return text;
}

}  // namespace

ConfigError::ConfigError(std::string source, std::vector<ConfigIssue> issues)
    : std::runtime_error(describe_issues(source, issues)), source_(std::move(source)), issues_(std::move(issues)) {}

}  // namespace rudder
