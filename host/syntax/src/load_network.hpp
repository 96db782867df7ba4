// Loading a trained network's model directory (config.json of a given "type", its tokenizer, weights), shared by the
// annotation models and the classifiers. Private to rudder_syntax's sources: it includes LibTorch.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include <rudder/nn/config_error.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/weights.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder::syntax {

// A model directory's parts, checked: its config.json, tokenizer and network, with the weights loaded.
template <typename Net>
struct LoadedModel {
    std::filesystem::path dir;
    std::shared_ptr<const Tokenizer> tokenizer;
    std::shared_ptr<const WordTokenizer> vocabulary;  // Tokens::words: the tokenizer as a word vocabulary
    std::shared_ptr<Net> network;
    int64_t buckets = 0;
};

// Whether a model's network reads words of a word vocabulary (the tagger and the parser, which add features of each
// word) or the token ids of any tokenizer (the classifiers, which read their denoiser's tokens).
enum class Tokens { words, any };

// Throws ModelError naming the file and the problem. `what` names the expected kind in messages ("a tagger").
template <typename Net>
inline LoadedModel<Net> load_network_model(const std::filesystem::path& dir, const std::string& type,
                                           const std::string& what, Tokens tokens) {
    using json = nlohmann::json;
    const std::filesystem::path file = dir / "config.json";
    const json config = read_model_config(dir);
    const std::string found = config.value("type", json("")).is_string() ? config.value("type", "") : "";
    if (found != type)
        throw ModelError("'" + dir.string() + "' is " +
                         (found.empty() ? "a model without a type" : "a '" + found + "' model") + ", not " + what +
                         " (train one with `rudder train` (or `rudder train-controller`) and \"kind\": \"" + type +
                         "\")");
    LoadedModel<Net> m;
    m.dir = dir;
    if (tokens == Tokens::words) {
        m.vocabulary = load_word_tokenizer(config, dir);
        m.tokenizer = m.vocabulary;
    } else {
        m.tokenizer = load_model_tokenizer(config, dir);
    }
    const json network = config.value("network", json());
    try {
        m.network = std::make_shared<Net>(network, *m.tokenizer);
    } catch (const ConfigError& e) {
        std::string text = "'" + file.string() + "': bad \"network\":";
        for (const auto& issue : e.issues()) text += "\n  /network" + issue.pointer + ": " + issue.message;
        throw ModelError(text);
    }
    m.buckets = network.value("buckets", int64_t{0});
    const std::filesystem::path weights = model_file(dir, config_string(config, "weights", file));
    nn::load_module_file(*m.network, weights);
    m.network->eval();
    return m;
}

}  // namespace rudder::syntax
