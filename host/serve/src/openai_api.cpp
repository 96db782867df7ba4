#include "openai_api.hpp"

#include <algorithm>
#include <random>

#include <rudder/nn/model_files.hpp>
#include <rudder/rudder_json.hpp>
#include <rudder/runtime/model.hpp>

#include "answers.hpp"

namespace rudder::serve {
namespace {

using json = nlohmann::json;

// The fields OpenAI's clients send that change nothing here at their default value, and are refused at any other
// (a penalty or a token bias this server would silently not apply).
bool is_default(const std::string& key, const JsonDocument& value) {
    if (key == "frequency_penalty" || key == "presence_penalty") return value.is_number() && value.get<double>() == 0;
    if (key == "logprobs") return value.is_boolean() && !value.get<bool>();
    if (key == "logit_bias") return value.is_object() && value.empty();
    // OpenAI keeps metadata with a stored completion and ignores it otherwise: up to 16 string values, keys of at
    // most 64 characters and values of at most 512. This server stores nothing, so a well-formed one is ignored.
    if (key == "metadata")
        return value.is_object() && value.size() <= 16 &&
               std::all_of(value.items().begin(), value.items().end(), [](const auto& item) {
                   return item.key().size() <= 64 && item.value().is_string() &&
                          item.value().template get_ref<const std::string&>().size() <= 512;
               });
    // Text is what every model here writes.
    if (key == "modalities") return value == JsonDocument::array({"text"});
    if (key == "tools" || key == "functions") return value.is_array() && value.empty();
    if (key == "tool_choice" || key == "function_call") return value == "none";
    if (key == "parallel_tool_calls" || key == "store") return value.is_boolean();
    if (key == "service_tier") return value.is_string();
    return false;
}

const char* why_not(const std::string& key) {
    if (key == "frequency_penalty" || key == "presence_penalty")
        return "is not supported (a diffusion sampler fills every position at once; there is no history of emitted "
               "tokens to penalise): leave it out or 0; the exclude_words controller forbids words";
    if (key == "logprobs" || key == "top_logprobs")
        return "is not supported (tokens are committed out of order, each under a different context)";
    if (key == "logit_bias")
        return "is not supported: the exclude_words controller forbids words (\"rudder\": "
               "{\"controllers\": [...]})";
    if (key == "metadata")
        return "expected an object of at most 16 string values (keys of at most 64 characters, values of at most 512), "
               "as OpenAI takes it; it is ignored here (nothing is stored)";
    if (key == "modalities") return "is only [\"text\"] here: no model of this server writes audio";
    if (key == "reasoning_effort")
        return "is not supported: no model here reasons before answering (OpenAI refuses it for such models too)";
    if (key == "tools" || key == "functions" || key == "tool_choice" || key == "function_call")
        return "is not supported: tool calls are not parsed here; response_format with a JSON Schema holds the answer "
               "to a shape";
    return "is not supported here";
}

// A chat message's text: a string, or OpenAI's array of {"type": "text", "text"} parts joined.
std::optional<std::string> message_text(const JsonDocument& content, const std::string& at,
                                        std::vector<RecipeIssue>& issues) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) {
        issues.push_back({at, "expected a string or an array of {\"type\": \"text\", \"text\"} parts"});
        return std::nullopt;
    }
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const JsonDocument& part = content[i];
        const std::string where = at + "/" + std::to_string(i);
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
            issues.push_back({where, part.is_object() && part.contains("type") && part["type"] != "text"
                                         ? "only text parts are supported (this model reads text)"
                                         : "expected {\"type\": \"text\", \"text\": \"...\"}"});
            continue;
        }
        text += part["text"].get<std::string>();
    }
    return text;
}

