// Chat messages to a prompt: a model's own chat template (tokenizer_config.json's "chat_template", rendered as
// transformers' apply_chat_template renders it), or, for a model without one, a plain format. docs/serving.md,
// "Chat".
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <rudder/text/jinja.hpp>

namespace rudder {

class ChatTemplate {
public:
    // The template of a model folder's tokenizer_config.json: "chat_template" as a string, or as a list of {"name",
    // "template"} (the one named "default"); its special tokens (bos_token, eos_token, ...: strings or {"content"})
    // are the template's variables. std::nullopt when the folder has no tokenizer_config.json or it has no template.
    // Throws std::runtime_error naming the file when it cannot be read, is not JSON, or its template does not parse.
    static std::optional<ChatTemplate> load(const std::filesystem::path& model_dir);

    // `special_tokens`: a JSON object of the template's variables besides messages (bos_token, eos_token, ...).
    ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens);

    // `messages`: [{"role", "content", ...}] as the template reads them; `extra`: more variables (transformers'
    // chat_template_kwargs: enable_thinking, date_string, ...), over the special tokens. JinjaError when the
    // template refuses them (its raise_exception) or fails, or the render passes one of `limits` (jinja.hpp;
    // messages or extra nested deeper than its max_value_depth are refused before they are copied).
    std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                       const RenderLimits& limits = RenderLimits()) const;

    // The token text that ends a turn, where the answer stops (eos_token); "" when the file names none.
    const std::string& end_of_turn() const { return end_of_turn_; }

private:
    JinjaTemplate template_;
    nlohmann::ordered_json special_tokens_;
    std::string end_of_turn_;
};

// The prompt of a model without a chat template: every message's content in order, joined by a space (the roles are
// not written: a model trained on plain text has no words for them). The answer continues the last message.
std::string plain_chat_prompt(const nlohmann::ordered_json& messages);

}  // namespace rudder
