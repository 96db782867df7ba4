// Reading a suite: every problem found in one pass, each at its JSON pointer (ConfigError).
#include "suite.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/nn/config_error.hpp>
#include <rudder/rudder_json.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/text_files.hpp>

namespace rudder::eval {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kTargetKinds = {"pos",    "tree",         "span",         "mr",
                                               "fields", "sentiment",    "length",       "prefix",
                                               "infill", "data_to_text", "text_to_data", "text_to_data_start",
                                               "none"};

TargetSource read_targets(json_input::ObjectReader r, const fs::path& base, TargetSource fallback) {
    TargetSource t = fallback;
    if (auto v = r.text("file")) t.file = base / *v;
    if (auto v = r.text("meaning")) t.meaning = base / *v;
    if (r.has("attribute")) t.attribute = meaning::read_attribute_classes(r, "attribute", json_input::kOptional);
    t.count = r.integer("count", 1, 1'000'000).value_or(t.count);
    t.seed = static_cast<uint64_t>(r.integer("seed", 0, INT64_MAX).value_or(static_cast<int64_t>(t.seed)));
    t.max_words = r.integer("max_words", 1, 4096).value_or(t.max_words);
    r.reject_unknown_keys();
    return t;
}

// A composition's "controls" ({"semantic": "fields", "syntax_tree": "tree"}, every target from the same text), and
// its per-control "params" and "weight".
void read_composition(json_input::ObjectReader& t, const std::string& p, std::vector<ConfigIssue>& issues, Task& task) {
    if (t.has("control") || t.has("target")) {
        t.issue("controls", "give \"controls\" or \"control\" and \"target\", not both");
        t.text("control").value_or("");  // reported once, above, not again as unknown keys
        t.text("target").value_or("");
    }
    const json controls = t.object("controls", json_input::kRequired).value_or(json::object());
    json_input::ObjectReader kinds(controls, p + "/controls", issues);
    for (const auto& item : controls.items())
        task.controls.push_back(
            {item.key(), kinds.choice(item.key(), kTargetKinds, json_input::kRequired).value_or("")});
    if (controls.size() < 2) t.issue("controls", "expected two or more controllers (use \"control\" for one)");
    // Per control, keyed as "controls" is: {"semantic": {"gamma": 2}} and {"syntax_tree": 0.5}.
    const auto per_control = [&](const std::string& key, const auto& read) {
        const json given = t.object(key).value_or(json::object());
        json_input::ObjectReader by_control(given, p + "/" + key, issues);
        for (const auto& item : given.items()) {
            if (!controls.contains(item.key()))
                by_control.issue(item.key(), "not one of the task's \"controls\"");
            else
                read(by_control, item.key());
        }
    };
    per_control("params", [&](json_input::ObjectReader& r, const std::string& c) {
        if (auto o = r.object(c)) task.params[c] = *o;
    });
    per_control("weight", [&](json_input::ObjectReader& r, const std::string& c) {
        if (auto w = r.number(c, 0.0, 1e6)) task.weights[c] = *w;
    });
}

// One controller's "control", "target", "params" and "weight" (or none).
void read_single_control(json_input::ObjectReader& t, Task& task) {
    const std::string target = t.choice("target", kTargetKinds).value_or(std::string("none"));
    const std::string control = t.text("control").value_or("");
    const json params = t.object("params").value_or(json::object());
    const std::optional<double> weight = t.number("weight", 0.0, 1e6);
    if (!params.empty() && control.empty()) t.issue("params", "needs \"control\": the controller they go to");
    if (weight && control.empty()) t.issue("weight", "needs \"control\": the controller it goes to");
    if (!params.empty()) task.params[control] = params;
    if (weight) task.weights[control] = *weight;
    if (target != "none" && control.empty())
        t.issue("control", "required with a target: the recipe controller that receives it");
    if (!control.empty()) task.controls.push_back({control, target});
}

// Whether the task's targets can give what its controls need, and whether its files are there.
void check_task(json_input::ObjectReader& t, const Task& task, const Suite& s) {
    bool any_target = false, mr_target = false;
    for (const auto& c : task.controls) {
        any_target = any_target || c.target != "none";
        mr_target = mr_target || c.target == "mr" || c.target == "fields" || c.target == "sentiment" ||
                    c.target == "data_to_text" || c.target == "text_to_data" || c.target == "text_to_data_start";
        if (c.target == "sentiment" && task.targets.attribute.is_null())
            t.issue("targets",
                    "a sentiment target needs /targets/attribute ({\"field\", \"classes\"}), here or at the "
                    "top level");
    }
    if (task.targets.file.empty()) t.issue("targets", "no target file (give /targets/file here or at the top level)");
    const bool annotated = task.targets.file.filename().string().find(".csv") == std::string::npos;
    if (any_target && mr_target && annotated && task.targets.meaning.empty())
        t.issue("targets",
                "meaning-representation targets from an annotated file need /targets/meaning (the E2E CSV "
                "the texts come from)");
    std::error_code ec;
    if (!fs::is_regular_file(task.recipe, ec)) t.issue("recipe", "no recipe file '" + task.recipe.string() + "'");
    for (const fs::path& f : {task.targets.file, task.targets.meaning})
        if (!f.empty() && !fs::is_regular_file(f, ec)) t.issue("targets", "no target file '" + f.string() + "'");
    for (const auto& other : s.tasks)
        if (other.name == task.name) t.issue("name", "another task is named '" + task.name + "'");
}

Task read_task(const json& j, const std::string& p, const fs::path& base, const TargetSource& defaults,
               std::vector<ConfigIssue>& issues, const Suite& s) {
    json_input::ObjectReader t(j, p, issues);
    Task task;
    task.name = t.text("name", json_input::kRequired).value_or("");
    task.recipe = base / t.text("recipe", json_input::kRequired).value_or("");
    task.model = t.text("model").value_or("");
    if (task.model.find('/') != std::string::npos) task.model = (base / task.model).lexically_normal().string();
    task.evaluate_only = t.boolean("evaluate_only").value_or(false);
    task.sampler = t.object("sampler").value_or(json::object());
    task.guidance = t.object("guidance").value_or(json::object());
    if (t.has("controls"))
        read_composition(t, p, issues, task);
    else
        read_single_control(t, task);
    if (t.has("targets"))
        task.targets =
            read_targets(json_input::ObjectReader(t.object("targets").value_or(json::object()), p + "/targets", issues),
                         base, defaults);
    else
        task.targets = defaults;
    check_task(t, task, s);
    t.reject_unknown_keys();
    return task;
}

}  // namespace

