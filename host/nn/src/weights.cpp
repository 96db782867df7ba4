#include <rudder/nn/weights.hpp>

#include <ATen/ATen.h>

#include <algorithm>

namespace rudder::nn {

std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
    for (const auto& item : module.named_buffers()) out.emplace_back(item.key(), item.value());
    return out;
}

void load_module_tensors(torch::nn::Module& module, const SafeTensors& tensors, const std::filesystem::path& file,
                         const std::string& prefix) {
    auto fail = [&](const std::string& what) { throw SafeTensorsError("'" + file.string() + "': " + what); };
    std::vector<std::pair<std::string, at::Tensor>> wanted = module_tensors(module);
    std::vector<std::string> used;
    at::NoGradGuard no_grad;
    for (auto& [name, target] : wanted) {
        const at::Tensor* source = tensors.find(prefix + name);
        if (!source) fail("missing tensor '" + prefix + name + "'");
        if (source->sizes() != target.sizes())
            fail("tensor '" + prefix + name + "' has shape " + c10::str(source->sizes()) + ", the network expects " +
                 c10::str(target.sizes()));
        // Float parameters may be stored narrower (`rudder convert-weights`); copy_ widens them.
        const bool widened = target.scalar_type() == at::kFloat &&
                             (source->scalar_type() == at::kHalf || source->scalar_type() == at::kBFloat16);
        if (source->scalar_type() != target.scalar_type() && !widened)
            fail("tensor '" + prefix + name + "' is " + std::string(c10::toString(source->scalar_type())) +
                 ", the network expects " + c10::toString(target.scalar_type()));
        target.copy_(*source);
        used.push_back(prefix + name);
    }
    for (const auto& [name, tensor] : tensors.tensors) {
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        if (std::find(used.begin(), used.end(), name) == used.end())
            fail("unexpected tensor '" + name + "' (not part of the network)");
    }
}

}  // namespace rudder::nn
