// One room per diffusion process: continuous embedding diffusion, absorbing (masked) discrete diffusion and uniform
// discrete diffusion. Each room owns its sampler settings (read from the recipe's "sampler" object, with errors at
// JSON pointers), its checks of a recipe against a model, its share of the memory estimate and its reverse loop. The
// Generator keeps what every process shares: the model, the controllers, the batches, the verdicts.
//
// A new sampler touches its process's room (<process>_process.cpp; sampler.hpp/.cpp when it brings new arithmetic)
// and the docs; a new process adds a room and one line in rooms() (diffusion_process.cpp).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <rudder/runtime/run_types.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>

namespace rudder {

class Composer;

// How the discrete rooms (absorbing and uniform) name themselves in "'<key>' applies to <phrase> only".
inline const char* const kDiscreteSamplers = "the discrete samplers";

// A key of a "sampler" object, as the room that reads it declares it.
struct SamplerKey {
    std::string key;
    std::vector<std::string> samplers;  // the samplers it applies to; empty: every sampler of the room
    std::string phrase;                 // how "'<key>' applies to <phrase> only" names them
    bool needs_name = false;            // refused "(name it)" while the recipe names no sampler
    std::string refusal;                // given with another sampler: this message instead of "applies to"
    // A key of another process that this one refuses for a reason of its own (`refusal`) rather than as another's.
    bool refused = false;

    // A key that applies to `samplers` (empty: every sampler of the room), named in messages by `phrase`.
    static SamplerKey of(std::string key, std::vector<std::string> samplers, std::string phrase,
                         bool needs_name = false) {
        return {std::move(key), std::move(samplers), std::move(phrase), needs_name, "", false};
    }
    // A key that applies to `samplers` only, with its own message for the room's others.
    static SamplerKey except(std::string key, std::vector<std::string> samplers, std::string refusal) {
        return {std::move(key), std::move(samplers), "", false, std::move(refusal), false};
    }
    // Another process's key, refused here saying why.
    static SamplerKey refuse(std::string key, std::string reason) {
        return {std::move(key), {}, "", false, std::move(reason), true};
    }
};

// The "sampler" object as a room reads it: the reader (issues at its JSON pointers), the sampler the settings are for
// ("" while no sampler is named: keys are then read for their types and ranges only) and the recipe's limits.
struct SamplerObject {
    json_input::ObjectReader& reader;
    const std::string& name;
    const RecipeLimits& limits;
    // Whether the room should read `key`: it applies to the sampler (any, while none is named). Which keys do not
    // apply is reported once, by the catalogue, before the room reads.
    bool applies(const std::string& key) const;
    const std::vector<SamplerKey>* keys = nullptr;  // the room's
};

// Everything of a batch's reverse loop that lies outside its process: the Generator's, lent for one run.
struct ReverseRun {
    const Model& model;
    const Recipe& recipe;  // max_length, candidates and guidance
    Composer& composer;
    GenerationStats& stats;
    c10::Device device;
    at::Generator& gen;
    // Called after each step with the steps done, t, and how to get each sample's current best tokens.
    std::function<void(int64_t, double, const std::function<at::Tensor()>&)> tick;
    // The run cannot go on at step i, (sample, position) of the batch: the model's scores there are `scores` [V].
    std::function<GenerationFault(int64_t i, int64_t sample, int64_t position, const at::Tensor& scores)> fault_at;
};

class DiffusionProcess {
public:
    virtual ~DiffusionProcess() = default;
    // The sampler it runs and the reverse steps it takes per batch.
    virtual const std::string& sampler() const = 0;
    virtual int64_t steps() const = 0;
    // Every setting the run uses, defaults included, as a recipe's "sampler" object would give them.
    virtual nlohmann::json settings() const = 0;
    // One batch of `samples` samples: their tokens [samples, max_length].
    virtual at::Tensor run(int64_t samples, ReverseRun& run) const = 0;
    // The step's own [B, L, V] float tensors beyond the denoiser's, in units of one, without controllers; and those
    // a controller's gradient adds (docs/results.md, "Run memory").
    virtual double step_units() const = 0;
    virtual double gradient_units() const = 0;
    // Whether samples cost less denoised together than one at a time (Generator::batching_pays).
    virtual bool batching_pays() const { return true; }
};

// A room: a diffusion process's samplers, the keys of its "sampler" object, and how a process is made.
struct ProcessRoom {
    Family family;
    std::string models;    // the models it runs, as messages name them: "continuous models"
    std::string model_is;  // what "model 'M' ..." says of one of them: "is continuous"
    std::string default_sampler;
    std::vector<std::string> samplers;
    // Why the family's other samplers do not fit it ("unmasks positions"), when some do not; "" if all do.
    std::string other_samplers_refusal;
    std::vector<SamplerKey> keys;
    // Whether it runs `model` (its family and noise).
    std::function<bool(const Model&)> runs;
    // Reads the settings (only what reading can check: types and ranges) for `object.name` ("" while none is named).
    std::function<void(SamplerObject& object)> read;
    // The process for `model` and `recipe` (max_length resolved), its settings read from `sampler` (which names one
    // of its samplers, and was checked when the recipe was read); checks against the model and the recipe go to
    // `issues` (whatever comes back then is not used).
    std::function<std::unique_ptr<DiffusionProcess>(const Model& model, const Recipe& recipe, SamplerObject& sampler,
                                                    std::vector<RecipeIssue>& issues)>
        make;
};

// Keys that several rooms read alike: "steps", "temperature", and the discrete rooms' "top_k" and "top_p".
void read_steps(SamplerObject& o, int64_t& steps);
// "temperature" above 0 (from 0.01), or from 0 where `zero_is_arg_max` (the sampler then takes the arg-max).
void read_temperature(SamplerObject& o, double& temperature, bool zero_is_arg_max = false);
void read_truncation(SamplerObject& o, int64_t& top_k, double& top_p);

// The rooms, each defined in its <process>_process.cpp.
ProcessRoom continuous_room();
ProcessRoom absorbing_room();
ProcessRoom uniform_room();

// The process that runs `model` with the recipe's sampler: the recipe's "sampler" object, over the model's
// recommended settings when it names no sampler, else the room's default sampler; checked against the model and the
// recipe (max_length resolved). Problems go to `issues`, but none at a pointer `reported` says was reported already;
// nullptr when there are any.
std::unique_ptr<DiffusionProcess> make_process(const Model& model, const Recipe& recipe,
                                               std::vector<RecipeIssue>& issues,
                                               const std::function<bool(const std::string&)>& reported);

}  // namespace rudder
