// What a POST /v1/generate or /v1/validate body asks for, read from its JSON, and the errors that answer it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

#include <rudder/runtime/recipe.hpp>
#include <rudder/serve/server_options.hpp>

namespace rudder::serve {

// A request that cannot be served, with the status to answer and, for recipe problems, their pointers.
struct RequestError {
    int status;
    std::string message;
    std::vector<RecipeIssue> issues;
};

// {"error": message, "issues"?: [{"pointer", "message"}]}
nlohmann::json error_json(const RequestError& e);

// A request's recipe with the request's overrides applied.
struct GenerateRequest {
    // Keys in the order the client (or the server's recipe file) wrote them: the order a controller's params are
    // handed over in (a JSON Schema's properties are written in the order it gives).
    JsonDocument recipe;
    // Unused, always null: the recipe keeps its own order. Left while job_runner.cpp still copies it (Job::order).
    nlohmann::ordered_json order;
    std::filesystem::path base_dir = ".";
    std::string pointer_prefix;  // "/recipe" for an inline recipe: where its problems are in the request
    bool stream = false;
    std::optional<uint64_t> seed;                     // the request's, else the recipe's; none: each run draws one
    std::string samples_pointer = "/recipe/samples";  // where the request's samples are set ("/samples": overridden)
};

// The body parsed once (json_input::parse_document: no duplicate keys, bounded depth, keys in order); RequestError
// (400, or 500 for a recipe file of the server's that cannot be read) with every problem of the request itself. The
// recipe's own problems are found when it is parsed (parse_recipe_document) and loaded. A recipe the request gives may
// not ask for less isolation than the server's (options.isolation), nor name a plugin by path unless the server allows
// client paths; a recipe that does not say where its controllers run runs them where the server says.
GenerateRequest read_request(const std::string& body, const ServerOptions& options);

// OpenAI's response_format as a controller of the structured library: {"type": "json_schema", "json_schema":
// {"name", "schema", "strict", "description"}} -> json_schema with that schema; {"type": "json_object"} -> any JSON
// object; {"type": "text"} -> none. std::nullopt when none is asked for (or the value has issues, recorded at
// /response_format).
std::optional<JsonDocument> response_format_controller(const JsonDocument& value, std::vector<RecipeIssue>& issues);

// The server's rules for a recipe a client gives (issues at /recipe/...): no less isolation than the server's,
// plugins by id unless client paths are allowed.
void check_client_recipe(const JsonDocument& recipe, const ServerOptions& options, std::vector<RecipeIssue>& issues);

// Requests whose recipes differ only in seed and samples share generators, and runs.
std::string share_key(const GenerateRequest& request);

}  // namespace rudder::serve
