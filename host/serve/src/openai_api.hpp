// OpenAI's completions and chat completions (docs/serving.md, "OpenAI-compatible API"): a request body read into the
// recipe it runs (the prompt as a `span` prefix, max_tokens after it, the sampler's temperature and top_p, the
// response_format's structured-output controller, and Rudder's own "rudder" extension), and the samples of its run
// written back as OpenAI's objects and stream chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <rudder/serve/server_options.hpp>
#include <rudder/text/chat_template.hpp>
#include <rudder/text/tokenizer.hpp>

#include "model_catalog.hpp"
#include "request.hpp"

namespace rudder::serve {

// A model's tokenizer and chat template, read once per model folder (without its weights): a request's prompt is
// counted in tokens before its recipe is built.
class PromptTools {
public:
    struct Tools {
        std::shared_ptr<const Tokenizer> tokenizer;
        std::optional<ChatTemplate> chat;  // none: the plain format
    };
    // on_load: told each time a folder is read (the metrics).
    explicit PromptTools(std::function<void()> on_load = {}) : on_load_(std::move(on_load)) {}
    // Throws ModelError (the model's files) or std::runtime_error (its tokenizer_config.json). Requests asking for
    // a folder that is being read wait for that reading.
    std::shared_ptr<const Tools> of(const std::filesystem::path& model_dir);

private:
    static constexpr size_t kKept = 16;  // model folders; beyond, the oldest is read again when asked for
    const std::function<void()> on_load_;
    std::mutex mutex_;
    std::map<std::filesystem::path, std::shared_future<std::shared_ptr<const Tools>>> kept_;  // loaded or loading
    std::vector<std::filesystem::path> order_;
};

// A completion request read: the recipe it runs and what its answer needs.
struct CompletionRequest {
    bool chat = false;
    std::string model;
    GenerateRequest generate;  // the recipe, the seed, stream
    std::string prompt;        // the text the answer continues (a chat's rendered messages)
    std::vector<int64_t> prompt_ids;
    int64_t max_tokens = 16;
    int64_t n = 1;
    std::vector<std::string> stop;  // the request's; a chat also stops at its template's end of turn
    bool echo = false;
    bool include_usage = false;  // stream_options.include_usage
    std::shared_ptr<const PromptTools::Tools> tools;
    // Where the recipe's problems are in the request: recipe pointer prefix -> request pointer, longest first.
    std::vector<std::pair<std::string, std::string>> pointers;
};

// Reads a POST /v1/completions (chat false) or /v1/chat/completions body. RequestError: 400 with every problem at its
// pointer in the request, 404 for a model the server does not have.
// The chat template renders within `render_limits` (jinja.hpp: steps, sizes, depths, and the request's deadline or
// the server's drain through its `cancelled`); a template that fails or passes a limit is a 400 at /messages.
CompletionRequest read_completion_request(const std::string& body, bool chat, const ServerOptions& options,
                                          const ModelCatalog& catalog, PromptTools& tools,
                                          const RenderLimits& render_limits = RenderLimits());

// A recipe problem's pointer as the request's (max_length -> /max_tokens, the prompt's span -> /prompt, ...).
std::string request_pointer(const CompletionRequest& request, const std::string& recipe_pointer);

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}, with Rudder's "issues" kept inside it.
nlohmann::json openai_error(const RequestError& e, const CompletionRequest* request);

// One choice of the answer from a sample of the run (sample_json's object).
struct Choice {
    std::string text;
    std::string finish_reason;  // "stop" (the model ended it, or a stop sequence) or "length"
    int64_t completion_tokens = 0;
    nlohmann::json controls;  // each controller's verdict, Rudder's extension
};
Choice choice_of(const CompletionRequest& request, const nlohmann::json& sample);

// The whole answer: "text_completion" or "chat.completion", with usage.
nlohmann::json completion_json(const CompletionRequest& request, const std::string& id, int64_t created,
                               const std::vector<Choice>& choices, const nlohmann::json& run);
// A stream chunk for one choice ("text_completion" or "chat.completion.chunk"); with `finish_reason` the choice's
// last chunk.
nlohmann::json chunk_json(const CompletionRequest& request, const std::string& id, int64_t created, int64_t index,
                          const std::string& text, const std::string& finish_reason, bool first);
// The last chunk with usage and no choices (stream_options.include_usage).
nlohmann::json usage_chunk_json(const CompletionRequest& request, const std::string& id, int64_t created,
                                int64_t completion_tokens);

// "cmpl-" or "chatcmpl-" and 24 random hex digits.
std::string completion_id(bool chat);

}  // namespace rudder::serve
