// libFuzzer target: the chat-template Jinja renderer. The input is a template and its variables, separated by the
// first NUL byte: the variables a JSON object (anything else, or no NUL, gives a chat's usual variables: messages,
// bos_token, add_generation_prompt). Parsing and rendering, under small RenderLimits (the default depths), on a
// thread with a 512 KiB stack (what a server's connection thread may have), either return a text within
// max_output_bytes or throw JinjaError, whose message is never the renderer's internal-error net; a crash, a stack
// overflow or other sanitizer report, or any other exception is a bug.
#include <pthread.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
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

// Whether a JinjaError is the renderer's or the parser's net under an exception it did not foresee: its fixed phrase
// right after "chat template line N: " (or "chat template: "), where no template's own text can be (a message that
// quotes a template's text, which may well say "internal error", starts with a phrase of its own or a quote).
bool from_the_net(const std::string& what) {
    size_t p = what.find(": ");
    if (p == std::string::npos) return false;
    const std::string rest = what.substr(p + 2);
    return rest.rfind("an operation on values it does not take", 0) == 0 ||
           rest.rfind("a construct the parser does not take", 0) == 0;
}

struct Job {
    std::string input;
};

void* run(void* argument) {
    const std::string& input = static_cast<Job*>(argument)->input;
    const size_t nul = input.find('\0');
    const std::string source = input.substr(0, nul);
    ordered_json variables = chat_variables();
    if (nul != std::string::npos) {
        ordered_json parsed = ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) variables = std::move(parsed);
    }
    // Small budgets, so that each input ends in milliseconds and they are reached often; the default depths, which
    // the small stack checks.
    rudder::RenderLimits limits;
    limits.max_steps = 20000;
    limits.max_output_bytes = 64 << 10;
    limits.max_value_bytes = 64 << 10;
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
        if (from_the_net(e.what())) {
            std::fprintf(stderr, "the internal-error net caught: %s\n", e.what());
            std::abort();
        }
    }
    return nullptr;
}

// One worker thread with a 512 KiB stack, made once (a thread per input cost three quarters of the time under
// ASan), takes each input in turn.
class Worker {
public:
    Worker() {
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setstacksize(&attributes, 512 * 1024);
        if (pthread_create(&thread_, &attributes, loop, this) != 0) std::abort();
        pthread_attr_destroy(&attributes);
    }

    void render(Job& job) {
        std::unique_lock<std::mutex> lock(mutex_);
        job_ = &job;
        changed_.notify_all();
        changed_.wait(lock, [this] { return job_ == nullptr; });
    }

private:
    static void* loop(void* self) {
        auto& w = *static_cast<Worker*>(self);
        for (;;) {
            std::unique_lock<std::mutex> lock(w.mutex_);
            w.changed_.wait(lock, [&w] { return w.job_ != nullptr; });
            run(w.job_);
            w.job_ = nullptr;
            w.changed_.notify_all();
        }
    }

    pthread_t thread_{};
    std::mutex mutex_;
    std::condition_variable changed_;
    Job* job_ = nullptr;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Worker* worker = new Worker();  // never destroyed: the thread runs until the process ends
    Job job{std::string(reinterpret_cast<const char*>(data), size)};
    worker->render(job);
    return 0;
}
