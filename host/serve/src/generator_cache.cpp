#include "generator_cache.hpp"

namespace rudder::serve {

std::optional<bool> GeneratorCache::known(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [k, batching_pays] : known_)
        if (k == key) return batching_pays;
    return std::nullopt;
}

void GeneratorCache::remember(const std::string& key, const Generator& generator) {
    std::lock_guard<std::mutex> lock(mutex_);
    known_.remove_if([&](const auto& entry) { return entry.first == key; });
    known_.emplace_front(key, generator.batching_pays());
    if (known_.size() > kKnownKeys) known_.pop_back();
}

std::unique_ptr<Generator> GeneratorCache::take(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
        if (it->first == key) {
            auto generator = std::move(it->second);
            idle_.erase(it);
            return generator;
        }
    return nullptr;
}

void GeneratorCache::give_back(const std::string& key, std::unique_ptr<Generator> generator) {
    std::vector<std::unique_ptr<Generator>> dropped;  // unloaded outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (generator) idle_.emplace_front(key, std::move(generator));
    while (idle_.size() > capacity_) {
        dropped.push_back(std::move(idle_.back().second));
        idle_.pop_back();
    }
}

std::unique_ptr<Generator> GeneratorLoader::load(const GenerateRequest& request, const std::string& key,
                                                 int64_t* samples, bool unless_known) {
    std::vector<RecipeIssue> issues;
    const auto prefixed = [&](std::vector<RecipeIssue> found) {
        for (auto& issue : found) issue.pointer = request.pointer_prefix + issue.pointer;
        return found;
    };
    try {
        // The request's recipe as it was parsed from the body (or the server's file), not printed and parsed again.
        Recipe recipe = parse_recipe_document(request.recipe, request.base_dir, limits_, &issues);
        *samples = recipe.samples;
        if (issues.empty()) {
            if (unless_known && cache.known(key).has_value()) return nullptr;
            if (auto cached = cache.take(key)) return cached;
        }
        auto generator = std::make_unique<Generator>(std::move(recipe), registry_, model_path_, std::move(issues));
        metrics_.loads.Increment();
        cache.remember(key, *generator);
        return generator;
    } catch (const RecipeError& e) {
        throw RequestError{400, "invalid recipe", prefixed(e.issues())};
    }
}

}  // namespace rudder::serve
