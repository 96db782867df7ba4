// What the trainer needs of a network: a loss on a batch, and a description to rebuild it. Denoisers of both
// families and the teacher language model implement it. LibTorch's nn headers are heavy (~18 s per file): include
// this header only where training or a network is needed, never in the sampling loop's headers.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <rudder/nn/training_batch.hpp>

namespace rudder::nn {

class TrainableNetwork : public torch::nn::Module {
public:
    // Mean training loss over the batch (a scalar with a graph). Any noise (diffusion time, masking, condition
    // dropout) is drawn from `gen`, so a seed fixes the whole run.
    virtual at::Tensor loss(const TrainingBatch& batch, at::Generator& gen) = 0;
    // Everything needed to rebuild this network with the same shapes; stored as config.json's "network".
    virtual nlohmann::json config() const = 0;
    // What the network learns besides its weights, added to each train_log.jsonl line (a CDCD network's time warp).
    virtual nlohmann::json training_log() const { return nlohmann::json::object(); }
};

}  // namespace rudder::nn
