#include "request.hpp"

#include <cstdint>
#include <optional>

#include <rudder/nn/model_files.hpp>
#include <rudder/rudder_json.hpp>

#include "answers.hpp"

namespace rudder::serve {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A recipe file the server was started with: nn's read_json_document, its error told as the server's own (500).
JsonDocument read_recipe_file(const fs::path& file) {
    try {
        return read_json_document(file);
    } catch (const ModelError& e) {
        // read_json_document's message is "cannot read '<file>'" or "'<file>' is not valid JSON: <why>".
        const std::string what = e.what();
        if (what.rfind("cannot read ", 0) == 0)
            throw RequestError{500, "the server cannot read its recipe '" + file.string() + "'", {}};
        throw RequestError{500, "the server's recipe " + what, {}};
    }
}

}  // namespace

std::optional<JsonDocument> response_format_controller(const JsonDocument& value, std::vector<RecipeIssue>& issues) {
    json_input::DocumentReader r(value, "/response_format", issues);
    const auto type = r.text("type", json_input::kRequired);
    const auto spec = r.object("json_schema");
    r.reject_unknown_keys();
    if (!type) return std::nullopt;
    if (*type == "text") {
        if (spec) r.issue("json_schema", "only with \"type\": \"json_schema\"");
        return std::nullopt;
    }
    if (*type == "json_object") {
        if (spec) r.issue("json_schema", "only with \"type\": \"json_schema\"");
        return JsonDocument{{"plugin", "json_schema"}, {"params", {{"schema", {{"type", "object"}}}}}};
    }
    if (*type != "json_schema") {
        r.issue("type", "expected \"json_schema\", \"json_object\" or \"text\", got '" + *type + "'");
        return std::nullopt;
    }
    if (!spec) {
        r.issue("json_schema", "\"type\": \"json_schema\" needs {\"schema\": {...}}");
        return std::nullopt;
    }
    json_input::DocumentReader s(*spec, r.pointer("json_schema"), issues);
    const auto schema = s.object("schema", json_input::kRequired);
    s.text("name");
    s.text("description");
    s.boolean("strict");  // OpenAI's switch for exactness: here the schema is always held exactly
    s.reject_unknown_keys();
    if (!schema) return std::nullopt;
    return JsonDocument{{"plugin", "json_schema"}, {"params", {{"schema", *schema}}}};
}

void check_client_recipe(const JsonDocument& recipe, const ServerOptions& options, std::vector<RecipeIssue>& issues) {
    const bool isolated = options.isolation == "process";
    const std::string in_process =
        "this server runs controllers in a process of their own (its operator's setting); a request may ask for "
        "\"process\", not for \"in_process\"";
    if (isolated && recipe.contains("isolation") && recipe["isolation"] == "in_process")
        issues.push_back({"/recipe/isolation", in_process});
    if (!recipe.contains("controllers") || !recipe["controllers"].is_array()) return;
    for (size_t i = 0; i < recipe["controllers"].size(); ++i) {
        const JsonDocument& c = recipe["controllers"][i];
        if (!c.is_object()) continue;
        const std::string at = "/recipe/controllers/" + std::to_string(i);
        if (isolated && c.contains("isolation") && c["isolation"] == "in_process")
            issues.push_back({at + "/isolation", in_process});
        if (options.allow_client_paths || !c.contains("plugin") || !c["plugin"].is_string()) continue;
        const std::string plugin = c["plugin"].get<std::string>();
        const bool path = plugin.find('/') != std::string::npos || plugin.find('#') != std::string::npos ||
                          (plugin.size() > 3 && plugin.compare(plugin.size() - 3, 3, ".so") == 0);
        if (path)
            issues.push_back({at + "/plugin", "'" + quoted(plugin) +
                                                  "' is a path; this server takes plugins by id only (GET "
                                                  "/v1/plugins lists them)"});
    }
}

json error_json(const RequestError& e) {
    json j = {{"error", e.message}};
    if (!e.issues.empty()) {
        j["issues"] = json::array();
        for (const auto& issue : e.issues)
            j["issues"].push_back({{"pointer", issue.pointer}, {"message", issue.message}});
    }
    return j;
}

std::string share_key(const GenerateRequest& request) {
    JsonDocument shape = request.recipe;
    shape.erase("seed");
    shape.erase("samples");
    // In the client's order: recipes that differ only in a schema's property order run apart.
    return request.base_dir.string() + "\n" + shape.dump();
}

