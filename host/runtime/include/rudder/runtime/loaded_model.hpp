// A loaded model: its tokenizer, its denoiser, its schedules and what its config recommends. Below both the
// loading (model.hpp: folders, formats, discovery) and the format loaders that build one (the public checkpoints'
// denoisers), so that a loader need not include the loading that calls it.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include <rudder/nn/schedule.hpp>
#include <rudder/runtime/denoiser.hpp>
#include <rudder/text/tokenizer.hpp>

namespace rudder {

struct Model {
    std::string name;  // folder name
    std::filesystem::path dir;
    Family family = Family::discrete;
    std::shared_ptr<const Tokenizer> tokenizer;
    std::shared_ptr<Denoiser> denoiser;
    GaussianSchedule schedule = GaussianSchedule::make("sqrt", 1);  // continuous family
    MaskSchedule mask_schedule;                                     // discrete family
    // config.json's "sampler" entry for this family: the sampler settings this model samples best with (a recipe
    // "sampler" object without "steps"); empty when it has none. Recipes that name no sampler take it.
    nlohmann::json recommended_sampler = nlohmann::json::object();
    // How the training sequences were laid out when that was not as Rudder lays out texts (content, then padding),
    // e.g. the public checkpoints' packed documents; empty for Rudder's own models. The likelihood bound, which
    // scores padded texts, is refused for such a model, saying this.
    std::string training_layout;
};

}  // namespace rudder
