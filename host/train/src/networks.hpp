// The networks the trainer can build, by kind.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {
class TrainableNetwork;  // nn/trainable.hpp
}

namespace rudder::train {

// "teacher" (nn/teacher.hpp), "continuous" and "discrete" (nn/denoiser_net.hpp), "mdlm" (nn/dit_trainable.hpp),
// "tagger" and "parser" (nn/syntax_nets.hpp), "syntax_classifier" and "attribute_classifier"
// (nn/text_classifier.hpp).
const std::vector<std::string>& network_kinds();
// Denoisers are conditioned on the meaning representation and written as "type": "transformer" models.
bool is_denoiser_kind(const std::string& kind);
// MDLM's DiT, trained on E2E as prompted texts (data-to-text, text-to-data, plain descriptions) with a BPE
// tokenizer.json, and written as a Hugging Face MDLM folder (config.json "model_type": "mdlm"): a hub-layout model.
inline bool is_hub_kind(const std::string& kind) { return kind == "mdlm"; }
// The tagger and the parser train on treebanks and are written as "type": "tagger" / "parser" models.
bool is_syntax_kind(const std::string& kind);

// Builds a freshly initialised network of `kind` (parameters drawn from LibTorch's default CPU generator, so
// at::manual_seed fixes them). Throws ConfigError (pointers relative to `network_config`) for a bad config and
// std::invalid_argument for an unknown kind.
std::shared_ptr<nn::TrainableNetwork> make_network(const std::string& kind, const nlohmann::json& network_config,
                                                   const Tokenizer& tokenizer);

}  // namespace rudder::train
