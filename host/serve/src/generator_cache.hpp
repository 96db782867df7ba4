// Loaded generators: a request's recipe checked and its model and controllers loaded, once for every request of
// that recipe (seed and samples aside) while the cache keeps the generator.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>

#include "metrics.hpp"
#include "model_catalog.hpp"
#include "request.hpp"

namespace rudder::serve {

// Generators kept between requests, so a recipe's model and controllers load once; beyond `capacity` the least
// recently used is dropped, and so is one more of a recipe than `per_key` (no more runs than the server's parallel
// ones can use a recipe's generators at once: more were copies of its model, held for nothing, that concurrent
// validations of one recipe built). A generator whose run failed or was cancelled is not kept. The cache also remembers
// the keys generators were built for (their recipes passed every check), so a request of a known recipe is not
// checked by building another generator while it waits.
class GeneratorCache {
public:
    // What is known of a key a generator was built for.
    struct Known {
        bool batching_pays = false;  // Generator::batching_pays
        int64_t batch_size = 1;      // the recipe's
        int64_t fitting_batch = 1;   // the largest batch within the memory limit: now, if a generator is kept
    };
    // `max_bytes`: what the idle generators may hold together, by the estimates note_bytes() gave (0: no bound);
    // beyond it the least recently used are dropped, all but the one most recently given back.
    GeneratorCache(int64_t capacity, int64_t per_key, uint64_t max_bytes = 0)
        : capacity_(static_cast<size_t>(capacity)), per_key_(static_cast<size_t>(per_key)), max_bytes_(max_bytes) {}
    // About how many bytes `generator` holds (its loader measured them while building it): counted while it is
    // idle here. A generator never noted counts nothing.
    void note_bytes(const Generator& generator, uint64_t bytes);
    // What the idle generators hold together, by their estimates.
    uint64_t idle_bytes();
    // For a known key, what is known of it; nothing for a key not known.
    std::optional<Known> known(const std::string& key);
    void remember(const std::string& key, const Generator& generator);
    // A kept generator of `key`, out of the cache; null if none is kept.
    std::unique_ptr<Generator> take(const std::string& key);
    // Keeps `generator` (if any) as the most recently used, dropping the least recently used beyond capacity.
    void give_back(const std::string& key, std::unique_ptr<Generator> generator);
    // The model of the least recently used idle generator that `runs_it` accepts, that generator dropped: a recipe of
    // a new key that runs the same model (a conversation's next prompt is a new key) builds its generator on the
    // model already loaded instead of reading it again. The model passes whole from one generator to the next, never
    // shared by two at once. Nothing when no idle generator runs it.
    std::optional<Model> take_model(const std::function<bool(const Generator&)>& runs_it);

private:
    // Keys hold their recipe's text: the known ones are bounded in number and in bytes (a recipe may be a
    // megabyte).
    static constexpr size_t kKnownKeys = 256;
    static constexpr size_t kKnownBytes = size_t{16} << 20;
    struct Idle {
        std::string key;
        std::unique_ptr<Generator> generator;
        uint64_t bytes = 0;  // its estimate
    };
    // The estimates of generators outside the cache (being run, or just built), most recent last; bounded, as a
    // generator that fails is destroyed without coming back (a reused address is noted again when it is built).
    static constexpr size_t kNotedOutside = 256;
    std::deque<std::pair<const Generator*, uint64_t>> noted_;
    uint64_t take_noted(const Generator* generator);  // its estimate, out of noted_ (0 if none); with mutex_ held

    const size_t capacity_, per_key_;
    const uint64_t max_bytes_;
    size_t known_bytes_ = 0;
    uint64_t idle_bytes_ = 0;  // the idle generators' estimates, summed
    std::mutex mutex_;
    std::list<Idle> idle_;                            // most recently used first
    std::list<std::pair<std::string, Known>> known_;  // most recently built first
};

// Where a request's generator comes from: its recipe checked and loaded, or a cached generator of the same key.
class GeneratorLoader {
public:
    GeneratorLoader(const ServerOptions& options, plugins::Registry& registry, const ModelCatalog& catalog,
                    Metrics& metrics)
        : cache(options.cached_generators, options.parallel, options.limits.max_memory_bytes / 2),
          limits_(options.limits), registry_(registry), catalog_(catalog), metrics_(metrics) {}
    ~GeneratorLoader();

    // The recipe of a request, checked and loaded: every problem (the request's, the recipe's, its model's and
    // controllers') at once, with pointers into the request, as a RequestError (400). A recipe that differs from a
    // cached generator's only in seed and samples (which parse_recipe_document checks) takes that generator; with
    // `unless_known`, a recipe a generator was built for before gets none (it passed every check then). The model
    // is the catalog's (ModelCatalog::find). Samples (the request's override) that would run in a batch over the
    // memory limit are a RequestError (400) at the request's samples_pointer, whether the generator is built, cached
    // or known. `samples`: the recipe's.
    std::unique_ptr<Generator> load(const GenerateRequest& request, const std::string& key, int64_t* samples,
                                    bool unless_known = false);
    // The same on one of the loader's threads, waited for until `deadline`: a load that has not ended then (a
    // file that blocks, a slow disk) is a RequestError (504) and is left to end on its own, its generator kept in
    // the cache. So a request's time limit, and the server's drain, hold whatever a load does. The threads live as
    // long as the loader: an isolated controller's process ends with the thread that started it (PDEATHSIG).
    std::unique_ptr<Generator> load_before(const GenerateRequest& request, const std::string& key, int64_t* samples,
                                           bool unless_known, std::chrono::steady_clock::time_point deadline);
    // Until no load_before thread runs, or `wait` has passed: whether none runs. They use this loader.
    bool wait_for_loads(std::chrono::milliseconds wait);

    GeneratorCache cache;

private:
    // The recipe's model from the catalog, loaded; a problem is an issue at /model, and the model is left empty.
    Model load_model_of(const Recipe& recipe, const std::filesystem::path& base_dir, std::vector<RecipeIssue>& issues);
    // RequestError (400) when a batch of `samples` (at most the recipe's batch_size) is over the memory limit.
    void check_memory(const GenerateRequest& request, int64_t samples, const GeneratorCache::Known& known) const;

    const RecipeLimits limits_;
    plugins::Registry& registry_;  // shared by every request (it locks itself)
    const ModelCatalog& catalog_;
    Metrics& metrics_;
    // The loader's threads, started as loads need them, up to kMaxThreads; loads beyond wait for one. They never
    // end while the loader lives (an isolated controller's process ends with the thread that started it), and a
    // load that never ends keeps one.
    static constexpr size_t kMaxThreads = 8;
    void work();
    std::mutex loads_mutex_;
    std::condition_variable loads_ended_, load_waiting_;
    int64_t loads_ = 0;  // load_before calls whose load has not ended
    std::deque<std::function<void()>> tasks_;
    std::vector<std::thread> threads_;
    size_t idle_threads_ = 0;
    bool stopping_ = false;
};

}  // namespace rudder::serve
