// Loaded generators: a request's recipe checked and its model and controllers loaded, once for every request of
// that recipe (seed and samples aside) while the cache keeps the generator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>

#include "metrics.hpp"
#include "request.hpp"

namespace rudder::serve {

// Generators kept between requests, so a recipe's model and controllers load once; beyond `capacity` the least
// recently used is dropped. A generator whose run failed or was cancelled is not kept. The cache also remembers
// the keys generators were built for (their recipes passed every check), so a request of a known recipe is not
// checked by building another generator while it waits.
class GeneratorCache {
public:
    explicit GeneratorCache(int64_t capacity) : capacity_(static_cast<size_t>(capacity)) {}
    // For a known key, whether its runs batch well (Generator::batching_pays); nothing for a key not known.
    std::optional<bool> known(const std::string& key);
    void remember(const std::string& key, const Generator& generator);
    // A kept generator of `key`, out of the cache; null if none is kept.
    std::unique_ptr<Generator> take(const std::string& key);
    // Keeps `generator` (if any) as the most recently used, dropping the least recently used beyond capacity.
    void give_back(const std::string& key, std::unique_ptr<Generator> generator);

private:
    static constexpr size_t kKnownKeys = 256;
    const size_t capacity_;
    std::mutex mutex_;
    std::list<std::pair<std::string, std::unique_ptr<Generator>>> idle_;  // most recently used first
    std::list<std::pair<std::string, bool>> known_;                       // most recently built first
};

// Where a request's generator comes from: its recipe checked and loaded, or a cached generator of the same key.
class GeneratorLoader {
public:
    GeneratorLoader(const ServerOptions& options, plugins::Registry& registry,
                    std::vector<std::filesystem::path> model_path, Metrics& metrics)
        : cache(options.cached_generators), limits_(options.limits), registry_(registry),
          model_path_(std::move(model_path)), metrics_(metrics) {}

    // The recipe of a request, checked and loaded: every problem (the request's, the recipe's, its model's and
    // controllers') at once, with pointers into the request, as a RequestError (400). A recipe that differs from a
    // cached generator's only in seed and samples (which parse_recipe_document checks) takes that generator; with
    // `unless_known`, a recipe a generator was built for before gets none (it passed every check then).
    // `samples`: the recipe's.
    std::unique_ptr<Generator> load(const GenerateRequest& request, const std::string& key, int64_t* samples,
                                    bool unless_known = false);

    const std::vector<std::filesystem::path>& model_path() const { return model_path_; }

    GeneratorCache cache;

private:
    const RecipeLimits limits_;
    plugins::Registry& registry_;  // shared by every request (it locks itself)
    const std::vector<std::filesystem::path> model_path_;
    Metrics& metrics_;
};

}  // namespace rudder::serve
