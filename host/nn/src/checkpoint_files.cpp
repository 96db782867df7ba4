#include "checkpoint_files.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/text/text_files.hpp>

namespace rudder::nn::checkpoint {
namespace fs = std::filesystem;
using json = nlohmann::json;

void config_fail(const fs::path& file, const std::string& field, const std::string& what) {
    throw ModelError("'" + file.string() + "': field '" + field + "': " + what);
}

int64_t positive_int(const json& object, const std::string& key, const std::string& field, const fs::path& file) {
    if (!object.contains(key)) config_fail(file, field, "missing (a positive integer)");
    const json& v = object.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxConfigSize)
        config_fail(file, field,
                    "expected a positive integer up to " + std::to_string(kMaxConfigSize) + ", got " + v.dump());
    return v.get<int64_t>();
}

bool boolean(const json& object, const std::string& key, const std::string& field, const fs::path& file) {
    if (!object.contains(key)) config_fail(file, field, "missing (true or false)");
    if (!object.at(key).is_boolean()) config_fail(file, field, "expected true or false, got " + object.at(key).dump());
    return object.at(key).get<bool>();
}

void check_known(const json& object, const std::set<std::string>& known, const std::string& prefix,
                 const fs::path& file) {
    for (const auto& [key, value] : object.items())
        if (!known.count(key))
            config_fail(file, prefix + key, "unknown field: this reader does not know what it changes");
}

const std::set<std::string>& hub_metadata_keys() {
    static const std::set<std::string> keys = {
        "architectures", "auto_map",    "model_type",           "torch_dtype",       "transformers_version",
        "_name_or_path", "return_dict", "output_hidden_states", "output_attentions", "dropout"};
    return keys;
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::ostringstream out;
    out << at::IntArrayRef(shape);
    return out.str();
}

int64_t parameter_count(const Shapes& shapes) {
    int64_t total = 0;
    for (const auto& [name, shape] : shapes) {
        int64_t count = 1;
        for (int64_t size : shape)
            if (__builtin_mul_overflow(count, size, &count)) return std::numeric_limits<int64_t>::max();
        if (__builtin_add_overflow(total, count, &total)) return std::numeric_limits<int64_t>::max();
    }
    return total;
}

namespace {

[[noreturn]] void no_weights(const fs::path& dir) {
    throw ModelError("'" + dir.string() +
                     "': neither model.safetensors nor model.safetensors.index.json (only "
                     "safetensors weights are read; pytorch_model.bin is not)");
}

// The bytes of the weights files of `dir`: model.safetensors, or the distinct shards its index names beside it;
// `holder` says which, for messages. Where there is nothing to measure (no weights file, an index that is not valid or
// names a shard that is not there) it throws what load_weights would: a caller never goes on to build the shapes of a
// config it could not check.
uint64_t weights_bytes(const fs::path& dir, std::string& holder) {
    std::error_code ec;
    const fs::path single = dir / "model.safetensors", index_file = dir / "model.safetensors.index.json";
    if (fs::exists(single, ec)) {
        holder = "model.safetensors holds";
        const uint64_t size = fs::file_size(single, ec);
        return ec ? 0 : size;
    }
    if (!fs::exists(index_file, ec)) no_weights(dir);
    const auto refuse = [&] {  // reads the headers only, and throws the loader's message
        load_sharded_safetensors(index_file, [](const SafeTensorsEntry&) { return false; });
        throw SafeTensorsError("'" + index_file.string() + "': its shards cannot be measured");
    };
    json index;
    try {
        index = read_json_file(index_file);
    } catch (const ModelError&) {
        refuse();
    }
    if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object()) refuse();
    std::set<std::string> shards;
    for (const auto& [name, shard] : index.at("weight_map").items()) {
        if (!shard.is_string()) refuse();
        const fs::path file = fs::path(shard.get<std::string>()).lexically_normal();  // as the loader takes it
        if (file.empty() || !file.is_relative() || *file.begin() == ".." || file.has_parent_path()) refuse();
        shards.insert(file.string());
    }
    if (shards.empty()) refuse();
    uint64_t total = 0;
    for (const auto& shard : shards) {
        const fs::path file = dir / shard;
        if (!fs::is_regular_file(file, ec)) refuse();
        const uint64_t size = fs::file_size(file, ec);
        if (!ec) total += size;
    }
    holder = "the " + std::to_string(shards.size()) + " shards model.safetensors.index.json names hold";
    return total;
}

}  // namespace

