/*
 * rudder.h — Rudder's C embedding API: controlled text generation with diffusion language models from a C (or
 * Python, or any FFI) program. C99; depends only on <stddef.h> and <stdint.h>. Link with librudder.so
 * (CMake: find_package(Rudder CONFIG) and Rudder::rudder; pkg-config: rudder). No LibTorch header is needed.
 *
 * Usage:
 *
 *     rudder_generator* gen = NULL;
 *     if (rudder_generator_create_from_file("recipe.json", NULL, &gen) != RUDDER_OK) {
 *         fprintf(stderr, "%s\n", rudder_last_error());                 // every problem, with its JSON pointer
 *         return 1;
 *     }
 *     rudder_results* res = NULL;
 *     if (rudder_generate(gen, NULL, &res) == RUDDER_OK) {
 *         for (size_t i = 0; i < rudder_results_count(res); ++i)
 *             printf("%s\n", rudder_results_text(res, i));
 *         rudder_results_free(res);
 *     } else {
 *         fprintf(stderr, "%s\n", rudder_generator_last_error(gen));
 *     }
 *     rudder_generator_free(gen);
 *
 * A generator holds a loaded model and the recipe's controllers; create it once and generate many times (each call
 * can change the seed and the sample count). A per-step callback reports progress, can show the current best
 * text, and can cancel. docs/embedding.md is the guide; this header is the reference.
 *
 * Errors. Every function that can fail returns a rudder_status; nothing crashes and no exception crosses this
 * API. On failure the message is kept for the calling thread (rudder_last_error) and, for calls on a generator,
 * with that generator (rudder_generator_last_error). Functions that return a pointer or a count return NULL or 0
 * for a NULL or out-of-range argument.
 *
 * Threads. Different generators may be created, used and freed on different threads at the same time. One
 * generator serves one call at a time: a second call on it while one runs (from another thread, or from its own
 * progress callback) fails with RUDDER_ERR_BUSY instead of racing. Results are immutable: any thread may read
 * them, and one call frees them. Each function below states its rule.
 *
 * Versioning. RUDDER_API_VERSION_MAJOR changes only with an incompatible change. Within a major, changes are
 * additive: new functions, new status codes, new structs. Option structs begin with `struct_size`, so the library
 * reads only the members the caller was compiled with; always start from rudder_default_options() /
 * rudder_default_generate_options(). Those return their struct by value, into storage the caller sized, so these
 * two structs will not grow within major 1 (a larger struct written into an older caller's storage would overrun
 * it); new options come as new structs or functions (1.1: rudder_limits, rudder_generator_create_limited;
 * 1.2: rudder_set_compute_threads, rudder_limits.max_memory_mb, rudder_generator_keep_partial; 1.3:
 * rudder_generator_cancel).
 */
#ifndef RUDDER_H
#define RUDDER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RUDDER_API_VERSION_MAJOR 1
#define RUDDER_API_VERSION_MINOR 3

/* librudder.so is built with hidden visibility and exports exactly the functions marked RUDDER_API. */
#if defined(RUDDER_BUILDING_LIBRARY)
#define RUDDER_API __attribute__((visibility("default")))
#else
#define RUDDER_API
#endif

/* ---------------------------------------------------------------------------------------------------------
 * Status codes. The first seven are the plugin ABI's (rudder_plugin.h defines the same type and values, so the
 * two headers can be included together); the embedding API adds codes from 100 on.
 * ------------------------------------------------------------------------------------------------------- */
