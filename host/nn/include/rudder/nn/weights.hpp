// A network's parameters and buffers to and from the tensors of a safetensors file.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <rudder/nn/safetensors.hpp>

namespace rudder::nn {

// Every parameter and buffer of `module` by its dotted name, in registration order, as stored in model files.
std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module);

// Copies `tensors` into `module`'s parameters and buffers. Every name must be present with the same shape and
// dtype (float32 parameters may be stored as float16 or bfloat16: they are widened), and nothing else may be in
// the file; otherwise throws SafeTensorsError naming `file` and the tensor. `prefix` selects the tensors whose
// names start with it (the prefix is stripped), "" takes them all.
// `may_be_missing` (given the name without the prefix) lets a network tensor be absent from the file: it keeps
// its value, and the names of those absent are returned (a deeper network grown from a trained one, for example).
std::vector<std::string> load_module_tensors(torch::nn::Module& module, const SafeTensors& tensors,
                                             const std::filesystem::path& file, const std::string& prefix = "",
                                             const std::function<bool(const std::string&)>& may_be_missing = {});

// load_module_tensors from the safetensors `file`, checking its header first: a tensor the network does not have,
// or one of another shape or dtype, is refused before any tensor's data is read.
void load_module_file(torch::nn::Module& module, const std::filesystem::path& file, const std::string& prefix = "");

}  // namespace rudder::nn
