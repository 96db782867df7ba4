// The trainer's data: E2E CSV for the teacher and the denoisers, treebanks for the tagger and the parser, `rudder
// annotate` output or E2E CSV for the controllers' classifiers, each encoded into examples with the tokenizer the
// model will use.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <rudder/text/tokenizer.hpp>
#include <rudder/train/config.hpp>

namespace rudder::train {

struct Example {
    std::vector<int64_t> tokens;
    std::vector<int64_t> condition;    // denoisers only
    std::vector<int64_t> field_spans;  // denoisers with field_dropout: (start, end) in `condition` of each field
    std::vector<int64_t> features;     // tagger, parser: syntax::kWordFeatures per token
    // tagger: (PTB tag, universal tag) per token, -1 = unknown; parser: (start, end, label) per constituent
    std::vector<int64_t> targets;
    std::vector<int64_t> tags;  // syntax classifier: tag + 1 per token
    int64_t label = -1;         // attribute classifier: the text's class
    int64_t prompt_length = 0;  // mdlm: the first tokens are a prompt, never noised in training
};

struct Dataset {
    std::vector<Example> examples;
    int64_t dropped_too_long = 0;
    int64_t dropped_condition = 0;
    int64_t dropped_empty = 0;
    int64_t unknown_labels = 0;      // dev only: gold tags or constituents the training data never had
    int64_t dropped_misaligned = 0;  // annotations whose words are not the tokenizer's tokens
    int64_t dropped_unlabelled = 0;  // attribute classifier: texts whose meaning representation maps to no class
};

// A config's data, encoded: the tokenizer it was encoded with, the training and dev examples, and the network
// config completed from the data (tag and label sets) and, for a controller's classifier, from its denoiser.
struct TrainingData {
    std::shared_ptr<const Tokenizer> tokenizer;
    Dataset train, dev;
    nlohmann::json network_config;
    std::string fingerprint;  // of the vocabulary and every training example: a resumed run must see the same
};

// Reads and encodes the data `c` names. Throws ConfigError for network keys the data fills in, std::runtime_error
// (ModelError for files) for data that cannot be used. `say` reports what was dropped.
TrainingData load_training_data(const TrainConfig& c, const std::function<void(const std::string&)>& say);

// The mdlm kind's training texts, JSON Lines of {"prompt", "answer"} (meaning::prompted_texts of each row of
// data.train): what its BPE tokenizer is trained on (scripts/train_bpe_tokenizer.mjs). `count` gets their number.
std::string prompted_texts_jsonl(const TrainConfig& c, int64_t& count);

}  // namespace rudder::train
