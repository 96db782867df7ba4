// What the trainer writes: checkpoints it resumes from (out/checkpoint: the network, the optimiser state and the
// run's progress) and, at the end, the model directory. Every file is written whole or not at all.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rudder/nn/trainable.hpp>
#include <rudder/text/tokenizer.hpp>
#include <rudder/train/config.hpp>

namespace rudder::train {

// Writes through a temporary file and a rename, so `file` is either the old or the new content, never half.
void write_atomically(const std::filesystem::path& file, const std::string& content);

// The network and the optimiser a checkpoint saves and restores; the parameters by name, in a fixed order; and
// the moving average of each parameter (training.ema), in the same order, or empty when the run keeps none.
struct TrainingState {
    nn::TrainableNetwork& network;
    torch::optim::AdamW& optimizer;
    const std::vector<std::pair<std::string, at::Tensor>>& parameters;
    std::vector<at::Tensor>& averages;
};

// Where a run stands, as a checkpoint records it besides the tensors.
struct Progress {
    int64_t step = 0;
    double seconds = 0.0;  // training time of every run so far
};

std::filesystem::path checkpoint_dir(const TrainConfig& c);

// The state of the checkpoint in c.out, or nullopt when there is none. Throws ModelError for a checkpoint written
// with another config (naming every setting that differs), or when c.out holds a finished model and not
// `overwrite`.
std::optional<nlohmann::json> find_checkpoint(const TrainConfig& c, bool overwrite);

// Saves the state at `progress` as the checkpoint (the previous one is removed once the new one is complete).
// `examples` and `fingerprint` describe the training data, which a resumed run must find unchanged.
void write_checkpoint(const TrainConfig& c, const TrainingState& state, const Progress& progress, int64_t examples,
                      const std::string& fingerprint, const Tokenizer& tokenizer);

// Loads the checkpoint `checkpoint` (from find_checkpoint) into `state` and returns its progress. Throws ModelError
// when the data changed since (another fingerprint) or the files are damaged.
Progress resume_checkpoint(const TrainConfig& c, const nlohmann::json& checkpoint, const TrainingState& state,
                           const std::string& fingerprint);

// The run's log (out/train_log.jsonl) as a run starts: a resumed run keeps the entries up to the step it starts
// from, a fresh run starts a fresh log.
void start_train_log(const TrainConfig& c, std::optional<int64_t> resumed_step);

// Removes what write_checkpoint wrote (state.json, vocab.txt, the weights state.json names) and the checkpoint
// folder if that leaves it empty; other files in it are not the trainer's and stay.
void remove_checkpoint(const TrainConfig& c);

// Writes the model directory `dir` (vocab.txt, model.safetensors, config.json last). `training`: config.json's
// "training" object (steps, seed, losses, ...). The mdlm kind writes a Hugging Face MDLM folder instead
// (tokenizer.json, training.json, model.safetensors, config.json last).
void write_model_files(const std::filesystem::path& dir, const TrainConfig& c, const nn::TrainableNetwork& network,
                       const Tokenizer& tokenizer, int64_t step, const nlohmann::json& training);

// write_model_files to c.out, then removes the checkpoint: the run's end.
void write_model(const TrainConfig& c, const nn::TrainableNetwork& network, const Tokenizer& tokenizer, int64_t step,
                 const nlohmann::json& training);

}  // namespace rudder::train
