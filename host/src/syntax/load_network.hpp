// Loading a trained network's model directory (config.json of a given "type", vocab.txt, weights), shared by the
// annotation models and the syntax classifier. Private to rudder_syntax's sources: it includes LibTorch.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "model.hpp"
#include "safetensors.hpp"
#include "tokenizer.hpp"
#include "train/config.hpp"
#include "train/networks.hpp"

namespace rudder::syntax {

// A model directory's parts, checked: its config.json, vocabulary and network, with the weights loaded.
template <typename Net>
struct LoadedModel {
    std::filesystem::path dir;
    std::shared_ptr<WordTokenizer> vocabulary;
    std::shared_ptr<Net> network;
    int64_t buckets = 0;
};

// Throws ModelError naming the file and the problem. `what` names the expected kind in messages ("a tagger").
template <typename Net>
inline LoadedModel<Net> load_network_model(const std::filesystem::path& dir, const std::string& type,
                                           const std::string& what) {
    using json = nlohmann::json;
    const std::filesystem::path file = dir / "config.json";
    const json config = read_json_file(file);
    if (!config.is_object()) throw ModelError("'" + file.string() + "' must hold a JSON object");
    if (config.value("format_version", json()) != json(kModelFormatVersion))
        throw ModelError("'" + file.string() + "' has format_version " + config.value("format_version", json()).dump() +
                         "; this Rudder reads version " + std::to_string(kModelFormatVersion));
    const std::string found = config.value("type", json("")).is_string() ? config.value("type", "") : "";
    if (found != type)
        throw ModelError("'" + dir.string() + "' is " + (found.empty() ? "a model without a type" : "a '" + found + "' model") +
                         ", not " + what + " (train one with `rudder train` (or `rudder train-controller`) and \"kind\": \"" + type + "\")");
    auto text_field = [&](const json& obj, const char* key) {
        if (!obj.is_object() || !obj.contains(key) || !obj.at(key).is_string())
            throw ModelError("'" + file.string() + "': missing string '" + key + "'");
        return obj.at(key).get<std::string>();
    };
    LoadedModel<Net> m;
    m.dir = dir;
    try {
        m.vocabulary = std::make_shared<WordTokenizer>(
            WordTokenizer::load((dir / text_field(config.value("tokenizer", json::object()), "vocab")).string()));
    } catch (const ModelError&) {
        throw;
    } catch (const std::exception& e) {
        throw ModelError(e.what());
    }
    const json network = config.value("network", json());
    try {
        m.network = std::make_shared<Net>(network, *m.vocabulary);
    } catch (const train::ConfigError& e) {
        std::string text = "'" + file.string() + "': bad \"network\":";
        for (const auto& issue : e.issues()) text += "\n  /network" + issue.pointer + ": " + issue.message;
        throw ModelError(text);
    }
    m.buckets = network.value("buckets", int64_t{0});
    const std::filesystem::path weights = dir / text_field(config, "weights");
    train::load_module_tensors(*m.network, load_safetensors(weights), weights);
    m.network->eval();
    return m;
}


}  // namespace rudder::syntax
