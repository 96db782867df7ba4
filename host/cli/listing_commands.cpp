// `rudder plugins` and `rudder models`: what this installation finds. The plugin listing comes from the plugin
// index (each library scanned in a child process), so a broken library is listed with its reason, never loaded here.
#include <nlohmann/json.hpp>

#include <iostream>

#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/model.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

using json = nlohmann::json;

int cmd_plugins(bool as_json) {
    plugins::Registry registry(plugins::Registry::default_search_path());
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
        std::cout << "  " << c.id << " " << c.version << "  abi " << c.abi_major << "." << c.abi_minor << "  ["
                  << caps << "]  " << c.description << "\n      " << c.path.string() << "\n      sha256 " << c.sha256
                  << "\n";
    }
    if (found.empty()) std::cout << "  (none)\n";
    if (!rejected.empty()) {
        std::cout << "rejected:\n";
        for (const auto& r : rejected) std::cout << "  " << r.path.string() << ": " << r.reason << "\n";
    }
    return kExitOk;
}

int cmd_models() {
    const auto path = default_model_path();
    std::cout << "search path:\n";
    for (const auto& p : path) std::cout << "  " << p.string() << "\n";
    std::cout << "models:\n";
    for (const auto& name : list_models(path)) std::cout << "  " << name << "\n";
    return kExitOk;
}

}  // namespace

void add_listing_commands(CLI::App& app, Commands& commands) {
    auto as_json = std::make_shared<bool>(false);
    auto* plugins = app.add_subcommand("plugins", "List controller plugins found, and files rejected");
    plugins->add_flag("--json", *as_json, "Machine-readable output");
    commands.list.push_back({plugins, [as_json] { return cmd_plugins(*as_json); }});
    auto* models = app.add_subcommand("models", "List bundled models");
    commands.list.push_back({models, [] { return cmd_models(); }});
}

}  // namespace rudder::cli
