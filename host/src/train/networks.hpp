// The networks the trainer can build, by kind, and moving their weights to and from safetensors files.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/trainable.hpp"
#include "safetensors.hpp"
#include "tokenizer.hpp"

namespace rudder::train {

// "teacher" (nn/teacher.hpp), "continuous" and "discrete" (nn/denoiser_net.hpp), "tagger" and "parser"
// (nn/syntax_nets.hpp), "syntax_classifier" (nn/syntax_classifier.hpp).
const std::vector<std::string>& network_kinds();
// Denoisers are conditioned on the meaning representation and written as "type": "transformer" models.
bool is_denoiser_kind(const std::string& kind);
// The tagger and the parser train on treebanks and are written as "type": "tagger" / "parser" models.
bool is_syntax_kind(const std::string& kind);

// Builds a freshly initialised network of `kind` (parameters drawn from LibTorch's default CPU generator, so
// at::manual_seed fixes them). Throws ConfigError (pointers relative to `network_config`) for a bad config and
// std::invalid_argument for an unknown kind.
std::shared_ptr<nn::TrainableNetwork> make_network(const std::string& kind, const nlohmann::json& network_config,
                                                   const Tokenizer& tokenizer);

// Every parameter and buffer of `module` by its dotted name, in registration order, as stored in model files.
std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module);

// Copies `tensors` into `module`'s parameters and buffers. Every name must be present with the same shape and
// dtype, and nothing else may be in the file; otherwise throws SafeTensorsError naming `file` and the tensor.
// `prefix` selects the tensors whose names start with it (the prefix is stripped), "" takes them all.
void load_module_tensors(torch::nn::Module& module, const SafeTensors& tensors, const std::filesystem::path& file,
                         const std::string& prefix = "");

}  // namespace rudder::train
