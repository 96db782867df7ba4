// The absorbing room: its table of samplers (one row each, defined in its own file), the keys every one reads, the
// checks they share, and the process that runs them (absorbing_loop.hpp).
#include <ATen/ATen.h>

#include <algorithm>

#include "absorbing_loop.hpp"

namespace rudder {
namespace absorbing {

AbsorbingSamplerRow euler_sampler();          // schedule_samplers.cpp
AbsorbingSamplerRow analytic_sampler();       // schedule_samplers.cpp
AbsorbingSamplerRow first_hitting_sampler();  // schedule_samplers.cpp
AbsorbingSamplerRow confidence_sampler();     // schedule_samplers.cpp
AbsorbingSamplerRow llada_sampler();          // llada_sampler.cpp
AbsorbingSamplerRow dream_sampler();          // dream_sampler.cpp
AbsorbingSamplerRow mdlm_sampler();           // grid_samplers.cpp
AbsorbingSamplerRow sedd_sampler();           // grid_samplers.cpp
AbsorbingSamplerRow bd3lm_sampler();          // bd3lm_sampler.cpp
AbsorbingSamplerRow maskgit_sampler();        // maskgit_sampler.cpp

const std::vector<AbsorbingSamplerRow>& absorbing_samplers() {
    static const std::vector<AbsorbingSamplerRow> table = {
        euler_sampler(), analytic_sampler(), first_hitting_sampler(), confidence_sampler(), llada_sampler(),
        dream_sampler(), mdlm_sampler(),     sedd_sampler(),          bd3lm_sampler(),      maskgit_sampler()};
    return table;
}

std::string blocks_of(const Model& model, int64_t block) {
    return "model '" + model.name + "' predicts each block of " + std::to_string(block) +
           " positions from the finished blocks before it";
}

std::string how_to_sample_blocks(int64_t block) {
    return "; sample it block by block, e.g. {\"name\": \"first_hitting\", \"block_length\": " + std::to_string(block) +
           "} or BD3-LM's own {\"name\": \"bd3lm\"}";
}

void AbsorbingSampler::check_model_blocks(const Model& model, int64_t block, std::vector<RecipeIssue>& issues) const {
    issues.push_back({"/sampler/name", blocks_of(model, block) + " (block diffusion); sampler '" + name() +
                                           "' unmasks the whole sequence at once" + how_to_sample_blocks(block)});
}

void read_block_length(SamplerObject& o, int64_t& block_length) {
    if (o.applies("block_length"))
        if (auto v = o.reader.integer("block_length", 1, int64_t{1} << 31)) block_length = *v;
}

void read_eps(SamplerObject& o, double& eps) {
    if (o.applies("eps"))
        if (auto v = o.reader.number("eps", 1e-6, 0.5)) eps = *v;
}

void check_block_length(int64_t block_length, const Recipe& recipe, std::vector<RecipeIssue>& issues) {
    if (block_length > recipe.max_length)
        issues.push_back({"/sampler/block_length", "block_length " + std::to_string(block_length) +
                                                       " is longer than max_length " +
                                                       std::to_string(recipe.max_length)});
}

namespace {

using json = nlohmann::json;

// The keys every sampler reads unless its row refuses one, in the order they are read.
const std::vector<std::string> kCommonKeys = {"steps", "temperature", "cache", "top_k", "top_p", "prompt_guidance"};

const AbsorbingSamplerRow* row_of(const std::string& name) {
    for (const auto& row : absorbing_samplers())
        if (row.name == name) return &row;
    return nullptr;
}

bool refuses(const AbsorbingSamplerRow& row, const std::string& key) {
    return std::any_of(row.refuses.begin(), row.refuses.end(), [&](const auto& r) { return r.first == key; });
}

// The common keys, with the defaults of `row` (none while no sampler is named).
CommonSettings read_common(SamplerObject& o, const AbsorbingSamplerRow* row) {
    CommonSettings out;
    out.name = row != nullptr ? row->name : "analytic";
    if (row != nullptr) out.steps = row->default_steps;
    read_steps(o, out.steps);
    if (o.applies("cache"))
        if (auto v = o.reader.boolean("cache")) out.cache = *v;
    if (row != nullptr) out.temperature = row->default_temperature;
    read_temperature(o, out.temperature, /*zero_is_arg_max=*/true);
    read_truncation(o, out.top_k, out.top_p);
    if (o.applies("prompt_guidance"))
        if (auto v = o.reader.number("prompt_guidance", 0.0, 100.0)) out.prompt_guidance = *v;
    return out;
}

// "the confidence sampler", "the llada and dream samplers", "the a, b and c samplers".
std::string phrase(const std::vector<std::string>& names) {
    std::string out = "the ";
    for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
    return out + (names.size() == 1 ? " sampler" : " samplers");
}

// The room's keys from its table: the common ones (with each refusal), then each sampler's own.
std::vector<SamplerKey> keys_of(const std::vector<AbsorbingSamplerRow>& table) {
    std::vector<SamplerKey> keys;
    for (const auto& key : kCommonKeys) {
        std::vector<std::string> taking;
        std::string refusal;
        for (const auto& row : table) {
            if (!refuses(row, key)) taking.push_back(row.name);
            for (const auto& [refused, why] : row.refuses)
                if (refused == key && refusal.empty()) refusal = why;
        }
        keys.push_back(refusal.empty() ? SamplerKey::of(key, {}, kDiscreteSamplers)
                                       : SamplerKey::except(key, taking, refusal));
    }
    std::vector<std::string> own;
    for (const auto& row : table)
        for (const auto& key : row.keys)
            if (std::find(own.begin(), own.end(), key) == own.end()) own.push_back(key);
    for (const auto& key : own) {
        std::vector<std::string> taking;
        for (const auto& row : table)
            if (std::find(row.keys.begin(), row.keys.end(), key) != row.keys.end()) taking.push_back(row.name);
        keys.push_back(SamplerKey::of(key, taking, phrase(taking), /*needs_name=*/true));
    }
    return keys;
}

class AbsorbingProcess final : public DiffusionProcess {
public:
    AbsorbingProcess(const AbsorbingSamplerRow& row, std::unique_ptr<AbsorbingSampler> sampler)
        : row_(row), sampler_(std::move(sampler)) {}
    const std::string& sampler() const override { return sampler_->name(); }
    int64_t steps() const override { return sampler_->steps(); }
    json settings() const override {
        const CommonSettings& c = sampler_->common();
        json out = {{"name", c.name},   {"cache", c.cache}, {"temperature", c.temperature},
                    {"top_k", c.top_k}, {"top_p", c.top_p}, {"prompt_guidance", c.prompt_guidance}};
        for (const auto& [refused, why] : row_.refuses) out.erase(refused);
        if (!refuses(row_, "steps")) out["steps"] = c.steps;
        sampler_->describe(out);
        return out;
    }
    at::Tensor run(int64_t samples, ReverseRun& run) const override {
        return AbsorbingLoop(*sampler_, run, samples).run();
    }
    // The network's output in its SUBS form (log-softmax, clamp, carry-over); prompt guidance adds the unconditional
    // output and the combination. A discrete gradient adds its buffer and the Taylor terms.
    double step_units() const override { return 3.5 + (sampler_->common().prompt_guidance > 0 ? 2 : 0); }
    double gradient_units() const override { return 3; }
    bool batching_pays() const override { return sampler_->batching_pays(); }

private:
    const AbsorbingSamplerRow& row_;
    std::unique_ptr<AbsorbingSampler> sampler_;
};

// The checks every sampler shares, around its own.
void check(const AbsorbingSampler& sampler, const Model& model, const Recipe& recipe,
           std::vector<RecipeIssue>& issues) {
    if (const int64_t block = model.denoiser->traits().decoding_block; block > 0) {
        sampler.check_model_blocks(model, block, issues);
        // Its training never shows it a masked block before the one it predicts, which is what the unconditional
        // pass would be.
        if (sampler.common().prompt_guidance > 0)
            issues.push_back({"/sampler/prompt_guidance",
                              "model '" + model.name +
                                  "' predicts each block from the finished blocks before it and was never trained "
                                  "with them masked, so it has no unconditional prediction to guide away from; prompt "
                                  "guidance is for models that unmask anywhere"});
    }
    sampler.check(model, recipe, issues);
    if (recipe.guidance.particles > 1 && recipe.guidance.resample_every > 0)
        issues.push_back({"/guidance/resample_every",
                          "discrete particles are only chosen between at the end: resampling them is for continuous "
                          "models"});
}

}  // namespace
}  // namespace absorbing

ProcessRoom absorbing_room() {
    using namespace absorbing;
    ProcessRoom room;
    room.family = Family::discrete;
    room.models = "absorbing discrete models";
    room.model_is = "is discrete";
    room.default_sampler = "analytic";
    for (const auto& row : absorbing_samplers()) room.samplers.push_back(row.name);
    room.keys = keys_of(absorbing_samplers());
    room.runs = [](const Model& model) { return model.family == Family::discrete; };
    room.read = [](SamplerObject& o) {
        const AbsorbingSamplerRow* named = row_of(o.name);
        const CommonSettings common = read_common(o, named);
        // While no sampler is named, every sampler reads what applies to any.
        for (const auto& row : absorbing_samplers())
            if (named == nullptr || &row == named) row.read(o, common);
    };
    room.make = [](const Model& model, const Recipe& recipe, SamplerObject& object,
                   std::vector<RecipeIssue>& issues) -> std::unique_ptr<DiffusionProcess> {
        const AbsorbingSamplerRow& row = *row_of(object.name);
        std::unique_ptr<AbsorbingSampler> sampler = row.read(object, read_common(object, &row));
        sampler->fit(recipe);
        check(*sampler, model, recipe, issues);
        return std::make_unique<AbsorbingProcess>(row, std::move(sampler));
    };
    return room;
}

}  // namespace rudder
