// A first-party controller's params, read with the SDK's JSON reader (rudder/rudder_json.hpp) as Rudder reads
// recipes: every problem is found in one pass, each named by its JSON pointer inside params (the host prefixes the
// controller's place in the recipe).
#pragma once

#include <rudder/rudder_controller.hpp>
#include <rudder/rudder_json.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace rudder {

// Json: nlohmann::json (Params), or JsonDocument (DocumentParams) for params whose key order matters (a schema's).
template <class Json>
class BasicParams {
public:
    using Reader = json_input::BasicObjectReader<Json>;
    // `text`: the params the host passed (a JSON object's text). Not JSON at all is an Error at once.
    explicit BasicParams(std::string_view text) : reader_(parse(text), "", issues_) {}
    BasicParams(const BasicParams&) = delete;
    BasicParams& operator=(const BasicParams&) = delete;

    Reader* operator->() { return &reader_; }
    Reader& reader() { return reader_; }

    // Call once every key has been read: unknown keys are problems too. Throws Error listing every problem.
    void finish() {
        reader_.reject_unknown_keys();
        if (!issues_.empty()) throw Error(json_input::describe(issues_));
    }

private:
    static Json parse(std::string_view text) {
        try {
            return json_input::parse_as<Json>(std::string(text));
        } catch (const std::exception& e) {  // nlohmann's parse errors, and json_input::TooDeep
            throw Error(std::string("params are not valid JSON: ") + e.what());
        }
    }

    std::vector<json_input::Issue> issues_;  // before reader_, which keeps a reference to it
    Reader reader_;
};

using Params = BasicParams<nlohmann::json>;
using DocumentParams = BasicParams<JsonDocument>;

}  // namespace rudder