#ifndef RUDDER_STATUS_DEFINED
#define RUDDER_STATUS_DEFINED
typedef int32_t rudder_status;
enum {
    RUDDER_OK = 0,
    RUDDER_ERR_INVALID_ARGUMENT = 1, /* a NULL handle or out pointer, or an option out of range */
    RUDDER_ERR_UNSUPPORTED = 2,
    RUDDER_ERR_BUFFER_TOO_SMALL = 3,
    RUDDER_ERR_INTERNAL = 4,  /* anything else: the message says what */
    RUDDER_ERR_CANCELLED = 5, /* the progress callback asked to stop; the generator stays usable */
    RUDDER_ERR_OUT_OF_MEMORY = 6
};
#endif
enum {
    /* The recipe, its model or a controller's params are invalid (also an unreadable recipe file, an unknown model
     * or plugin): the message lists every problem with its JSON pointer, as `rudder validate` does. */
    RUDDER_ERR_INVALID_RECIPE = 100,
    /* Generation failed: a controller returned an error or broke the ABI's rules, or two controllers' hard
     * constraints conflict. The message names the controller. The generator stays usable. */
    RUDDER_ERR_GENERATION_FAILED = 101,
    /* The generator is already in a call (see Threads above). */
    RUDDER_ERR_BUSY = 102
};

/* "ok", "invalid recipe", ...: a static string for any code (unknown codes give "unknown status"). Any thread. */
RUDDER_API const char* rudder_status_name(rudder_status status);

/* This library's version, e.g. "0.1.0" (static string), and the API major/minor it implements. Any thread. */
RUDDER_API const char* rudder_version(void);
RUDDER_API uint32_t rudder_api_version_major(void);
RUDDER_API uint32_t rudder_api_version_minor(void);

/* The message of the last call that failed on this thread, or "" if none has. Library-owned; valid until the
 * next failing call on this thread. Any thread (each thread has its own). */
RUDDER_API const char* rudder_last_error(void);

/* ---------------------------------------------------------------------------------------------------------
 * Logging. Rudder and its plugins log through one sink: by default messages at RUDDER_LOG_WARN and above go to
 * stderr (never stdout, which belongs to the application). The levels are the plugin ABI's (rudder_plugin.h
 * defines the same type and values); RUDDER_LOG_OFF, as a minimum level, silences everything.
 * ------------------------------------------------------------------------------------------------------- */
#ifndef RUDDER_LOG_LEVELS_DEFINED
#define RUDDER_LOG_LEVELS_DEFINED
typedef int32_t rudder_log_level;
enum { RUDDER_LOG_DEBUG = 0, RUDDER_LOG_INFO = 1, RUDDER_LOG_WARN = 2, RUDDER_LOG_ERROR = 3, RUDDER_LOG_OFF = 6 };
#endif
/* The 1.0 spelling of the same values, kept within API major 1. */
#define RUDDER_LOG_LEVEL_DEBUG RUDDER_LOG_DEBUG
#define RUDDER_LOG_LEVEL_INFO RUDDER_LOG_INFO
#define RUDDER_LOG_LEVEL_WARN RUDDER_LOG_WARN
#define RUDDER_LOG_LEVEL_ERROR RUDDER_LOG_ERROR
#define RUDDER_LOG_LEVEL_OFF RUDDER_LOG_OFF
/* Receives one message (`message` is valid during the call). Called from whichever thread logs, possibly several
 * at once: it must be thread-safe. It must not call back into Rudder. */
typedef void (*rudder_log_fn)(int32_t level, const char* message, void* user_data);
/* Sends messages at `min_level` and above to `fn` (NULL: to stderr). Process-wide; any thread; `user_data` must
 * stay valid until the next rudder_set_log call. */
RUDDER_API rudder_status rudder_set_log(rudder_log_fn fn, void* user_data, int32_t min_level);

/* Keeps memory that freed tensors leave inside the process instead of returning it to the OS (glibc mallopt).
 * Every reverse step allocates several [batch, length, vocabulary] tensors, and on a virtual machine fetching large
 * ones back from the OS page by page can cost more than the step itself (docs/design.md). It changes the
 * whole process's allocator, so it is the application's choice; the rudder CLI turns it on. Returns 1 if set, 0
 * where the C library has no such setting. Call it early, from any one thread. */