// The messages as the template reads them ({"role", "content"} with the content as one string), every problem
// recorded at /messages/...
JsonDocument read_messages(const JsonDocument& value, std::vector<RecipeIssue>& issues) {
    JsonDocument out = JsonDocument::array();
    if (!value.is_array() || value.empty()) {
        issues.push_back({"/messages", "expected a non-empty array of {\"role\", \"content\"}"});
        return out;
    }
    static const std::vector<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < value.size(); ++i) {
        const std::string at = "/messages/" + std::to_string(i);
        json_input::DocumentReader m(value[i], at, issues);
        const auto role = m.choice("role", roles, json_input::kRequired);
        const JsonDocument* content = m.any("content", json_input::kRequired, "a string or an array of text parts");
        const auto name = m.text("name");
        m.any("tool_call_id");
        m.reject_unknown_keys();
        if (!role || content == nullptr) continue;
        const auto text = message_text(*content, m.pointer("content"), issues);
        if (!text) continue;
        JsonDocument message = {{"role", *role}, {"content", *text}};
        if (name) message["name"] = *name;
        out.push_back(std::move(message));
    }
    return out;
}

// A recipe key of the "rudder" extension, with where it goes.
const std::vector<std::string> kExtensionKeys = {"sampler", "controllers", "guidance", "candidates", "batch_size",
                                                 "family",  "isolation",   "device",   "weights"};

}  // namespace

std::shared_ptr<const PromptTools::Tools> PromptTools::of(const std::filesystem::path& model_dir) {
    // One load per folder however many requests ask at once (32 first chat requests each loaded the tokenizer and
    // template: 2.6 GB at the peak): the first asker loads, the others wait for its result.
    std::promise<std::shared_ptr<const Tools>> promise;
    std::shared_future<std::shared_ptr<const Tools>> loaded_or_loading;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto found = kept_.find(model_dir);
        if (found != kept_.end()) {
            loaded_or_loading = found->second;
        } else {
            if (order_.size() >= kKept) {
                kept_.erase(order_.front());
                order_.erase(order_.begin());
            }
            order_.push_back(model_dir);
            kept_[model_dir] = promise.get_future().share();
        }
    }
    if (loaded_or_loading.valid()) return loaded_or_loading.get();  // rethrows the loader's error
    try {
        if (on_load_) on_load_();
        auto tools = std::make_shared<Tools>();
        tools->tokenizer = load_tokenizer(model_dir);
        tools->chat = ChatTemplate::load(model_dir);
        promise.set_value(tools);
        return tools;
    } catch (...) {
        promise.set_exception(std::current_exception());
        // Not kept: the next request reads the folder again (it may have been mended).
        std::lock_guard<std::mutex> lock(mutex_);
        kept_.erase(model_dir);
        order_.erase(std::remove(order_.begin(), order_.end(), model_dir), order_.end());
        throw;
    }
}

