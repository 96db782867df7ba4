#include <rudder/text/chat_template.hpp>

#include <climits>
#include <stdexcept>

#include <rudder/text/text_files.hpp>

namespace rudder {

namespace {

using ordered_json = nlohmann::ordered_json;

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object {"content", ...}.
std::optional<std::string> token_text(const ordered_json& value) {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_object() && value.contains("content") && value["content"].is_string())
        return value["content"].get<std::string>();
    return std::nullopt;
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::load(const std::filesystem::path& model_dir) {
    const std::filesystem::path file = model_dir / "tokenizer_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) return std::nullopt;
    const std::string text = read_small_file(file, kMaxConfigFileBytes);  // a FIFO or a huge file refused, named
    ordered_json config;
    try {
        config = ordered_json::parse(text);
    } catch (const std::exception& e) {
        throw std::runtime_error("'" + file.string() + "' is not valid JSON: " + e.what());
    }
    if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
    const ordered_json& entry = config["chat_template"];
    std::string source;
    if (entry.is_string()) {
        source = entry.get<std::string>();
    } else if (entry.is_array()) {
        for (const auto& named : entry)
            if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
                named["template"].is_string())
                source = named["template"].get<std::string>();
        if (source.empty())
            throw std::runtime_error("'" + file.string() + "': chat_template is a list without a \"default\" one");
    } else {
        throw std::runtime_error("'" + file.string() + "': chat_template must be a string or a list of templates");
    }
    ordered_json special = ordered_json::object();
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"})
        if (config.contains(key))
            if (const auto text_of = token_text(config[key])) special[key] = *text_of;
    try {
        return ChatTemplate(source, std::move(special));
    } catch (const JinjaError& e) {
        throw std::runtime_error("'" + file.string() + "': " + e.what());
    }
}

ChatTemplate::ChatTemplate(const std::string& source, ordered_json special_tokens)
    : template_(source), special_tokens_(std::move(special_tokens)) {
    if (!special_tokens_.is_object()) throw std::invalid_argument("ChatTemplate: special tokens must be an object");
    if (special_tokens_.contains("eos_token") && special_tokens_["eos_token"].is_string())
        end_of_turn_ = special_tokens_["eos_token"].get<std::string>();
}

std::string ChatTemplate::render(const ordered_json& messages, bool add_generation_prompt, const ordered_json& extra,
                                 const RenderLimits& limits) const {
    if (!extra.is_object()) throw JinjaError("a chat template's extra variables must be a JSON object");
    // Copying a JSON value recurses once per level: a request's messages nested 100,000 deep would overflow the
    // stack here, before the renderer's own check.
    // (extra is an object of variables: its own level is not a variable's.)
    const int depth = limits.max_value_depth;
    if (nests_deeper_than(messages, depth) || nests_deeper_than(extra, depth < INT_MAX ? depth + 1 : depth))
        throw JinjaError("a chat template's messages or variables nest lists and objects more than " +
                         std::to_string(limits.max_value_depth) + " deep (RenderLimits::max_value_depth)");
    ordered_json variables = special_tokens_;
    variables.update(extra);
    variables["messages"] = messages;
    variables["add_generation_prompt"] = add_generation_prompt;
    return template_.render(variables, limits);
}

std::string plain_chat_prompt(const ordered_json& messages) {
    std::string out;
    for (const auto& message : messages) {
        if (!message.is_object() || !message.contains("content") || !message["content"].is_string()) continue;
        const std::string& content = message["content"].get_ref<const std::string&>();
        if (content.empty()) continue;
        out += (out.empty() ? "" : " ") + content;
    }
    return out;
}

}  // namespace rudder
