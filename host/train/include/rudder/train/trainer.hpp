// The trainer behind `rudder train CONFIG`: reads the data, builds or loads the tokenizer, trains a network
// (make_network in train/src/networks.hpp) with AdamW, checkpoints and resumes, and writes a model directory.
// No LibTorch nn header here: the CLI includes this.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>

#include <rudder/train/config.hpp>

namespace rudder::train {

struct TrainOptions {
    std::ostream* progress = nullptr;  // progress lines (the CLI passes std::cerr); nullptr: silent
    // > 0: stop once this step is done, writing a checkpoint, as an interrupted run would have one.
    int64_t stop_after = 0;
    // Train into an `out` that already holds a finished model (otherwise refused).
    bool overwrite = false;
    // Not empty: train nothing; write the model of the run's checkpoint, as the run would write it if it ended
    // there, to this folder (the run's own files are only read, so it may be going on meanwhile).
    std::filesystem::path snapshot;
    // With `snapshot`, for a run with training.ema: write the weights themselves instead of their moving average
    // (early in a run, or with a decay too slow for its length, the average still holds the initial weights).
    bool snapshot_raw_weights = false;
};

struct TrainResult {
    bool finished = false;         // reached config.steps and wrote the model directory
    int64_t step = 0;              // steps done, in total
    int64_t resumed_from = 0;      // the checkpoint's step, 0 if started afresh
    int64_t texts = 0;             // training texts used
    int64_t dropped_too_long = 0;  // training texts (or meaning representations) over the length limits
    int64_t vocab_size = 0;
    int64_t parameters = 0;
    double last_loss = 0.0;          // mean training loss over the last log interval
    std::optional<double> dev_loss;  // the last dev loss computed
    double seconds = 0.0;            // wall time of this run's steps
    double steps_per_second = 0.0;   // this run
};

// Trains as configured. Resumes from the checkpoint in `out` when there is one written with the same identity().
// Throws ConfigError for a bad config, std::runtime_error (ModelError for files) for anything else.
TrainResult train(const TrainConfig& config, const TrainOptions& options = {});

// The mdlm kind's training texts as JSON Lines ({"prompt", "answer"} per text, meaning::prompted_texts of each row
// of data.train), which its BPE tokenizer is trained on (scripts/train_bpe_tokenizer.mjs). Returns their count.
// Throws std::runtime_error for another kind or unreadable data.
int64_t write_training_texts(const TrainConfig& config, const std::filesystem::path& file);

}  // namespace rudder::train