void check_weights_can_hold(const fs::path& dir, const fs::path& config_file, const std::string& layers_field,
                            int64_t layers, const Shapes& one_layer, const Shapes& rest) {
    int64_t parameters = 0;
    if (__builtin_mul_overflow(parameter_count(one_layer), layers, &parameters) ||
        __builtin_add_overflow(parameters, parameter_count(rest), &parameters))
        parameters = std::numeric_limits<int64_t>::max();
    std::string holder;
    const uint64_t held = weights_bytes(dir, holder);
    constexpr uint64_t kNarrowestBytes = 2;  // float16, bfloat16
    if (static_cast<uint64_t>(parameters) <= held / kNarrowestBytes) return;
    char count[32];
    std::snprintf(count, sizeof count, "%.3g", static_cast<double>(parameters));
    config_fail(config_file, layers_field,
                std::to_string(layers) + " layers of these sizes make " + count + " parameters, at least " +
                    byte_size_text(static_cast<uint64_t>(
                        std::min(static_cast<double>(kNarrowestBytes) * static_cast<double>(parameters), 1.8e19))) +
                    " of weights, but " + holder + " " + byte_size_text(held) +
                    ": the config does not describe these weights");
}

at::Tensor Weights::take(const std::string& name) {
    const auto found = by_name.find(name);
    if (found == by_name.end()) throw SafeTensorsError("'" + file.string() + "': missing tensor '" + name + "'");
    at::Tensor t = std::move(found->second);
    by_name.erase(found);
    return t;
}

at::Tensor as_float(const at::Tensor& weight) {
    return weight.scalar_type() == at::kFloat ? weight : weight.to(at::kFloat);
}

Weights load_weights(const fs::path& dir, const Shapes& required, const Shapes& optional, const std::string& what,
                     Storage storage) {
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    std::error_code ec;
    const bool sharded = !fs::exists(single, ec) && fs::exists(index, ec);
    if (!sharded && !fs::exists(single, ec)) no_weights(dir);
    Weights weights;
    weights.file = sharded ? index : single;
    auto check_entry = [&](const SafeTensorsEntry& e) {
        const auto in_required = required.find(e.name);
        const auto in_optional = optional.find(e.name);
        if (in_required == required.end() && in_optional == optional.end())
            throw SafeTensorsError("'" + weights.file.string() + "': unexpected tensor '" + e.name + "' (not part of " +
                                   what + " this config describes)");
        const std::vector<int64_t>& want = in_required != required.end() ? in_required->second : in_optional->second;
        if (e.shape != want)
            throw SafeTensorsError("'" + weights.file.string() + "': tensor '" + e.name + "' has shape " +
                                   shape_string(e.shape) + ", the config implies " + shape_string(want));
        if (e.dtype != at::kFloat && e.dtype != at::kHalf && e.dtype != at::kBFloat16)
            throw SafeTensorsError("'" + weights.file.string() + "': tensor '" + e.name + "' has dtype " +
                                   std::string(c10::toString(e.dtype)) + " (float32, float16 or bfloat16 expected)");
        return true;
    };
    SafeTensors st = sharded ? load_sharded_safetensors(index, check_entry) : load_safetensors(single, check_entry);
    for (const auto& [name, shape] : required)
        if (st.find(name) == nullptr)
            throw SafeTensorsError("'" + weights.file.string() + "': missing tensor '" + name + "'");
    // Each tensor is taken as it was read (over the mapping) or widened once: never held twice.
    for (auto& [name, tensor] : st.tensors) {
        at::Tensor read = std::move(tensor);
        const bool keep = storage == Storage::keep_matrices && read.dim() >= 2;
        weights.by_name[name] = keep ? read : as_float(read);
    }
    return weights;
}

}  // namespace rudder::nn::checkpoint
