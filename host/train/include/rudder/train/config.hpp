// Training configs (docs/training.md): what `rudder train` and `rudder train-controller` read, checked with every
// problem at its JSON pointer. No LibTorch header here: the CLI includes this.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

#include <rudder/nn/config_error.hpp>

namespace rudder::train {

struct TrainConfig {
    // teacher | continuous | discrete | mdlm | tagger | parser | syntax_classifier | attribute_classifier
    std::string kind;
    // syntax_classifier, attribute_classifier: the denoiser whose noise and vocabulary the classifier learns
    std::filesystem::path denoiser;
    // attribute_classifier: {"field": MR attribute, "classes": {class: [MR values]}} (data.attribute)
    nlohmann::json attribute;

    // data
    std::filesystem::path train_file;
    std::filesystem::path dev_file;  // empty: no dev loss
    int64_t dev_every = 0;           // steps between dev losses (with a dev file)
    int64_t dev_max_texts = 0;       // dev texts used (the first ones, after the length filter)

    // tokenizer: a vocabulary file, or built from the training references and meaning representations
    std::filesystem::path vocab_file;  // empty: build
    int64_t min_count = 1;
    // mdlm: a byte-level BPE tokenizer.json (with "<|endoftext|>", which ends and pads a text); the mask is added
    // after its last id, as MDLM's checkpoints add it to GPT-2's
    std::filesystem::path tokenizer_file;

    // Passed to make_network, with max_length filled in, and for denoisers family (= kind),
    // max_condition_length and condition_dropout (the network drops conditions itself, drawing from the step's
    // generator).
    nlohmann::json network;

    // training
    int64_t steps = 0;
    int64_t batch_size = 64;
    double lr = 1e-3;
    int64_t warmup = 0;
    double weight_decay = 0.0;
    double grad_clip = 0.0;  // 0: no clipping
    uint64_t seed = 0;
    int64_t threads = 2;
    int64_t checkpoint_every = 0;  // 0: only when stopped early
    int64_t log_every = 50;
    double condition_dropout = 0.0;  // denoisers: share of rows trained with an all-pad condition
    // denoisers: share of rows whose condition keeps only some of its meaning representation's fields (each with
    // probability 1/2, at least one), so that a partial condition such as the semantic control's "food[Italian]"
    // is one the network was trained on
    double field_dropout = 0.0;
    // Decay of an exponential moving average of the weights (MDLM's and SEDD's 0.9999), updated after every step;
    // when > 0 the dev losses and the written model use the average. 0: none.
    double ema = 0.0;
    // "float32", or "bfloat16": the training step's matrix products in bfloat16 (LibTorch's CPU autocast), with
    // float32 weights, gradients, optimiser state and losses; dev losses stay float32.
    std::string precision = "float32";
    // A trained model directory of the same kind whose weights the network starts from (same tensor names and
    // shapes); its vocab.txt is the vocabulary unless tokenizer.vocab names one. Empty: random initial weights.
    std::filesystem::path init_from;

    int64_t max_length = 64;            // texts with more tokens are dropped
    int64_t max_condition_length = 64;  // denoisers: meaning representations with more tokens are dropped
    std::filesystem::path out;
    std::string source = "config";  // the config file, for messages

    // The settings that decide the trained weights, as JSON: a checkpoint written under other values is refused.
    nlohmann::json identity() const;
    // The identity's entries that name folders, as the config resolved them (so they depend on where the config
    // lies and where the command runs): the same folder written another way is the same identity.
    static constexpr const char* kIdentityFolders[] = {"/training/init_from", "/denoiser"};
};

// The noisy classifiers that guide controllers (nn/text_classifier.hpp), trained with `rudder train-controller`
// on text noised as the config's "denoiser" noises it: "syntax_classifier" on text annotated by `rudder annotate`,
// "attribute_classifier" on E2E CSV, each text's class read from its meaning representation.
bool is_controller_kind(const std::string& kind);

// Checks a config (every problem at once, each with its JSON pointer and what was expected). Relative paths are
// resolved against `base_dir`. Throws ConfigError.
TrainConfig parse_train_config(const nlohmann::json& config, const std::filesystem::path& base_dir,
                               const std::string& source = "config");
// Reads and checks a config file; unreadable or invalid JSON is a ConfigError too.
TrainConfig load_train_config(const std::filesystem::path& file);

}  // namespace rudder::train
