#include <rudder/nn/weights.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <map>

namespace rudder::nn {

std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
    for (const auto& item : module.named_buffers()) out.emplace_back(item.key(), item.value());
    return out;
}

namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
    throw SafeTensorsError("'" + file.string() + "': " + what);
}

// A stored tensor `name` (with the prefix) of `sizes` and `dtype` fits `target`, or fail() says how it does not.
void check_fits(const std::filesystem::path& file, const std::string& name, at::IntArrayRef sizes, at::ScalarType dtype,
                const at::Tensor& target) {
    if (sizes != target.sizes())
        fail(file, "tensor '" + name + "' has shape " + c10::str(sizes) + ", the network expects " +
                       c10::str(target.sizes()));
    // Float parameters may be stored narrower (`rudder convert-weights`); copy_ widens them.
    const bool widened = target.scalar_type() == at::kFloat && (dtype == at::kHalf || dtype == at::kBFloat16);
    if (dtype != target.scalar_type() && !widened)
        fail(file, "tensor '" + name + "' is " + std::string(c10::toString(dtype)) + ", the network expects " +
                       c10::toString(target.scalar_type()));
}

bool has_prefix(const std::string& name, const std::string& prefix) {
    return name.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::vector<std::string> load_module_tensors(torch::nn::Module& module, const SafeTensors& tensors,
                                             const std::filesystem::path& file, const std::string& prefix,
                                             const std::function<bool(const std::string&)>& may_be_missing) {
    std::vector<std::pair<std::string, at::Tensor>> wanted = module_tensors(module);
    std::vector<std::string> used, missing;
    at::NoGradGuard no_grad;
    for (auto& [name, target] : wanted) {
        const at::Tensor* source = tensors.find(prefix + name);
        if (!source) {
            if (!may_be_missing || !may_be_missing(name)) fail(file, "missing tensor '" + prefix + name + "'");
            missing.push_back(name);
            continue;
        }
        check_fits(file, prefix + name, source->sizes(), source->scalar_type(), target);
        target.copy_(*source);
        used.push_back(prefix + name);
    }
    for (const auto& [name, tensor] : tensors.tensors) {
        if (!has_prefix(name, prefix)) continue;
        if (std::find(used.begin(), used.end(), name) == used.end())
            fail(file, "unexpected tensor '" + name + "' (not part of the network)");
    }
    return missing;
}

void load_module_file(torch::nn::Module& module, const std::filesystem::path& file, const std::string& prefix) {
    std::map<std::string, at::Tensor> targets;
    for (auto& [name, tensor] : module_tensors(module)) targets.emplace(prefix + name, tensor);
    const SafeTensors tensors = load_safetensors(file, [&](const SafeTensorsEntry& entry) {
        if (!has_prefix(entry.name, prefix)) return false;
        const auto target = targets.find(entry.name);
        if (target == targets.end()) fail(file, "unexpected tensor '" + entry.name + "' (not part of the network)");
        check_fits(file, entry.name, entry.shape, entry.dtype, target->second);
        return true;
    });
    load_module_tensors(module, tensors, file, prefix);
}

}  // namespace rudder::nn
