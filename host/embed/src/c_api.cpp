// The C embedding API (include/rudder/rudder.h) over rudder::Generator. Every entry point catches everything: no
// exception crosses into C, and every failure becomes a status plus a message for the thread and the generator.
#include <rudder/rudder.h>

#include <rudder/base/paths.hpp>
#include <rudder/plugins/plugins.hpp>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>

#ifndef RUDDER_VERSION
#error "RUDDER_VERSION must be defined by the build"
#endif

namespace {

// ----- errors -----------------------------------------------------------------------------------------------------

std::string& thread_error() {
    thread_local std::string message;
    return message;
}

// A caller's mistake (a NULL pointer, an option out of range): RUDDER_ERR_INVALID_ARGUMENT.
class ArgumentError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// Runs `body`, turning every exception into a status. `error` (a generator's, or null) and the thread's message
// receive the text; `failure` is the status for an exception that is not one of the known kinds.
template <class Body>
rudder_status guarded(std::string* error, rudder_status failure, Body&& body) noexcept {
    rudder_status status = RUDDER_OK;
    std::string message;
    try {
        status = body();
    } catch (const rudder::RecipeError& e) {
        status = RUDDER_ERR_INVALID_RECIPE;
        const size_t n = e.issues().size();
        message = "invalid recipe (" + std::to_string(n) + (n == 1 ? " problem)\n" : " problems)\n") + e.what();
    } catch (const rudder::Cancelled& e) {
        status = RUDDER_ERR_CANCELLED;
        message = e.what();
    } catch (const ArgumentError& e) {
        status = RUDDER_ERR_INVALID_ARGUMENT;
        message = e.what();
    } catch (const std::bad_alloc&) {
        status = RUDDER_ERR_OUT_OF_MEMORY;
        message = "out of memory";
    } catch (const std::exception& e) {
        status = failure;
        message = e.what();
    } catch (...) {
        status = RUDDER_ERR_INTERNAL;
        message = "unknown exception";
    }
    if (status != RUDDER_OK) {
        try {
            if (message.empty()) message = rudder_status_name(status);
            if (error != nullptr) *error = message;
            thread_error() = std::move(message);
        } catch (...) {  // out of memory while keeping the message: the status still says what happened
        }
    }
    return status;
}

[[noreturn]] void invalid_argument(const std::string& what) { throw ArgumentError(what); }

// A failure found without running anything: keeps the message for the thread and returns `status`.
rudder_status fail(rudder_status status, const char* message) noexcept {
    try {
        thread_error() = message;
    } catch (...) {
    }
    return status;
}

// A caller's versioned struct: the members its struct_size covers, the rest from `defaults` (an older caller).
template <class T>
T read_versioned(const T* in, T defaults, const char* name) {
    if (in == nullptr) return defaults;
    if (in->struct_size < sizeof(uint32_t))
        invalid_argument(std::string(name) + ".struct_size is " + std::to_string(in->struct_size) + ": " +
                         (std::is_same_v<T, rudder_limits>
                              ? std::string("zero-initialise it and set struct_size = sizeof(rudder_limits)")
                              : "start from rudder_default_" + std::string(name + std::strlen("rudder_")) + "()"));
    std::memcpy(&defaults, in, std::min<size_t>(in->struct_size, sizeof(T)));
    defaults.struct_size = sizeof(T);
    return defaults;
}

// ----- logging ----------------------------------------------------------------------------------------------------

// Every message from Rudder and its plugins goes through spdlog; this sink hands it to the application's callback,
// or to stderr, never stdout (which belongs to the application).
class ApplicationSink final : public spdlog::sinks::base_sink<std::mutex> {
public:
    void set(rudder_log_fn fn, void* user_data) {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = fn;
        user_data_ = user_data;
    }

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        const std::string text(msg.payload.data(), msg.payload.size());
        if (fn_ != nullptr) {
            fn_(to_rudder_level(msg.level), text.c_str(), user_data_);
        } else {
            std::fprintf(stderr, "rudder: %s: %s\n", spdlog::level::to_string_view(msg.level).data(), text.c_str());
        }
    }
    void flush_() override {}

private:
    static int32_t to_rudder_level(spdlog::level::level_enum level) {
        switch (level) {
            case spdlog::level::trace:
            case spdlog::level::debug: return RUDDER_LOG_DEBUG;
            case spdlog::level::info: return RUDDER_LOG_INFO;
            case spdlog::level::warn: return RUDDER_LOG_WARN;
            default: return RUDDER_LOG_ERROR;
        }
    }
    rudder_log_fn fn_ = nullptr;
    void* user_data_ = nullptr;
};