RUDDER_API int32_t rudder_keep_freed_memory_in_process(void);

/* The most threads tensor computations use, process-wide (API 1.2). 0, the default: every core this process may
 * run on. Within the cap each run uses the cores other processes leave free, shared with the other generators of
 * this process running at that moment, decided again every few steps: OpenMP's workers wait by spinning, which is
 * what makes two threads fast on idle cores and several times slower on a core another process keeps busy.
 * OpenBLAS runs one thread (LibTorch's pool owns the parallelism). docs/design.md has the measurements. Any
 * thread, any time; runs pick it up within a few steps. RUDDER_ERR_INVALID_ARGUMENT for a negative count. */
RUDDER_API rudder_status rudder_set_compute_threads(int32_t max_threads);

/* ---------------------------------------------------------------------------------------------------------
 * Generators.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct rudder_generator rudder_generator; /* opaque */

/* How a generator finds its model and plugins. Every pointer is read during the create call only. */
typedef struct rudder_options {
    uint32_t struct_size; /* sizeof(rudder_options) as the caller compiled it */
    /* Replaces the recipe's "model": a bundled model's name or a model directory. NULL keeps the recipe's. */
    const char* model;
    /* ':'-separated folders searched first for models by name; then $RUDDER_MODEL_PATH, then the bundled models
     * (<prefix>/share/rudder/models, found from librudder.so's own location). NULL: none. */
    const char* model_path;
    /* ':'-separated folders searched first for controller plugins by id; then $RUDDER_PLUGIN_PATH, then the
     * first-party plugins (<prefix>/lib/rudder/plugins, found from librudder.so). NULL: none. */
    const char* plugin_path;
    /* Recipe text only: the folder that relative paths in it (model, plugin files) resolve against. NULL: the
     * current folder. A recipe file's paths resolve against the file's folder. */
    const char* base_dir;
} rudder_options;

/* Defaults: every member NULL, struct_size set. Any thread. */
RUDDER_API rudder_options rudder_default_options(void);

/* Creates a generator from recipe text (JSON, docs/recipes.md) or a recipe file: parses and validates the recipe,
 * loads the model and every controller plugin, and creates every controller from its params. `options` may be
 * NULL. On success *out receives a generator the caller owns (free it with rudder_generator_free). On failure
 * *out is NULL and the status is RUDDER_ERR_INVALID_RECIPE (the message lists every problem with its JSON
 * pointer), RUDDER_ERR_INVALID_ARGUMENT, or RUDDER_ERR_OUT_OF_MEMORY; read the message with rudder_last_error().
 * Any thread, concurrently with anything. */
RUDDER_API rudder_status rudder_generator_create(const char* recipe_json, const rudder_options* options,
                                                 rudder_generator** out);
RUDDER_API rudder_status rudder_generator_create_from_file(const char* recipe_path, const rudder_options* options,
                                                           rudder_generator** out);

/* Resource limits (API 1.1). Zero-initialise, set struct_size = sizeof(rudder_limits), then set the limits to
 * change; 0 keeps a limit's default (100000 sampler steps, 1000000 samples, 4096 batch rows, 4096 positions).
 * Read during the create call only. Unlike the option structs this one is never returned by value, so later
 * minors may append members. */
typedef struct rudder_limits {
    uint32_t struct_size;
    int64_t max_steps;      /* the recipe's sampler.steps */
    int64_t max_samples;    /* the recipe's samples, and rudder_generate_options.samples */
    int64_t max_batch_size; /* the recipe's batch_size */
    int64_t max_length;     /* the recipe's max_length */
    int64_t max_memory_mb;  /* API 1.2: a run's estimated peak memory in MB (10^6 bytes); 0: the machine's memory */
} rudder_limits;