CompletionRequest read_completion_request(const std::string& body, bool chat, const ServerOptions& options,
                                          const ModelCatalog& catalog, PromptTools& prompt_tools,
                                          const RenderLimits& render_limits) {
    JsonDocument j;
    try {
        j = json_input::parse_document(body);
    } catch (const std::exception& e) {
        throw RequestError{400, std::string("the request body is not valid JSON: ") + e.what(), {}};
    }
    if (!j.is_object()) throw RequestError{400, "the request body must be a JSON object", {}};
    // OpenAI's clients write null for a field left at its default.
    for (auto it = j.begin(); it != j.end();) it = it->is_null() ? j.erase(it) : std::next(it);

    std::vector<RecipeIssue> issues;
    json_input::DocumentReader r(j, "", issues);
    CompletionRequest out;
    out.chat = chat;
    const auto model = r.text("model", json_input::kRequired);
    JsonDocument messages;
    std::optional<std::string> prompt;
    JsonDocument template_kwargs = JsonDocument::object();
    bool add_generation_prompt = true;
    if (chat) {
        const JsonDocument* m = r.any("messages", json_input::kRequired, "an array of messages");
        if (m != nullptr) messages = read_messages(*m, issues);
        if (auto kwargs = r.object("chat_template_kwargs")) template_kwargs = std::move(*kwargs);
        add_generation_prompt = r.boolean("add_generation_prompt").value_or(true);
    } else {
        const JsonDocument* p = r.any("prompt", json_input::kRequired, "a string");
        if (p != nullptr && p->is_string()) {
            prompt = p->get<std::string>();
        } else if (p != nullptr && p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
            prompt = (*p)[0].get<std::string>();
        } else if (p != nullptr) {
            r.issue("prompt", p->is_array() && p->size() > 1
                                  ? "one prompt per request here (ask for n samples of it with \"n\")"
                                  : "expected a string (token ids are not taken: send the text)");
        }
        out.echo = r.boolean("echo").value_or(false);
        if (r.has("suffix"))
            r.issue("suffix",
                    "is not supported by completions: a recipe's span controller with \"suffix\" and "
                    "\"length\" infills (POST /v1/generate)");
        r.any("suffix");
    }
    const std::string max_key = chat && r.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    out.max_tokens = r.integer(max_key, 1, options.limits.max_length).value_or(16);
    if (chat && max_key == "max_completion_tokens" && r.has("max_tokens"))
        r.issue("max_tokens", "give max_tokens or max_completion_tokens, not both");
    if (chat) r.any(max_key == "max_tokens" ? "max_completion_tokens" : "max_tokens");
    out.n = r.integer("n", 1, options.limits.max_samples).value_or(1);
    if (const auto best_of = r.integer("best_of", 1, options.limits.max_samples); best_of && *best_of != out.n)
        r.issue("best_of", "is not supported (samples are not ranked here): leave it out or equal to n");
    const auto temperature = r.number("temperature", 0, 2);
    const auto top_p = r.positive("top_p", 1);
    const auto seed = r.integer("seed", 0, INT64_MAX);
    if (const JsonDocument* stop = r.any("stop")) {
        if (stop->is_string() && !stop->get<std::string>().empty()) {
            out.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array() && stop->size() <= 4 &&
                   std::all_of(stop->begin(), stop->end(),
                               [](const JsonDocument& s) { return s.is_string() && !s.get<std::string>().empty(); })) {
            for (const auto& s : *stop) out.stop.push_back(s.get<std::string>());
        } else {
            r.issue("stop", "expected a non-empty string or an array of up to 4 of them");
        }
    }
    out.generate.stream = r.boolean("stream").value_or(false);
    if (const auto so = r.object("stream_options")) {
        json_input::DocumentReader s(*so, "/stream_options", issues);
        out.include_usage = s.boolean("include_usage").value_or(false);
        s.reject_unknown_keys();
        if (!out.generate.stream) r.issue("stream_options", "only with \"stream\": true");
    }
    const JsonDocument* response_format = r.any("response_format");
    const JsonDocument extension = r.object("rudder").value_or(JsonDocument::object());
    if (const JsonDocument* user = r.any("user"); user != nullptr && !user->is_string())
        r.issue("user", "expected a string (the client's end user, for its own records)");
    for (const char* key : {"frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "logit_bias",
                            "metadata", "tools", "functions", "tool_choice", "function_call", "parallel_tool_calls",
                            "store", "service_tier", "modalities", "reasoning_effort"}) {
        const JsonDocument* v = r.any(key);
        if (v != nullptr && !is_default(key, *v)) r.issue(key, why_not(key));
    }
    r.reject_unknown_keys();

    // The recipe: the model, the prompt as a span prefix, then the response format's controller, then the
    // extension's controllers.
    JsonDocument recipe = JsonDocument::object();
    std::optional<std::filesystem::path> model_dir;
    if (model) {
        out.model = *model;
        recipe["model"] = *model;
        try {
            model_dir = catalog.find(*model, ".");
        } catch (const ModelError& e) {
            throw RequestError{404, e.what(), {{"/model", e.what()}}};
        }
    }
    json_input::DocumentReader x(extension, "/rudder", issues);
    JsonDocument sampler = x.object("sampler").value_or(JsonDocument::object());
    JsonDocument controllers = x.array("controllers").value_or(JsonDocument::array());
    for (const auto& key : kExtensionKeys)
        if (key != "sampler" && key != "controllers" && x.has(key)) recipe[key] = *x.any(key);
    x.reject_unknown_keys();
    if (temperature) sampler["temperature"] = *temperature;
    if (top_p && *top_p < 1) sampler["top_p"] = *top_p;
    if (!sampler.empty()) recipe["sampler"] = sampler;
    if (seed) recipe["seed"] = *seed;
    recipe["samples"] = out.n;

    if (model_dir) {
        try {
            out.tools = prompt_tools.of(*model_dir);
        } catch (const std::exception& e) {
            issues.push_back({"/model", e.what()});
        }
    }
    if (out.tools && chat && !messages.empty() && issues.empty()) {
        try {
            out.prompt = out.tools->chat
                             ? out.tools->chat->render(messages, add_generation_prompt, template_kwargs, render_limits)
                             : plain_chat_prompt(messages);
        } catch (const JinjaError& e) {
            issues.push_back({"/messages", std::string("the model's chat template refuses them: ") + e.what()});
        }
        if (out.tools->chat && !out.tools->chat->end_of_turn().empty())
            out.stop.push_back(out.tools->chat->end_of_turn());
    } else if (prompt) {
        out.prompt = *prompt;
    }
    const std::string prompt_pointer = chat ? "/messages" : "/prompt";
    JsonDocument all = JsonDocument::array();
    if (!out.prompt.empty()) {
        all.push_back({{"plugin", "span"}, {"name", "prompt"}, {"params", {{"prefix", out.prompt}}}});
        out.pointers.emplace_back("/controllers/0", prompt_pointer);
    }
    const bool formatted = response_format != nullptr;
    if (formatted) {
        if (const std::optional<JsonDocument> controller = response_format_controller(*response_format, issues)) {
            out.pointers.emplace_back("/controllers/" + std::to_string(all.size()), "/response_format");
            all.push_back(*controller);
        }
    }
    const size_t first_own = all.size();
    if (first_own > 0)
        for (size_t i = 0; i < controllers.size(); ++i)
            out.pointers.emplace_back("/controllers/" + std::to_string(first_own + i),
                                      "/rudder/controllers/" + std::to_string(i));
    for (const auto& c : controllers) all.push_back(c);
    if (!all.empty()) recipe["controllers"] = all;
    if (!recipe.contains("isolation")) recipe["isolation"] = options.isolation;

    if (out.tools) {
        out.prompt_ids = out.tools->tokenizer->encode(out.prompt);
        const int64_t length = static_cast<int64_t>(out.prompt_ids.size()) + out.max_tokens;
        if (length > options.limits.max_length)
            issues.push_back({prompt_pointer, "the prompt's " + std::to_string(out.prompt_ids.size()) +
                                                  " tokens and max_tokens " + std::to_string(out.max_tokens) +
                                                  " make " + std::to_string(length) +
                                                  " positions, over this "
                                                  "server's limit of " +
                                                  std::to_string(options.limits.max_length)});
        recipe["max_length"] = length;
        // The answer is what the format holds, from the first position after the prompt.
        if (formatted && recipe.contains("controllers"))
            for (auto& c : recipe["controllers"])
                if (c.value("plugin", "") == "json_schema") c["params"]["start"] = out.prompt_ids.size();
    }
    // The response format's compile within this server's budgets (structured-output.md, "Budgets"): no longer than
    // a request may run (the compile's own default, 60 s, where that is longer), its token table within a quarter of
    // a request's memory. Constants of the server, so requests of one schema still share a generator.
    if (formatted && recipe.contains("controllers")) {
        const double seconds = std::min(60.0, std::max(0.001, options.timeout_seconds));
        const int64_t quarter = static_cast<int64_t>(options.limits.max_memory_bytes / 4);
        const int64_t table =
            std::clamp<int64_t>(quarter > 0 ? quarter : int64_t{512} << 20, int64_t{1} << 20, int64_t{512} << 20);
        for (auto& c : recipe["controllers"]) {
            const std::string plugin = c.value("plugin", "");
            if (plugin != "json_schema" && plugin != "regex") continue;
            if (!c["params"].contains("compile_seconds")) c["params"]["compile_seconds"] = seconds;
            if (!c["params"].contains("max_table_bytes")) c["params"]["max_table_bytes"] = table;
        }
    }
    // The rest of the recipe's pointers, so every problem is told where the client put it.
    out.pointers.emplace_back("/max_length", "/max_tokens");
    out.pointers.emplace_back("/samples", "/n");
    out.pointers.emplace_back("/seed", "/seed");
    out.pointers.emplace_back("/model", "/model");
    if (temperature) out.pointers.emplace_back("/sampler/temperature", "/temperature");
    if (top_p) out.pointers.emplace_back("/sampler/top_p", "/top_p");
    std::sort(out.pointers.begin(), out.pointers.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

    std::vector<RecipeIssue> recipe_issues;
    check_client_recipe(recipe, options, recipe_issues);
    for (auto& issue : recipe_issues)
        issues.push_back({request_pointer(out, issue.pointer.substr(std::string("/recipe").size())), issue.message});
    if (!issues.empty()) throw RequestError{400, "invalid request", issues};
    out.generate.recipe = std::move(recipe);
    out.generate.seed = seed ? std::optional<uint64_t>(static_cast<uint64_t>(*seed)) : std::nullopt;
    out.generate.pointer_prefix = "/recipe";  // the loader's problems, translated by openai_error
    out.generate.samples_pointer = "/n";
    return out;
}

std::string request_pointer(const CompletionRequest& request, const std::string& recipe_pointer) {
    for (const auto& [from, to] : request.pointers) {
        if (recipe_pointer == from) return to;
        if (recipe_pointer.compare(0, from.size(), from) == 0 && recipe_pointer[from.size()] == '/')
            // Inside a controller the client did not write (the prompt's span, the response format's): the field.
            return to == "/prompt" || to == "/messages" || to == "/response_format"
                       ? to
                       : to + recipe_pointer.substr(from.size());
    }
    return "/rudder" + recipe_pointer;  // a key of the extension's recipe
}

json openai_error(const RequestError& e, const CompletionRequest* request) {
    json error = {{"message", e.message},
                  {"type", e.status >= 500 ? "server_error" : "invalid_request_error"},
                  {"param", nullptr},
                  {"code", nullptr}};
    if (e.status == 404) error["code"] = "model_not_found";
    if (e.status == 503) error["type"] = "server_overloaded";
    if (e.status == 504) error["type"] = "timeout";
    if (!e.issues.empty()) {
        json issues = json::array();
        std::string message;
        for (const auto& issue : e.issues) {
            std::string pointer = issue.pointer;
            std::string said = issue.message;
            if (request != nullptr && pointer.rfind("/recipe", 0) == 0) {
                if (pointer == "/recipe/max_length")  // the positions are the client's two numbers
                    said += " (the prompt's " + std::to_string(request->prompt_ids.size()) + " tokens and max_tokens " +
                            std::to_string(request->max_tokens) + ")";
                pointer = request_pointer(*request, pointer.substr(7));
            }
            issues.push_back({{"pointer", pointer}, {"message", said}});
            message += (message.empty() ? "" : "; ") + (pointer.empty() ? std::string("/") : pointer) + ": " + said;
        }
        // OpenAI's "param" names one field, without the slash.
        const std::string first = issues[0]["pointer"].get<std::string>();
        error["param"] = first.empty() ? first : first.substr(1);
        error["message"] = message;
        error["issues"] = issues;
    }
    return {{"error", error}};
}

Choice choice_of(const CompletionRequest& request, const json& sample) {
    Choice choice;
    const Tokenizer& tokenizer = *request.tools->tokenizer;
    std::vector<int64_t> ids = sample.value("tokens", std::vector<int64_t>());
    const size_t prompt_n = std::min(request.prompt_ids.size(), ids.size());
    const std::vector<int64_t> answer(ids.begin() + static_cast<std::ptrdiff_t>(prompt_n), ids.end());
    // The answer's text as the whole sample spells it after the prompt (a word-level decoder's space between them
    // belongs to the answer), else decoded alone.
    const std::string whole = tokenizer.decode(ids.data(), static_cast<int64_t>(ids.size()));
    const std::string prompt_text = tokenizer.decode(ids.data(), static_cast<int64_t>(prompt_n));
    std::string text = whole.compare(0, prompt_text.size(), prompt_text) == 0
                           ? whole.substr(prompt_text.size())
                           : tokenizer.decode(answer.data(), static_cast<int64_t>(answer.size()));
    // Ends at the first stop sequence (the request's, a chat template's end of turn).
    size_t cut = std::string::npos;
    for (const auto& stop : request.stop) cut = std::min(cut, text.find(stop));
    choice.completion_tokens = static_cast<int64_t>(answer.size());
    if (cut != std::string::npos) {
        // The answer's tokens spell the text less what the whole sample put before them (a word decoder's space).
        const size_t alone = tokenizer.decode(answer.data(), static_cast<int64_t>(answer.size())).size();
        const size_t lead = text.size() > alone ? text.size() - alone : 0;
        const size_t kept = cut > lead ? cut - lead : 0;
        text.resize(cut);
        choice.finish_reason = "stop";
        // The tokens written up to the stop: the shortest prefix of the answer that spells the text kept (a longer
        // prefix spells no less, so a bisection finds it).
        int64_t lo = 0, hi = static_cast<int64_t>(answer.size());
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (tokenizer.decode(answer.data(), mid).size() >= kept)
                hi = mid;
            else
                lo = mid + 1;
        }
        choice.completion_tokens = lo;
    } else {
        // The model ended the text (its padding token) before max_tokens, or it used them all.
        choice.finish_reason = static_cast<int64_t>(answer.size()) < request.max_tokens ? "stop" : "length";
    }
    choice.text = request.echo ? request.prompt + text : text;
    choice.controls = sample.value("controls", json::object());
    return choice;
}