Suite read_suite(const fs::path& file) {
    const std::string text = read_small_file(file, kMaxConfigFileBytes, "suite");
    json j;
    try {
        j = json_input::parse(text);
    } catch (const std::exception& e) {  // nlohmann's parse errors, and json_input::TooDeep
        throw ConfigError(file.string(), {{"", std::string("not valid JSON: ") + e.what()}});
    }
    const fs::path base = file.parent_path();
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader root(j, "", issues);
    Suite s;
    s.description = root.text("description").value_or("");
    s.teacher = root.text("teacher").value_or(s.teacher);
    s.samples_per_target = root.integer("samples_per_target", 1, 1000).value_or(1);
    TargetSource defaults;
    if (root.has("targets"))
        defaults =
            read_targets(json_input::ObjectReader(root.object("targets").value_or(json::object()), "/targets", issues),
                         base, defaults);
    const json tasks = root.array("tasks", json_input::kRequired).value_or(json::array());
    if (j.is_object() && j.contains("tasks") && tasks.empty()) {
        root.issue("tasks", "expected at least one task");
    } else {
        for (size_t i = 0; i < tasks.size(); ++i)
            s.tasks.push_back(read_task(tasks[i], "/tasks/" + std::to_string(i), base, defaults, issues, s));
    }
    root.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError(file.string(), std::move(issues));
    return s;
}

}  // namespace rudder::eval