/* rudder_generator_create or rudder_generator_create_from_file under resource limits (API 1.1): exactly one of
 * recipe_json and recipe_path is non-NULL; `options` and `limits` may be NULL (the defaults). A recipe asking for
 * more than a limit is RUDDER_ERR_INVALID_RECIPE, with the JSON pointer of each value over its limit, before
 * anything is allocated for it; a later rudder_generate asking for more samples than max_samples is
 * RUDDER_ERR_INVALID_ARGUMENT. A negative limit is RUDDER_ERR_INVALID_ARGUMENT. Any thread, concurrently with
 * anything. */
RUDDER_API rudder_status rudder_generator_create_limited(const char* recipe_json, const char* recipe_path,
                                                         const rudder_options* options, const rudder_limits* limits,
                                                         rudder_generator** out);

/* Frees a generator, its model and its controllers. NULL is a no-op. Any thread. While a call on the same
 * generator runs (from its own progress callback, say), the free is refused: it does nothing and says so in
 * rudder_last_error(); free the generator after the call returns. */
RUDDER_API void rudder_generator_free(rudder_generator* gen);

/* The message of the last failed call on this generator, or "" if none failed. Generator-owned; valid until the
 * next call on it. Any thread, not concurrently with a call on the same generator. */
RUDDER_API const char* rudder_generator_last_error(const rudder_generator* gen);

/* ---------------------------------------------------------------------------------------------------------
 * Generating.
 * ------------------------------------------------------------------------------------------------------- */

/* What the progress callback sees after every reverse step. Library-owned; valid during the callback only. */
typedef struct rudder_progress {
    uint32_t struct_size;
    int64_t batch, batches;              /* batch being denoised (0-based), and how many the run has */
    int64_t step, steps;                 /* reverse steps done in this batch (1..steps), and per batch */
    double t;                            /* diffusion time reached, 1 = pure noise, 0 = clean */
    int64_t samples_done, samples_total; /* samples finished before this batch, and in the run */
    /* With rudder_generate_options.progress_text set: the current best guess of every sample of this batch
     * (samples samples_done .. samples_done + n_texts - 1), decoded; otherwise NULL and 0. */
    const char* const* texts;
    int64_t n_texts;
} rudder_progress;

/* Called on the generating thread after every reverse step. Return 0 to go on; anything else cancels the run,
 * and rudder_generate returns RUDDER_ERR_CANCELLED. It must not call rudder_generate or rudder_generator_free on
 * the same generator (RUDDER_ERR_BUSY; the free is refused with an error message and does nothing); other
 * generators are fine. */
typedef int32_t (*rudder_progress_fn)(const rudder_progress* progress, void* user_data);

typedef struct rudder_generate_options {
    uint32_t struct_size;           /* sizeof(rudder_generate_options) as the caller compiled it */
    int64_t samples;                /* > 0: replaces the recipe's "samples" for this call; 0: keep the recipe's */
    int32_t override_seed;          /* nonzero: use `seed` instead of the recipe's "seed" for this call */
    uint64_t seed;                  /* 0 to 2^63 - 1, as a recipe's "seed"; larger is RUDDER_ERR_INVALID_ARGUMENT */
    rudder_progress_fn on_progress; /* NULL: no callback */
    void* user_data;                /* passed to on_progress */
    int32_t progress_text;          /* nonzero: fill rudder_progress.texts (decoding costs; off by default) */
} rudder_generate_options;

/* Defaults: the recipe's samples and seed, no callback. Any thread. */
RUDDER_API rudder_generate_options rudder_default_generate_options(void);

typedef struct rudder_results rudder_results; /* opaque: the samples of one rudder_generate call */

/* API 1.2. keep != 0: from now on a cancelled rudder_generate on `gen` (RUDDER_ERR_CANCELLED) still sets *out,
 * to the samples finished before the cancel (possibly none), which the caller then frees; 0 (the default): *out
 * stays NULL on every failure. Not while a call on `gen` runs (RUDDER_ERR_BUSY). */
