// `rudder plugins` and `rudder models`: what this installation finds. The plugin listing comes from the plugin
// index (each library scanned in a child process), so a broken library is listed with its reason, never loaded here.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/model.hpp>

#include "commands.hpp"

namespace rudder::cli {

namespace {

using json = nlohmann::json;

int cmd_plugins(bool as_json) {
    plugins::Registry registry = plugin_registry();
    const auto& found = registry.controllers();
    const auto& rejected = registry.rejections();
    if (as_json) {
        json j = {{"search_path", json::array()}, {"controllers", json::array()}, {"rejected", json::array()}};
        for (const auto& p : registry.search_path()) j["search_path"].push_back(p.string());
        for (const auto& c : found)
            j["controllers"].push_back({{"id", c.id},
                                        {"version", c.version},
                                        {"abi", std::to_string(c.abi_major) + "." + std::to_string(c.abi_minor)},
                                        {"capabilities", plugins::capability_names(c.capabilities)},
                                        {"description", c.description},
                                        {"file", c.path.string()},
                                        {"sha256", c.sha256}});
        for (const auto& r : rejected) j["rejected"].push_back({{"file", r.path.string()}, {"reason", r.reason}});
        std::cout << j.dump(2) << "\n";
        return kExitOk;
    }
    std::cout << "search path:\n";
    for (const auto& p : registry.search_path()) std::cout << "  " << p.string() << "\n";
    if (registry.search_path().empty()) std::cout << "  (empty: set RUDDER_PLUGIN_PATH)\n";
    std::cout << "controllers:\n";
    for (const auto& c : found) {
        std::string caps;
        for (const auto& name : plugins::capability_names(c.capabilities)) caps += (caps.empty() ? "" : ",") + name;
        std::cout << "  " << c.id << " " << c.version << "  abi " << c.abi_major << "." << c.abi_minor << "  [" << caps
                  << "]  " << c.description << "\n      " << c.path.string() << "\n      sha256 " << c.sha256 << "\n";
    }
    if (found.empty()) std::cout << "  (none)\n";
    if (!rejected.empty()) {
        std::cout << "rejected:\n";
        for (const auto& r : rejected) std::cout << "  " << r.path.string() << ": " << r.reason << "\n";
    }
    return kExitOk;
}

// One model in words: the fields of describe_model, one per line.
void print_description(const json& d) {
    auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    std::cout << d.value("name", "") << "  (" << d.value("path", "") << ")\n";
    for (const char* key : {"format", "kind", "families", "noise", "embed_dim", "network", "vocab_size", "mask_id",
                            "conditional", "tokenizer", "recommended_sampler", "sampling", "controls", "trained_for"}) {
        if (!d.contains(key) || d.at(key).is_null()) continue;
        std::cout << "  " << key << ": " << text(d.at(key)) << "\n";
    }
    if (d.contains("weights") && d.at("weights").is_object()) {
        const json& w = d.at("weights");
        std::cout << "  weights: " << w.value("parameters", int64_t{0}) << " parameters, "
                  << w.value("bytes", uint64_t{0}) << " bytes in " << text(w.at("files")) << " ("
                  << text(w.at("dtypes")) << ")\n";
    }
}

int cmd_models(const std::vector<std::string>& names, bool as_json) {
    if (!names.empty()) {
        json all = json::array();
        for (const auto& name : names) {
            const json d = describe_model(resolve_model(name, std::filesystem::current_path(), default_model_path()));
            if (as_json)
                all.push_back(d);
            else
                print_description(d);
        }
        if (as_json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
        return kExitOk;
    }
    // Generators (what a recipe's "model" names) apart from the classifiers, judges, taggers and teachers that
    // controllers and commands load.
    const auto path = default_model_path();
    json generators = json::array(), others = json::array();
    for (const auto& name : list_models(path)) {
        json described;
        try {
            described = describe_model(resolve_model(name, std::filesystem::current_path(), path));
        } catch (const std::exception& e) {
            described = {{"kind", std::string("unreadable: ") + e.what()}};
        }
        if (described.value("diffusion", false))
            generators.push_back(name);
        else
            others.push_back({{"name", name}, {"kind", described.value("kind", "")}});
    }
    if (as_json) {
        json j = {
            {"search_path", json::array()}, {"generators", generators}, {"others", others}, {"default", kDefaultModel}};
        for (const auto& p : path) j["search_path"].push_back(p.string());
        std::cout << j.dump(2) << "\n";
        return kExitOk;
    }
    std::cout << "search path:\n";
    for (const auto& p : path) std::cout << "  " << p.string() << "\n";
    std::cout << "generators (a recipe's \"model\"; `rudder models NAME` describes one):\n";
    for (const auto& name : generators)
        std::cout << "  " << name.get<std::string>() << (name == kDefaultModel ? "  (default)" : "") << "\n";
    std::cout << "classifiers, judges and annotators (loaded by controllers and commands, not sampled from):\n";
    for (const auto& o : others)
        std::cout << "  " << o["name"].get<std::string>() << "  " << o["kind"].get<std::string>() << "\n";
    return kExitOk;
}

}  // namespace

void add_listing_commands(CLI::App& app, Commands& commands) {
    auto as_json = std::make_shared<bool>(false);
    auto* plugins = app.add_subcommand("plugins", "List controller plugins found, and files rejected");
    plugins->add_flag("--json", *as_json, "Machine-readable output");
    commands.list.push_back({plugins, [as_json] { return cmd_plugins(*as_json); }});
    auto model_names = std::make_shared<std::vector<std::string>>();
    auto models_json = std::make_shared<bool>(false);
    auto* models =
        app.add_subcommand("models", "List bundled models, or describe the models named (bundled names or folders)");
    models->add_option("model", *model_names,
                       "A bundled model's name or a model folder (a Rudder model or a public checkpoint)");
    models->add_flag("--json", *models_json, "Machine-readable output");
    commands.list.push_back({models, [model_names, models_json] { return cmd_models(*model_names, *models_json); }});
}

}  // namespace rudder::cli
