// One target's recipe and its generation.
#include "target_run.hpp"

#include <chrono>
#include <stdexcept>
#include <utility>

#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/recipe.hpp>

namespace rudder::eval {
namespace {

using json = nlohmann::json;

// The task's recipe with the target's params (then the task's) given to each control, the task's weights, sampler
// and guidance settings, evaluate_only, and seed + i.
JsonDocument target_recipe(const Suite& suite, const Task& task, const JsonDocument& base, const Target& target,
                           size_t i) {
    JsonDocument recipe = base;
    recipe["samples"] = suite.samples_per_target;
    recipe["batch_size"] = suite.samples_per_target;
    recipe["seed"] = base.value("seed", int64_t{0}) + static_cast<int64_t>(i);
    for (const auto& [control, params] : target.params) {
        bool found = false;
        if (recipe.contains("controllers") && recipe.at("controllers").is_array()) {
            for (auto& c : recipe["controllers"]) {
                if (c.value("name", c.value("plugin", "")) != control) continue;
                found = true;
                if (!c.contains("params")) c["params"] = JsonDocument::object();
                c["params"].update(JsonDocument(params));
                if (const auto p = task.params.find(control); p != task.params.end())
                    c["params"].update(JsonDocument(p->second));
                if (const auto w = task.weights.find(control); w != task.weights.end())
                    c["weight"] = JsonDocument(w->second);
            }
        }
        if (!found)
            throw std::runtime_error("task '" + task.name + "': the recipe '" + task.recipe.string() +
                                     "' has no controller named '" + control + "'");
    }
    for (const auto& [key, settings] :
         {std::pair<const char*, const json*>{"sampler", &task.sampler}, {"guidance", &task.guidance}}) {
        if (settings->empty()) continue;
        if (!recipe.contains(key) || !recipe[key].is_object()) recipe[key] = JsonDocument::object();
        recipe[key].update(JsonDocument(*settings));
    }
    if (task.evaluate_only && recipe.contains("controllers") && recipe.at("controllers").is_array())
        for (auto& c : recipe["controllers"]) c["evaluate_only"] = true;
    return recipe;
}

}  // namespace

TargetOutcome run_target(const Suite& suite, const Task& task, const JsonDocument& base, const Target& target, size_t i,
                         plugins::Registry& registry) {
    const JsonDocument recipe = target_recipe(suite, task, base, target, i);
    Recipe parsed;
    try {
        parsed = parse_recipe_document(recipe, task.recipe.parent_path());  // not printed and parsed again
    } catch (const RecipeError& e) {
        throw std::runtime_error("task '" + task.name + "', target " + std::to_string(i + 1) + ": " + e.what());
    }
    Generator generator(parsed, registry);
    TargetOutcome out;
    out.index = static_cast<int64_t>(i);
    out.family = family_name(generator.model().family);
    const auto start = std::chrono::steady_clock::now();
    const auto samples = generator.generate();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.denoised_sequences = generator.stats().denoised_sequences;
    out.rows_drawn = generator.stats().rows_drawn;
    for (const auto& c : samples.empty() ? std::vector<SampleResult::Control>{} : samples[0].controls)
        out.labels.push_back(c.label);
    for (const auto& s : samples) {
        json line = sample_json(s);
        line["target"] = target.record;
        for (const auto& [control, params] : target.params) line["target"]["params"][control] = params;
        if (target.record.contains("middle")) {
            const int64_t from = target.record["middle"][0], to = target.record["middle"][1];
            std::vector<std::string> middle;
            for (int64_t k = from; k < to && k < static_cast<int64_t>(s.tokens.size()); ++k)
                middle.push_back(generator.model().tokenizer->token(s.tokens[static_cast<size_t>(k)]));
            line["middle"] = middle;
            line["target"]["middle_tokens"] = target.middle;
        }
        out.samples.push_back(std::move(line));
    }
    return out;
}

}  // namespace rudder::eval
