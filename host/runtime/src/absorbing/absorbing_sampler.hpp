// The absorbing room's samplers: what one is, as a recipe configures it (AbsorbingSampler) and as a batch runs it
// (Unmasking), and the row it adds to the room's table (absorbing_samplers.cpp). The loop (absorbing_loop.hpp) keeps
// what every sampler shares: the network's calls and its caches, the controllers, the commit, remasking's bookkeeping,
// prompt guidance and the particles; a sampler decides its time grid, which positions unmask at a step, and how their
// tokens are drawn.
//
// A new absorbing sampler is one file here (its settings, their reading and checks, its unmasking) and one row in
// absorbing_samplers.cpp.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../diffusion_process.hpp"

namespace rudder {

struct Combined;

namespace absorbing {

class AbsorbingLoop;

// The keys every absorbing sampler reads (unless its row refuses one); the loop applies them.
struct CommonSettings {
    std::string name;
    int64_t steps = 200;  // first_hitting, bd3lm, threshold and factor decoding: max_length
    bool cache = true;    // skip the network when no token changed since its last call
    // Divides the controlled clean-token log-probabilities before they are drawn from; 0: the arg-max.
    double temperature = 1.0;
    int64_t top_k = 0;   // draw among each position's k most likely tokens only (0: all)
    double top_p = 1.0;  // draw within the smallest set of tokens holding this probability
    // Classifier-free guidance towards the tokens hard constraints fix (LLaDA's unsupervised cfg_scale w): scores
    // uncond + (w + 1)(cond - uncond), uncond the network with those tokens masked again.
    double prompt_guidance = 0.0;
    bool truncates() const { return top_k > 0 || top_p < 1.0; }
};

// Fast-dLLM's approximate key/value caches: a window runs to the sequence's end (prefix) or its block's (dual).
enum class KeyValueCache { none, prefix, dual };

// One batch's run of a sampler: its state between steps, and its part of each step. The loop calls, at step i:
// choose (which masked positions may unmask), remask, then idle when none does; otherwise, once the controllers have
// fixed their tokens, after_fixed, and draw.
class Unmasking {
public:
    virtual ~Unmasking() = default;
    // The time grid: the loop's bound on steps, and step i's times.
    virtual int64_t steps() const = 0;
    virtual double t(int64_t i) const = 0;
    virtual double t_next(int64_t i) const = 0;
    // Whether the run ends at the first step (after the first) that finds nothing masked.
    virtual bool ends_when_unmasked() const { return false; }
    // Which of the `masked` positions (bool [B, L]) step i may unmask.
    virtual at::Tensor choose(const at::Tensor& masked, int64_t i, AbsorbingLoop& loop) = 0;
    // Remasking: which of the `committed` positions (bool [B, L], none a controller fixed) step i masks again.
    virtual bool remasks() const { return false; }
    virtual at::Tensor remask(const at::Tensor& committed, int64_t i, at::Generator& gen) const;
    // A step where no position unmasks: what the sampler still draws (its generator's numbers stay in step).
    virtual void idle(int64_t /*i*/, AbsorbingLoop& /*loop*/) {}
    // After the controllers fixed this step's tokens: `unmask` may be narrowed (to a block once the prompt is known).
    virtual void after_fixed(at::Tensor& /*unmask*/, int64_t /*i*/, AbsorbingLoop& /*loop*/) {}
    // With a key/value cache: step i's block [begin, end), whose first call refreshes the cache; none until known.
    virtual std::optional<std::pair<int64_t, int64_t>> cache_block(int64_t /*i*/) const { return std::nullopt; }
    // Draws tokens at the `unmask` positions (bool [B, L]) from the network's scores at the combination's rows
    // (`row_logits`, float [rows, V]) and commits them (AbsorbingLoop::commit_rows, commit_draws).
    virtual void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
                      AbsorbingLoop& loop) = 0;
};

// An Unmasking on a time grid of its own (DiscreteSampler, LladaSampler, ... : steps(), t(i), t_next(i)).
template <class Grid>
class UnmaskingOn : public Unmasking {
public:
    explicit UnmaskingOn(Grid grid) : grid_(std::move(grid)) {}
    int64_t steps() const override { return grid_.steps(); }
    double t(int64_t i) const override { return grid_.t(i); }
    double t_next(int64_t i) const override { return grid_.t_next(i); }

protected:
    Grid grid_;
};

// A sampler as a recipe configured it: the common settings and its own.
class AbsorbingSampler {
public:
    explicit AbsorbingSampler(CommonSettings common) : common_(std::move(common)) {}
    virtual ~AbsorbingSampler() = default;
    const CommonSettings& common() const { return common_; }
    const std::string& name() const { return common_.name; }
    // The steps a batch takes (its grid's, or the loop's bound).
    virtual int64_t steps() const { return common_.steps; }
    // Once max_length is resolved: samplers that take a step per position take max_length of them.
    virtual void fit(const Recipe& /*recipe*/) {}
    // Its own settings, as a recipe's "sampler" object gives them (added to the common ones).
    virtual void describe(nlohmann::json& /*out*/) const {}
    // Its checks against the model and the recipe. `check_model_blocks` for a block-diffusion model (BD3-LM's), which
    // predicts each block of `block` positions from the finished blocks before it; by default the sampler unmasks the
    // whole sequence at once, which such a model cannot be sampled with.
    virtual void check(const Model& /*model*/, const Recipe& /*recipe*/, std::vector<RecipeIssue>& /*issues*/) const {}
    virtual void check_model_blocks(const Model& model, int64_t block, std::vector<RecipeIssue>& issues) const;
    virtual KeyValueCache key_value_cache() const { return KeyValueCache::none; }
    // Whether samples cost less denoised together (DiffusionProcess::batching_pays).
    virtual bool batching_pays() const { return true; }
    // One batch's run.
    virtual std::unique_ptr<Unmasking> start(const AbsorbingLoop& loop) const = 0;

protected:
    CommonSettings common_;
};

// A row of the room's table: a sampler's name, the keys it reads beyond the common ones, the common keys it refuses
// (with why), its defaults of the common keys, and how its settings are read (only what reading can check: types
// and ranges; `object.name` is the sampler's).
struct AbsorbingSamplerRow {
    std::string name;
    std::vector<std::string> keys;
    std::vector<std::pair<std::string, std::string>> refuses;
    int64_t default_steps = 200;
    double default_temperature = 1.0;
    std::function<std::unique_ptr<AbsorbingSampler>(SamplerObject& object, CommonSettings common)> read;
};

// Why first_hitting and bd3lm refuse 'steps'.
inline const char* const kOneStepAPosition =
    "'steps' does not apply to the first_hitting and bd3lm samplers: they take one step per position (max_length), "
    "each unmasking one position per sample";

// "model 'M' predicts each block of N positions from the finished blocks before it", and how to sample it block by
// block: the words of check_model_blocks' issues.
std::string blocks_of(const Model& model, int64_t block);
std::string how_to_sample_blocks(int64_t block);
// block_length (1..2^31) of the samplers that unmask block by block (0: one block).
void read_block_length(SamplerObject& o, int64_t& block_length);
// eps (1e-6..0.5), the last time of the dream, mdlm and sedd samplers.
void read_eps(SamplerObject& o, double& eps);
// A block_length longer than max_length.
void check_block_length(int64_t block_length, const Recipe& recipe, std::vector<RecipeIssue>& issues);

// The room's samplers, in its order (absorbing_samplers.cpp).
const std::vector<AbsorbingSamplerRow>& absorbing_samplers();

}  // namespace absorbing
}  // namespace rudder