namespace {

json usage(const CompletionRequest& request, int64_t completion_tokens) {
    const int64_t prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

json completion_json(const CompletionRequest& request, const std::string& id, int64_t created,
                     const std::vector<Choice>& choices, const json& run) {
    json out_choices = json::array();
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        const Choice& c = choices[i];
        completion_tokens += c.completion_tokens;
        json choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
        if (request.chat)
            choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        else
            choice["text"] = c.text;
        out_choices.push_back(std::move(choice));
    }
    json controls = json::array();
    for (const auto& c : choices) controls.push_back(c.controls);
    return {{"id", id},
            {"object", request.chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", request.model},
            {"system_fingerprint", nullptr},
            {"choices", out_choices},
            {"usage", usage(request, completion_tokens)},
            {"rudder", {{"run", run}, {"controls", controls}, {"prompt", request.prompt}}}};
}

json chunk_json(const CompletionRequest& request, const std::string& id, int64_t created, int64_t index,
                const std::string& text, const std::string& finish_reason, bool first) {
    json choice = {{"index", index},
                   {"logprobs", nullptr},
                   {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
    if (request.chat) {
        choice["delta"] = json::object();
        if (first) choice["delta"]["role"] = "assistant";
        if (!text.empty() || first) choice["delta"]["content"] = text;
    } else {
        choice["text"] = text;
    }
    return {{"id", id},
            {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", request.model},
            {"system_fingerprint", nullptr},
            {"choices", json::array({choice})}};
}

json usage_chunk_json(const CompletionRequest& request, const std::string& id, int64_t created,
                      int64_t completion_tokens) {
    return {{"id", id},
            {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", request.model},
            {"choices", json::array()},
            {"usage", usage(request, completion_tokens)}};
}

std::string completion_id(bool chat) {
    static thread_local std::mt19937_64 random{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string id = chat ? "chatcmpl-" : "cmpl-";
    for (int i = 0; i < 24; ++i) id += hex[random() % 16];
    return id;
}

}  // namespace rudder::serve