spdlog::level::level_enum to_spdlog_level(int32_t level) {
    switch (level) {
        case RUDDER_LOG_DEBUG: return spdlog::level::debug;
        case RUDDER_LOG_INFO: return spdlog::level::info;
        case RUDDER_LOG_WARN: return spdlog::level::warn;
        case RUDDER_LOG_ERROR: return spdlog::level::err;
        default: return spdlog::level::off;
    }
}

std::shared_ptr<ApplicationSink> application_sink() {
    static const auto sink = std::make_shared<ApplicationSink>();
    return sink;
}

// Installs the sink as spdlog's default logger, once. An application that configured spdlog's default logger
// itself (it has a name; spdlog's own has none) keeps it until it calls rudder_set_log.
void install_logger(bool replace_application_logger) {
    static std::mutex mutex;
    static bool installed = false;
    std::lock_guard<std::mutex> lock(mutex);
    if (installed) return;
    if (!replace_application_logger && !spdlog::default_logger()->name().empty()) return;
    auto logger = std::make_shared<spdlog::logger>("rudder", application_sink());
    logger->set_level(spdlog::level::warn);
    spdlog::set_default_logger(std::move(logger));
    installed = true;
}

}  // namespace

// ----- handles ----------------------------------------------------------------------------------------------------

struct rudder_generator {
    std::unique_ptr<rudder::plugins::Registry> registry;  // outlives the generator: its controllers came from it
    std::unique_ptr<rudder::Generator> generator;
    rudder::RecipeLimits limits;
    std::mutex busy;  // one call at a time; a second gets RUDDER_ERR_BUSY
    std::string error;
    bool keep_partial = false;  // rudder_generator_keep_partial
};

struct rudder_results {
    std::vector<rudder::SampleResult> samples;
    std::vector<std::vector<rudder_verdict_info>> verdicts;  // [sample][controller], pointing into `samples`
    size_t verdict_count = 0;
    std::once_flag json_once;  // the JSON lines are made on first request: most callers never ask
    std::vector<std::string> json;
};

