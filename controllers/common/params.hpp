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

class Params {
public:
    // `text`: the params the host passed (a JSON object's text). Not JSON at all is an Error at once.
    explicit Params(std::string_view text) : reader_(parse(text), "", issues_) {}
    Params(const Params&) = delete;
    Params& operator=(const Params&) = delete;

    json_input::ObjectReader* operator->() { return &reader_; }
    json_input::ObjectReader& reader() { return reader_; }

    // Call once every key has been read: unknown keys are problems too. Throws Error listing every problem.
    void finish() {
        reader_.reject_unknown_keys();
        if (!issues_.empty()) throw Error(json_input::describe(issues_));
    }

private:
    static nlohmann::json parse(std::string_view text) {
        try {
            return json_input::parse(std::string(text));
        } catch (const std::exception& e) {  // nlohmann's parse errors, and json_input::TooDeep
            throw Error(std::string("params are not valid JSON: ") + e.what());
        }
    }

    std::vector<json_input::Issue> issues_;  // before reader_, which keeps a reference to it
    json_input::ObjectReader reader_;
};

}  // namespace rudder
