// What the readers of public checkpoints in Hugging Face layout (dit_checkpoint.cpp, bidirectional_llm.cpp) share:
// config.json field checks with messages that name the file and the field, and the weights read against the
// shapes a config implies.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rudder::nn::checkpoint {

[[noreturn]] void config_fail(const std::filesystem::path& file, const std::string& field, const std::string& what);
// The largest value a config's size field may hold (2^31 - 1): the shapes computed from sizes (3 H, 6 H, a ratio
// times H) then stay inside int64, and no network comes near it.
constexpr int64_t kMaxConfigSize = 2147483647;
// object[key] as a positive integer up to kMaxConfigSize; `field` is its name in messages (a path such as
// "model.n_heads").
int64_t positive_int(const nlohmann::json& object, const std::string& key, const std::string& field,
                     const std::filesystem::path& file);
bool boolean(const nlohmann::json& object, const std::string& key, const std::string& field,
             const std::filesystem::path& file);
// A ModelError for the first key of `object` not in `known`: a field whose effect the reader does not know.
void check_known(const nlohmann::json& object, const std::set<std::string>& known, const std::string& prefix,
                 const std::filesystem::path& file);
// Keys every Hugging Face PretrainedConfig may write that do not change the network.
const std::set<std::string>& hub_metadata_keys();
std::string shape_string(const std::vector<int64_t>& shape);

using Shapes = std::map<std::string, std::vector<int64_t>>;

// How many parameters `shapes` hold, saturating at INT64_MAX instead of overflowing.
int64_t parameter_count(const Shapes& shapes);

// Checks, before any allocation of the size a config implies, that the weights of `dir` can hold its network:
// `layers` layers of `one_layer`'s shapes plus `rest`, at 2 bytes a parameter (the narrowest dtype read), against
// the size of model.safetensors or of the shards its index names. Otherwise a ModelError naming `config_file` and
// `layers_field` (a layer count of 10^9 would cost minutes and gigabytes of shape bookkeeping before the weights
// were even opened). Weights that are missing throw as load_weights would.
void check_weights_can_hold(const std::filesystem::path& dir, const std::filesystem::path& config_file,
                            const std::string& layers_field, int64_t layers, const Shapes& one_layer,
                            const Shapes& rest);

// How 16-bit weights are held: widened once into float32 tensors of their own, or, for matrices (two or more
// dimensions), kept as stored, over the mapping, and widened at each use (as_float): the networks of billions of
// parameters (LLaDA, Dream) that ship in bfloat16 would need twice their file's size in memory otherwise.
enum class Storage { widen, keep_matrices };

// A weight as float32 for one use: a float32 one as it is, a 16-bit one widened for this call only.
at::Tensor as_float(const at::Tensor& weight);

// The weights of `dir`: model.safetensors, else model.safetensors.index.json and its shards, mapped
// (load_safetensors). Every tensor of `required` and those of `optional` that are present, with those shapes,
// float32, float16 or bfloat16 (float32 ones over the mapping; 16-bit ones as `storage` says); any other tensor is
// refused before data is read. `what` names the model in messages ("an MDLM DiT").
struct Weights {
    std::filesystem::path file;  // the safetensors file or the index, for messages
    std::map<std::string, at::Tensor> by_name;

    // Removes and returns the tensor `name`; a SafeTensorsError naming the file when it is not there.
    at::Tensor take(const std::string& name);
};
Weights load_weights(const std::filesystem::path& dir, const Shapes& required, const Shapes& optional,
                     const std::string& what, Storage storage = Storage::widen);

}  // namespace rudder::nn::checkpoint
