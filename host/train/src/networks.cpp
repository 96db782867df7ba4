#include "networks.hpp"

#include <stdexcept>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/dit_trainable.hpp>
#include <rudder/nn/syntax_nets.hpp>
#include <rudder/nn/teacher.hpp>
#include <rudder/nn/trainable.hpp>
#include <rudder/nn/text_classifier.hpp>

namespace rudder::train {
using json = nlohmann::json;

const std::vector<std::string>& network_kinds() {
    static const std::vector<std::string> kinds = {
        "teacher", "continuous", "discrete", "mdlm", "tagger", "parser", "syntax_classifier", "attribute_classifier"};
    return kinds;
}

bool is_denoiser_kind(const std::string& kind) { return kind == "continuous" || kind == "discrete"; }
bool is_syntax_kind(const std::string& kind) { return kind == "tagger" || kind == "parser"; }

std::shared_ptr<nn::TrainableNetwork> make_network(const std::string& kind, const json& network_config,
                                                   const Tokenizer& tokenizer) {
    if (kind == "teacher") return std::make_shared<nn::TeacherLM>(network_config, tokenizer);
    if (kind == "continuous") return std::make_shared<nn::ContinuousDenoiserNet>(network_config, tokenizer);
    if (kind == "discrete") return std::make_shared<nn::DiscreteDenoiserNet>(network_config, tokenizer);
    if (kind == "mdlm") return std::make_shared<nn::DitTrainableNet>(network_config, tokenizer);
    if (kind == "tagger") return std::make_shared<nn::TaggerNet>(network_config, tokenizer);
    if (kind == "parser") return std::make_shared<nn::ParserNet>(network_config, tokenizer);
    if (kind == "syntax_classifier" || kind == "attribute_classifier")
        return std::make_shared<nn::TextClassifierNet>(network_config, tokenizer);
    throw std::invalid_argument(
        "unknown network kind '" + kind +
        "' (known: teacher, continuous, discrete, mdlm, tagger, parser, syntax_classifier, attribute_classifier)");
}

}  // namespace rudder::train
