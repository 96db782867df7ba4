// libFuzzer target: the chat-template Jinja renderer. The input is a template and its variables, separated by the
// first NUL byte: the variables a JSON object (anything else, or no NUL, gives a chat's usual variables: messages,
// bos_token, add_generation_prompt). Parsing and rendering, under small RenderLimits, either return a text within
// max_output_bytes or throw JinjaError, whose message is never the renderer's internal-error net; a crash, a
// sanitizer report or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include <rudder/text/jinja.hpp>

namespace {

using ordered_json = nlohmann::ordered_json;

const ordered_json& chat_variables() {
    static const ordered_json variables = ordered_json::parse(R"({
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                      "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, null, true]}}}]},
                     {"role": "tool", "content": "22"}],
        "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
    return variables;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string source = input.substr(0, nul);
    ordered_json variables = chat_variables();
    if (nul != std::string::npos) {
        ordered_json parsed = ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) variables = std::move(parsed);
    }
    // Small limits, so that each input ends in milliseconds and the limits themselves are reached often.
    rudder::RenderLimits limits;
    limits.max_steps = 20000;
    limits.max_output_bytes = 64 << 10;
    limits.max_value_bytes = 64 << 10;
    limits.max_value_depth = 32;
    limits.max_call_depth = 16;
    limits.max_render_depth = 200;
    uint64_t polls = 0;
    limits.cancelled = [&polls] { return ++polls > 1000000; };  // polled, never cancelling
    try {
        const rudder::JinjaTemplate parsed(source);
        const std::string out = parsed.render(variables, limits);
        if (out.size() > limits.max_output_bytes) {
            std::fprintf(stderr, "a text of %zu bytes past max_output_bytes\n", out.size());
            std::abort();
        }
    } catch (const rudder::JinjaError& e) {
        if (std::string(e.what()).find("internal error") != std::string::npos) {
            std::fprintf(stderr, "the internal-error net caught: %s\n", e.what());
            std::abort();
        }
    }
    return 0;
}
