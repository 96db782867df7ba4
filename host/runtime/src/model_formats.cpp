#include "model_formats.hpp"

#include <rudder/nn/bidirectional_llm.hpp>
#include <rudder/nn/dit_checkpoint.hpp>

#include "bidirectional_llm_denoiser.hpp"
#include "dit_checkpoint_denoiser.hpp"

namespace rudder {

const ModelFormat& format_of(const nlohmann::json& config) {
    static const std::vector<ModelFormat> formats = {
        {nn::is_dit_checkpoint_config, load_dit_checkpoint_model, describe_dit_checkpoint,
         load_dit_checkpoint_tokenizer},
        {nn::is_bidirectional_llm_config, load_bidirectional_llm_model, describe_bidirectional_llm,
         load_bidirectional_llm_tokenizer},
        {[](const nlohmann::json&) { return true; }, load_rudder_model, describe_rudder_model, load_rudder_tokenizer},
    };
    for (const auto& format : formats)
        if (format.recognises(config)) return format;
    return formats.back();
}

}  // namespace rudder
