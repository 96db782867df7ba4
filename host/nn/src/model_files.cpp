#include <rudder/nn/model_files.hpp>

#include <algorithm>

#include <rudder/rudder_json.hpp>
#include <rudder/text/bpe_tokenizer.hpp>
#include <rudder/text/text_files.hpp>

namespace rudder {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

template <class Json>
Json read_json_as(const fs::path& file) {
    std::string text;
    try {
        text = read_small_file(file, kMaxConfigFileBytes);
    } catch (const std::runtime_error& e) {
        throw ModelError(e.what());
    }
    try {
        return json_input::parse_as<Json>(text);
    } catch (const std::exception& e) {  // nlohmann's parse errors, and json_input::TooDeep
        throw ModelError("'" + file.string() + "' is not valid JSON: " + e.what());
    }
}

}  // namespace

json read_json_file(const fs::path& file) { return read_json_as<json>(file); }

JsonDocument read_json_document(const fs::path& file) { return read_json_as<JsonDocument>(file); }

json read_model_config(const fs::path& dir) {
    const fs::path file = dir / "config.json";
    return checked_model_config(read_json_file(file), file);
}

json checked_model_config(json config, const fs::path& file) {
    if (!config.is_object()) throw ModelError("'" + file.string() + "' must hold a JSON object");
    if (!config.contains("format_version")) throw ModelError("'" + file.string() + "': missing key 'format_version'");
    if (config.at("format_version") != json(kModelFormatVersion))
        throw ModelError("'" + file.string() + "' has format_version " + config.at("format_version").dump() +
                         "; this Rudder reads version " + std::to_string(kModelFormatVersion));
    return config;
}

std::string config_string(const json& object, const std::string& key, const fs::path& file) {
    if (!object.is_object() || !object.contains(key) || !object.at(key).is_string())
        throw ModelError("'" + file.string() + "': missing string '" + key + "'");
    return object.at(key).get<std::string>();
}

fs::path model_file(const fs::path& dir, const std::string& name) {
    const fs::path relative = fs::path(name).lexically_normal();
    const bool inside = !name.empty() && relative.is_relative() && !relative.has_root_name() &&
                        (relative.empty() || *relative.begin() != "..") && relative != ".";
    if (!inside)
        throw ModelError("'" + (dir / "config.json").string() + "': \"" + name +
                         "\" is not a file inside the model's folder (names are relative to it and stay in it)");
    // And after its links are followed: a link to a file elsewhere is refused as a name with ".." is.
    std::error_code ec, dir_ec;
    const fs::path resolved = fs::weakly_canonical(dir / relative, ec), root = fs::weakly_canonical(dir, dir_ec);
    const auto [r, p] = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
    if (!ec && !dir_ec && r != root.end())
        throw ModelError("'" + (dir / "config.json").string() + "': \"" + name +
                         "\" links to a file outside the model's folder (links must stay in it)");
    return dir / relative;
}

std::shared_ptr<WordTokenizer> load_word_tokenizer(const json& config, const fs::path& dir) {
    const fs::path file = dir / "config.json";
    if (!config.contains("tokenizer")) throw ModelError("'" + file.string() + "': missing key 'tokenizer'");
    const json& spec = config.at("tokenizer");
    const std::string type = config_string(spec, "type", file);
    if (type != "word") throw ModelError("'" + file.string() + "': unknown tokenizer type '" + type + "'");
    const fs::path vocab = model_file(dir, config_string(spec, "vocab", file));
    try {
        return std::make_shared<WordTokenizer>(WordTokenizer::load(vocab.string()));
    } catch (const std::exception& e) {
        throw ModelError(e.what());
    }
}

std::shared_ptr<const Tokenizer> load_model_tokenizer(const json& config, const fs::path& dir) {
    const fs::path file = dir / "config.json";
    if (!config.contains("tokenizer")) throw ModelError("'" + file.string() + "': missing key 'tokenizer'");
    const json& spec = config.at("tokenizer");
    if (config_string(spec, "type", file) != "bpe") return load_word_tokenizer(config, dir);
    const fs::path tokenizer_file = model_file(dir, config_string(spec, "file", file));
    const std::string pad = config_string(spec, "pad", file), mask = config_string(spec, "mask", file);
    try {
        return bpe_tokenizer_with_mask(tokenizer_file, pad, mask);
    } catch (const std::exception& e) {
        throw ModelError("'" + file.string() + "': its tokenizer: " + e.what());
    }
}

std::shared_ptr<const Tokenizer> bpe_tokenizer_with_mask(const fs::path& file, const std::string& pad,
                                                         const std::string& mask) {
    BpeSpecialNames names;
    names.pad = pad;
    auto bpe = std::make_shared<BpeTokenizer>(BpeTokenizer::load_json(file.string(), names));
    return std::make_shared<WithMaskToken>(std::move(bpe), mask);
}

}  // namespace rudder