RUDDER_API rudder_status rudder_generator_keep_partial(rudder_generator* gen, int32_t keep);

/* Generates the recipe's samples (or options->samples), batch by batch. `options` may be NULL. The same recipe,
 * seed and sample count give the same results, on any thread. On success *out receives results the caller owns
 * (free with rudder_results_free). On failure *out is NULL and the status is RUDDER_ERR_CANCELLED,
 * RUDDER_ERR_GENERATION_FAILED, RUDDER_ERR_BUSY, RUDDER_ERR_INVALID_ARGUMENT or RUDDER_ERR_OUT_OF_MEMORY; the
 * message is in rudder_last_error() and, except for RUDDER_ERR_BUSY (the generator belongs to the call in
 * progress), in rudder_generator_last_error(gen). The generator stays usable after any failure. Any thread; one
 * call per generator at a time. */
RUDDER_API rudder_status rudder_generate(rudder_generator* gen, const rudder_generate_options* options,
                                         rudder_results** out);

/* API 1.3. Cancels the rudder_generate call running on `gen`, from another thread or from a signal handler (it
 * only sets a flag): that call returns RUDDER_ERR_CANCELLED (with the finished samples under
 * rudder_generator_keep_partial) at the end of the step in progress, or within about 50 ms where it waits on a
 * controller in a process of its own ("isolation": "process"; that process is stopped, and the next call starts a
 * new one). A call inside an in-process plugin cannot be interrupted: the run stops once it returns. With no call
 * running it does nothing (every rudder_generate starts uncancelled). `gen` must stay alive: free it after the
 * call returns. RUDDER_ERR_INVALID_ARGUMENT for NULL. */
RUDDER_API rudder_status rudder_generator_cancel(rudder_generator* gen);

/* ---------------------------------------------------------------------------------------------------------
 * Results. Immutable; every pointer below is owned by the results and valid until rudder_results_free. Any
 * thread, concurrently.
 * ------------------------------------------------------------------------------------------------------- */

/* One controller's verdict on one sample. */
typedef struct rudder_verdict_info {
    uint32_t struct_size;
    const char* label;  /* the controller's name in the recipe (its plugin id unless "name" is given) */
    int32_t satisfied;  /* 1 met, 0 not met, -1 the controller cannot tell */
    int32_t has_score;  /* nonzero if `score` holds a score */
    double score;       /* controller-defined (e.g. the token count for length) */
    const char* detail; /* JSON object text the controller added, or "" */
} rudder_verdict_info;

RUDDER_API size_t rudder_results_count(const rudder_results* res);
/* The sample's text (its tokens before the first pad, decoded; valid UTF-8, with U+FFFD for bytes that are not); NULL
 * if `i` is out of range. */
RUDDER_API const char* rudder_results_text(const rudder_results* res, size_t i);
/* The sample's token ids before the first pad; their number in *n_tokens (may be NULL). NULL if out of range. */
RUDDER_API const int64_t* rudder_results_tokens(const rudder_results* res, size_t i, size_t* n_tokens);
/* The number of controllers that judged each sample (the recipe's controllers, in recipe order). */
RUDDER_API size_t rudder_results_verdict_count(const rudder_results* res);
/* Controller `k`'s verdict on sample `i`; NULL if either is out of range. */
RUDDER_API const rudder_verdict_info* rudder_results_verdict(const rudder_results* res, size_t i, size_t k);
/* Sample `i` as one JSON object, exactly as a line of `rudder generate`'s JSON Lines output
 * ({"index", "text", "tokens", "controls"}). NULL if out of range. */
RUDDER_API const char* rudder_results_json(const rudder_results* res, size_t i);
/* Frees the results. NULL is a no-op. Not while another thread reads them. */
RUDDER_API void rudder_results_free(rudder_results* res);

#ifdef __cplusplus
}
#endif

#endif /* RUDDER_H */
