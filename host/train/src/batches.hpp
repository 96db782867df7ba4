// Which examples each training step sees, and the tensors they become.
//
// Every draw comes from a generator seeded by (seed, stream, index), so any step, epoch or dev batch can be
// reproduced on its own, which is what makes a resumed run identical to an uninterrupted one.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <rudder/nn/training_batch.hpp>
#include <rudder/train/config.hpp>

#include "data.hpp"

namespace rudder::train {

enum class Stream : uint64_t { step = 1, epoch_order = 2, dev = 3, condition_fields = 4 };

// The seed of draw `index` of `stream`.
uint64_t derived_seed(uint64_t seed, Stream stream, uint64_t index);

// The rows of each step's batch: the next batch_size examples of the epochs' shuffled orders, which run on into each
// other. Any step can be asked for first (a resumed run starts in the middle).
class EpochOrder {
public:
    EpochOrder(int64_t examples, uint64_t seed) : n_(examples), seed_(seed) {}
    std::vector<int64_t> rows(int64_t step, int64_t batch_size);

private:
    int64_t n_;
    uint64_t seed_;
    int64_t epoch_ = -1;
    std::vector<int64_t> order_;  // epoch_'s
};

// `rows` of `examples` as a batch of the network `c` trains: the teacher's and the denoisers' tokens padded to
// max_length (denoisers: conditions to the batch's longest); treebank sentences padded to the batch's longest with
// their features and targets; a classifier's text padded to max_length with its tags and spans, or its class.
// With `fields_seed` and training.field_dropout, a denoiser's rows drop some of their conditions' fields, drawn from
// that seed (a training step's; dev batches keep whole conditions, so dev losses compare across stages).
nn::TrainingBatch make_batch(const TrainConfig& c, const std::vector<Example>& examples,
                             const std::vector<int64_t>& rows, int64_t pad,
                             std::optional<uint64_t> fields_seed = std::nullopt);

}  // namespace rudder::train
