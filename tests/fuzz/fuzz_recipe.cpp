// libFuzzer target: any bytes as recipe text. parse_recipe must either return a recipe within the limits or throw
// RecipeError with at least one issue, in both its modes; nothing else (no crash, no other exception, no leak).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <rudder/runtime/recipe.hpp>

namespace {

void check(const rudder::Recipe& r, const rudder::RecipeLimits& limits) {
    const bool within = r.samples >= 1 && r.samples <= limits.max_samples && r.batch_size >= 1 &&
                        r.batch_size <= limits.max_batch_size && r.max_length >= 0 &&
                        r.max_length <= limits.max_length && r.sampler.steps >= 1 &&
                        r.sampler.steps <= limits.max_steps;
    if (!within) std::abort();  // a value outside the limits got through
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const rudder::RecipeLimits limits;
    try {
        check(rudder::parse_recipe(text, "/nonexistent", limits), limits);
    } catch (const rudder::RecipeError& e) {
        if (e.issues().empty()) std::abort();
    }
    try {
        std::vector<rudder::RecipeIssue> issues;
        const rudder::Recipe r = rudder::parse_recipe(text, "/nonexistent", limits, &issues);
        if (issues.empty()) check(r, limits);
    } catch (const rudder::RecipeError& e) {
        if (e.issues().empty()) std::abort();
    }
    return 0;
}