namespace {

std::vector<std::filesystem::path> search_path(const char* first, std::vector<std::filesystem::path> defaults) {
    std::vector<std::filesystem::path> dirs = rudder::split_path_list(first);
    dirs.insert(dirs.end(), defaults.begin(), defaults.end());
    return dirs;
}

rudder::RecipeLimits read_limits(const rudder_limits* given) {
    rudder::RecipeLimits limits;
    if (given == nullptr) return limits;
    rudder_limits zero{};
    zero.struct_size = sizeof(rudder_limits);
    const rudder_limits in = read_versioned(given, zero, "rudder_limits");
    auto set = [](int64_t value, int64_t& limit, const char* name) {
        if (value < 0)
            invalid_argument(std::string("rudder_limits.") + name + " is " + std::to_string(value) +
                             ": use 0 for the default or a positive limit");
        if (value > 0) limit = value;
    };
    set(in.max_steps, limits.max_steps, "max_steps");
    set(in.max_samples, limits.max_samples, "max_samples");
    set(in.max_batch_size, limits.max_batch_size, "max_batch_size");
    set(in.max_length, limits.max_length, "max_length");
    int64_t max_memory_mb = 0;
    set(in.max_memory_mb, max_memory_mb, "max_memory_mb");
    limits.max_memory_bytes = static_cast<uint64_t>(max_memory_mb) * 1000 * 1000;
    return limits;
}

rudder_status create(const char* recipe_json, const char* recipe_path, const rudder_options* options_in,
                     const rudder::RecipeLimits& limits, rudder_generator** out) {
    install_logger(false);
    if (out == nullptr) invalid_argument("out is NULL");
    *out = nullptr;
    if (recipe_json == nullptr && recipe_path == nullptr) invalid_argument("the recipe is NULL");
    const rudder_options options = read_versioned(options_in, rudder_default_options(), "rudder_options");

    std::vector<rudder::RecipeIssue> issues;
    rudder::Recipe recipe =
        recipe_path != nullptr
            ? rudder::load_recipe(recipe_path, limits, &issues)
            : rudder::parse_recipe(recipe_json, options.base_dir != nullptr ? options.base_dir : ".", limits, &issues);
    if (options.model != nullptr) {
        recipe.model = options.model;
        issues.erase(std::remove_if(issues.begin(), issues.end(), [](const auto& i) { return i.pointer == "/model"; }),
                     issues.end());
    }
    auto gen = std::make_unique<rudder_generator>();
    gen->limits = limits;
    gen->registry = std::make_unique<rudder::plugins::Registry>(
        search_path(options.plugin_path, rudder::plugins::Registry::default_search_path()));
    gen->generator = std::make_unique<rudder::Generator>(std::move(recipe), *gen->registry,
                                                         search_path(options.model_path, rudder::default_model_path()),
                                                         std::move(issues));
    *out = gen.release();
    return RUDDER_OK;
}

std::unique_ptr<rudder_results> make_results(std::vector<rudder::SampleResult> samples) {
    auto res = std::make_unique<rudder_results>();
    res->samples = std::move(samples);
    res->verdict_count = res->samples.empty() ? 0 : res->samples.front().controls.size();
    res->verdicts.resize(res->samples.size());
    for (size_t i = 0; i < res->samples.size(); ++i)
        for (const auto& c : res->samples[i].controls)
            res->verdicts[i].push_back(rudder_verdict_info{sizeof(rudder_verdict_info), c.label.c_str(),
                                                           c.verdict.satisfied, c.verdict.has_score ? 1 : 0,
                                                           c.verdict.score, c.verdict.detail.c_str()});
    return res;
}

}  // namespace

// ----- the API ----------------------------------------------------------------------------------------------------