GenerateRequest read_request(const std::string& body, const ServerOptions& options) {
    JsonDocument j;
    try {
        j = json_input::parse_document(body);
    } catch (const std::exception& e) {
        throw RequestError{400, std::string("the request body is not valid JSON: ") + e.what(), {}};
    }
    std::vector<RecipeIssue> issues;
    json_input::DocumentReader r(j, "", issues);
    if (!r.is_object()) throw RequestError{400, "the request body must be a JSON object", {}};
    GenerateRequest out;
    const JsonDocument* recipe =
        r.any("recipe", json_input::kRequired, "a recipe object, or the name of one the server has");
    if (recipe != nullptr && recipe->is_object()) {
        out.recipe = *recipe;
        out.pointer_prefix = "/recipe";
        check_client_recipe(out.recipe, options, issues);
    } else if (recipe != nullptr && recipe->is_string()) {
        const auto found = options.recipes.find(recipe->get<std::string>());
        if (found == options.recipes.end()) {
            std::string known;
            for (const auto& [name, file] : options.recipes) known += (known.empty() ? "" : ", ") + name;
            r.issue("recipe", "no recipe named '" + quoted(recipe->get<std::string>()) + "' on this server (" +
                                  (known.empty() ? std::string("it was started with none") : "it has: " + known) + ")");
        } else {
            out.recipe = read_recipe_file(found->second);
            out.base_dir = found->second.parent_path();
        }
    } else if (recipe != nullptr) {
        r.issue("recipe", "expected a recipe object, or the name of one the server has");
    }
    const auto seed = r.integer("seed", 0, INT64_MAX);
    const auto samples = r.integer("samples", 1, options.limits.max_samples);
    const auto max_length = r.integer("max_length", 1, options.limits.max_length);
    const JsonDocument params = r.object("params").value_or(JsonDocument::object());
    out.stream = r.boolean("stream").value_or(false);
    const JsonDocument* response_format = r.any("response_format");
    r.reject_unknown_keys();
    if (response_format != nullptr) {
        const std::optional<JsonDocument> controller = response_format_controller(*response_format, issues);
        if (controller && out.recipe.is_object()) {
            if (!out.recipe.contains("controllers")) out.recipe["controllers"] = JsonDocument::array();
            // A malformed controllers value is the recipe's issue, reported when it is parsed.
            if (out.recipe["controllers"].is_array()) out.recipe["controllers"].push_back(*controller);
        }
    }
    if (out.recipe.is_object()) {
        if (!out.recipe.contains("isolation")) out.recipe["isolation"] = options.isolation;
        if (seed) out.recipe["seed"] = *seed;
        // A recipe's seed that is not a valid one is an issue parse_recipe_document reports.
        if (out.recipe.contains("seed") && out.recipe["seed"].is_number_integer() &&
            out.recipe["seed"].get<int64_t>() >= 0)
            out.seed = out.recipe["seed"].get<uint64_t>();
        if (samples) {
            out.recipe["samples"] = *samples;
            out.samples_pointer = "/samples";
        }
        if (max_length) out.recipe["max_length"] = *max_length;
        // Params by controller name (or plugin), merged over the recipe's.
        for (const auto& [name, value] : params.items()) {
            bool found = false;
            if (out.recipe.contains("controllers") && out.recipe["controllers"].is_array())
                for (auto& c : out.recipe["controllers"]) {
                    // A controller is named by its "name", else its "plugin"; a malformed one is the recipe's issue.
                    const char* key = c.is_object() && c.contains("name") ? "name" : "plugin";
                    if (!c.is_object() || !c.contains(key) || c[key] != name) continue;
                    found = true;
                    if (!value.is_object()) continue;
                    if (!c.contains("params") || !c["params"].is_object()) c["params"] = JsonDocument::object();
                    c["params"].update(value);
                }
            const std::string pointer = "/params/" + json_input::pointer_token(name);
            if (!found)
                issues.push_back({pointer, "the recipe has no controller named '" + quoted(name) + "'"});
            else if (!value.is_object())
                issues.push_back({pointer, "expected an object of params"});
        }
    }
    if (!issues.empty()) throw RequestError{400, "invalid request", issues};
    return out;
}

}  // namespace rudder::serve