extern "C" {

const char* rudder_status_name(rudder_status status) {
    switch (status) {
        case RUDDER_OK: return "ok";
        case RUDDER_ERR_INVALID_ARGUMENT: return "invalid argument";
        case RUDDER_ERR_UNSUPPORTED: return "unsupported";
        case RUDDER_ERR_BUFFER_TOO_SMALL: return "buffer too small";
        case RUDDER_ERR_INTERNAL: return "internal error";
        case RUDDER_ERR_CANCELLED: return "cancelled";
        case RUDDER_ERR_OUT_OF_MEMORY: return "out of memory";
        case RUDDER_ERR_INVALID_RECIPE: return "invalid recipe";
        case RUDDER_ERR_GENERATION_FAILED: return "generation failed";
        case RUDDER_ERR_BUSY: return "busy";
        default: return "unknown status";
    }
}

const char* rudder_version(void) { return RUDDER_VERSION; }
uint32_t rudder_api_version_major(void) { return RUDDER_API_VERSION_MAJOR; }
uint32_t rudder_api_version_minor(void) { return RUDDER_API_VERSION_MINOR; }
const char* rudder_last_error(void) { return thread_error().c_str(); }

rudder_status rudder_set_log(rudder_log_fn fn, void* user_data, int32_t min_level) {
    return guarded(nullptr, RUDDER_ERR_INTERNAL, [&] {
        install_logger(true);
        application_sink()->set(fn, user_data);
        spdlog::default_logger()->set_level(to_spdlog_level(min_level));
        return RUDDER_OK;
    });
}

int32_t rudder_keep_freed_memory_in_process(void) { return rudder::keep_freed_memory_in_process() ? 1 : 0; }

rudder_status rudder_set_compute_threads(int32_t max_threads) {
    if (max_threads < 0)
        return fail(RUDDER_ERR_INVALID_ARGUMENT,
                    "rudder_set_compute_threads: max_threads must be >= 0 (0 = every core)");
    rudder::set_compute_threads(max_threads);
    return RUDDER_OK;
}

rudder_options rudder_default_options(void) {
    rudder_options options{};
    options.struct_size = sizeof(rudder_options);
    return options;
}

rudder_status rudder_generator_create(const char* recipe_json, const rudder_options* options, rudder_generator** out) {
    return guarded(nullptr, RUDDER_ERR_INTERNAL, [&] {
        if (recipe_json == nullptr) invalid_argument("recipe_json is NULL");
        return create(recipe_json, nullptr, options, {}, out);
    });
}

rudder_status rudder_generator_create_from_file(const char* recipe_path, const rudder_options* options,
                                                rudder_generator** out) {
    return guarded(nullptr, RUDDER_ERR_INTERNAL, [&] {
        if (recipe_path == nullptr) invalid_argument("recipe_path is NULL");
        return create(nullptr, recipe_path, options, {}, out);
    });
}

rudder_status rudder_generator_create_limited(const char* recipe_json, const char* recipe_path,
                                              const rudder_options* options, const rudder_limits* limits,
                                              rudder_generator** out) {
    return guarded(nullptr, RUDDER_ERR_INTERNAL, [&] {
        if ((recipe_json == nullptr) == (recipe_path == nullptr))
            invalid_argument("give exactly one of recipe_json and recipe_path");
        return create(recipe_json, recipe_path, options, read_limits(limits), out);
    });
}

void rudder_generator_free(rudder_generator* gen) {
    if (gen == nullptr) return;
    {
        std::unique_lock<std::mutex> lock(gen->busy, std::try_to_lock);
        if (!lock.owns_lock()) {
            // Freeing it under the running call would crash the process; refusing costs the caller a later free.
            fail(RUDDER_ERR_BUSY,
                 "rudder_generator_free: the generator is busy with a call (its own progress "
                 "callback?); free it after that call returns");
            return;
        }
    }
    delete gen;
}

rudder_status rudder_generator_keep_partial(rudder_generator* gen, int32_t keep) {
    if (gen == nullptr) return fail(RUDDER_ERR_INVALID_ARGUMENT, "generator is NULL");
    std::unique_lock<std::mutex> lock(gen->busy, std::try_to_lock);
    if (!lock.owns_lock()) return fail(RUDDER_ERR_BUSY, "generator is busy with another call");
    gen->keep_partial = keep != 0;
    return RUDDER_OK;
}

const char* rudder_generator_last_error(const rudder_generator* gen) {
    return gen != nullptr ? gen->error.c_str() : "";
}

rudder_generate_options rudder_default_generate_options(void) {
    rudder_generate_options options{};
    options.struct_size = sizeof(rudder_generate_options);
    return options;
}

rudder_status rudder_generate(rudder_generator* gen, const rudder_generate_options* options_in, rudder_results** out) {
    if (gen == nullptr) return fail(RUDDER_ERR_INVALID_ARGUMENT, "generator is NULL");
    std::unique_lock<std::mutex> lock(gen->busy, std::try_to_lock);
    if (!lock.owns_lock()) return fail(RUDDER_ERR_BUSY, "generator is busy with another call");
    gen->error.clear();
    return guarded(&gen->error, RUDDER_ERR_GENERATION_FAILED, [&] {
        if (out == nullptr) invalid_argument("out is NULL");
        *out = nullptr;
        const rudder_generate_options options =
            read_versioned(options_in, rudder_default_generate_options(), "rudder_generate_options");
        rudder::RunOverrides overrides;
        if (options.samples < 0 || options.samples > gen->limits.max_samples)
            invalid_argument("samples must be 0 (the recipe's) or 1 to " + std::to_string(gen->limits.max_samples) +
                             ", got " + std::to_string(options.samples));
        if (options.samples > 0) overrides.samples = options.samples;
        if (options.override_seed != 0 && options.seed > static_cast<uint64_t>(INT64_MAX))
            invalid_argument("seed must be in [0, 9223372036854775807] (2^63 - 1), as a recipe's is; got " +
                             std::to_string(options.seed));
        if (options.override_seed != 0) overrides.seed = options.seed;

        rudder::ProgressCallback progress;
        if (options.on_progress != nullptr)
            progress = [&options](const rudder::Progress& p) {
                rudder_progress info{sizeof(rudder_progress), p.batch,         p.batches, p.step, p.steps, p.t,
                                     p.samples_done,          p.samples_total, nullptr,   0};
                std::vector<std::string> texts;
                std::vector<const char*> pointers;
                if (options.progress_text != 0 && p.current_texts) {
                    texts = p.current_texts();
                    for (const auto& t : texts) pointers.push_back(t.c_str());
                    info.texts = pointers.data();
                    info.n_texts = static_cast<int64_t>(pointers.size());
                }
                return options.on_progress(&info, options.user_data) == 0;
            };
        std::vector<rudder::SampleResult> finished;  // kept for a cancelled run that asked for them
        rudder::SampleCallback keep;
        if (gen->keep_partial) keep = [&finished](const rudder::SampleResult& s) { finished.push_back(s); };
        try {
            *out = make_results(gen->generator->generate(progress, keep, overrides)).release();
        } catch (const rudder::Cancelled&) {
            if (gen->keep_partial) *out = make_results(std::move(finished)).release();
            throw;
        }
        return RUDDER_OK;
    });
}

rudder_status rudder_generator_cancel(rudder_generator* gen) {
    if (gen == nullptr || gen->generator == nullptr) return RUDDER_ERR_INVALID_ARGUMENT;  // no message: signal-safe
    gen->generator->cancel();
    return RUDDER_OK;
}

size_t rudder_results_count(const rudder_results* res) { return res != nullptr ? res->samples.size() : 0; }

const char* rudder_results_text(const rudder_results* res, size_t i) {
    return res != nullptr && i < res->samples.size() ? res->samples[i].text.c_str() : nullptr;
}

const int64_t* rudder_results_tokens(const rudder_results* res, size_t i, size_t* n_tokens) {
    const bool valid = res != nullptr && i < res->samples.size();
    if (n_tokens != nullptr) *n_tokens = valid ? static_cast<size_t>(res->samples[i].n_tokens) : 0;
    return valid ? res->samples[i].tokens.data() : nullptr;
}

size_t rudder_results_verdict_count(const rudder_results* res) { return res != nullptr ? res->verdict_count : 0; }

const rudder_verdict_info* rudder_results_verdict(const rudder_results* res, size_t i, size_t k) {
    if (res == nullptr || i >= res->verdicts.size() || k >= res->verdicts[i].size()) return nullptr;
    return &res->verdicts[i][k];
}

const char* rudder_results_json(const rudder_results* res, size_t i) {
    if (res == nullptr || i >= res->samples.size()) return nullptr;
    auto* mutable_res = const_cast<rudder_results*>(res);  // the lazily made lines are a cache, not a change
    try {
        std::call_once(mutable_res->json_once, [mutable_res] {
            for (const auto& s : mutable_res->samples) mutable_res->json.push_back(rudder::sample_json(s).dump());
        });
    } catch (...) {
        thread_error() = "out of memory while writing JSON";
        return nullptr;
    }
    return res->json[i].c_str();
}

void rudder_results_free(rudder_results* res) { delete res; }

}  // extern "C"
