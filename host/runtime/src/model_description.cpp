// describe_model: what a model folder holds, from its config.json and the headers of its weights files. No tensor
// is read, so describing a 7 B checkpoint costs as little as describing a bundled model.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include <rudder/nn/bidirectional_llm.hpp>
#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/runtime/model.hpp>

#include "bidirectional_llm_denoiser.hpp"
#include "dit_checkpoint_denoiser.hpp"
#include "model_formats.hpp"

namespace rudder {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string dtype_name(at::ScalarType t) {
    switch (t) {
        case at::kFloat: return "float32";
        case at::kHalf: return "float16";
        case at::kBFloat16: return "bfloat16";
        case at::kDouble: return "float64";
        default: return c10::toString(t);
    }
}

// The weights named by `config` (Rudder: "weights"), else model.safetensors, else the sharded index: their files,
// total bytes, parameter count and dtypes, from the headers alone.
json weights_of(const fs::path& dir, const json& config) {
    int64_t parameters = 0;
    std::set<std::string> dtypes;
    const SafeTensorsSelection count = [&](const SafeTensorsEntry& e) {
        int64_t n = 1;
        for (int64_t d : e.shape) n *= d;
        parameters += n;
        dtypes.insert(dtype_name(e.dtype));
        return false;  // the header is all this needs
    };
    json files = json::array();
    uint64_t bytes = 0;
    std::error_code ec;
    const std::string named = config.is_object() && config.contains("weights") && config.at("weights").is_string()
                                  ? config.at("weights").get<std::string>()
                                  : "model.safetensors";
    if (fs::exists(dir / named, ec)) {
        const fs::path file = model_file(dir, named);
        load_safetensors(file, count);
        files.push_back(named);
        bytes += fs::file_size(file, ec);
    } else if (fs::exists(dir / "model.safetensors.index.json", ec)) {
        load_sharded_safetensors(dir / "model.safetensors.index.json", count);
        const json index = read_json_file(dir / "model.safetensors.index.json");
        std::set<std::string> shards;
        if (index.contains("weight_map") && index.at("weight_map").is_object())
            for (const auto& item : index.at("weight_map").items()) shards.insert(item.value().get<std::string>());
        for (const auto& shard : shards) {
            files.push_back(shard);
            bytes += fs::file_size(dir / shard, ec);
        }
    } else {
        return nullptr;
    }
    return {{"files", files}, {"bytes", bytes}, {"parameters", parameters}, {"dtypes", json(dtypes)}};
}

// The tokenizer files beside a public checkpoint's config.json.
std::string checkpoint_tokenizer_files(const fs::path& dir) { return describe_tokenizer_files(tokenizer_files(dir)); }

const char* kHardControls = "hard constraints (length, span, exclude_words) and the composer's deltas";
const char* kLearnedControls =
    "learned controls need a classifier trained for this model's noise and vocabulary "
    "(rudder train-controller), or, on a model that masks tokens, one of another vocabulary that reads its text "
    "(\"input\": \"text\")";

// A Rudder model folder's description, from its config.json checked as load_model checks it.
json describe_checked_rudder_model(const fs::path& dir, const json& config) {
    const std::string type = config.value("type", "");
    json d = {{"format", "Rudder model folder"}};
    if (type == "corpus") {
        d["kind"] = "exact corpus denoiser (the posterior over a list of sentences, in closed form)";
        d["families"] = config.value("families", json::array());
        d["diffusion"] = true;
        d["tokenizer"] = "word, " + config.value("tokenizer", json::object()).value("vocab", std::string("vocab.txt"));
        d["controls"] = std::string(kHardControls) + "; it conditions on hard constraints exactly";
        return d;
    }
    const json network = config.value("network", json::object());
    const json tokenizer = config.value("tokenizer", json::object());
    d["tokenizer"] = (tokenizer.value("type", "") == "bpe"
                          ? "byte-level BPE, " + tokenizer.value("file", std::string("tokenizer.json"))
                          : "word, " + tokenizer.value("vocab", std::string("vocab.txt"))) +
                     " (" + std::to_string(network.value("vocab_size", int64_t{0})) + " tokens)";
    d["weights"] = weights_of(dir, config);
    if (type != "transformer") {
        static const std::map<std::string, std::string> kinds = {
            {"teacher", "causal language model that judges fluency (rudder score); not a diffusion model"},
            {"tagger", "part-of-speech tagger (rudder annotate, the syntax controllers); not a diffusion model"},
            {"parser", "constituency parser (rudder annotate, the syntax controllers); not a diffusion model"},
            {"syntax_classifier", "noisy syntax classifier of the pos, syntax_span and syntax_tree controllers"},
            {"attribute_classifier", "attribute classifier (the sentiment controller's guide or judge)"}};
        const auto it = kinds.find(type);
        d["kind"] = it != kinds.end() ? it->second : "unknown type '" + type + "'";
        d["diffusion"] = false;
        if (config.contains("denoiser")) d["trained_for"] = config.at("denoiser");
        return d;
    }
    const std::string family = network.value("family", "");
    d["diffusion"] = true;
    d["families"] = config.value("families", json::array());
    if (family == "continuous") {
        const bool cdcd = network.value("objective", "diffusion_lm") == "cdcd";
        d["kind"] = cdcd ? "continuous denoiser trained as CDCD (cross-entropy, score interpolation, normalised "
                           "embeddings, learned time warp" +
                               std::string(network.value("self_conditioning", false) ? ", self-conditioning)" : ")")
                         : "continuous denoiser trained as Diffusion-LM (x0 prediction, rounding head)";
        d["noise"] = config.value("schedule", network.value("schedule", json::object()));
        if (cdcd && d["noise"].contains("warp"))
            d["noise"]["warp"] = "(" + std::to_string(d["noise"]["warp"].size()) + " values: the learned CDF)";
        d["embed_dim"] = network.value("embed_dim", int64_t{0});
    } else {
        const bool score = network.value("objective", "subs") == "score_entropy";
        const std::string graph = network.value("graph", "absorb");
        d["kind"] = score ? "discrete denoiser trained with SEDD's score entropy, " + graph + " graph"
                          : std::string("discrete denoiser trained as MDLM (SUBS, absorbing)");
        d["noise"] = graph == "uniform" ? network.value("uniform_schedule", json::object())
                                        : config.value("mask_schedule", network.value("mask_schedule", json::object()));
        if (graph == "uniform")
            d["sampling"] =
                "uniform noise: every position is redrawn at every step ('analytic': Tweedie tau-leaping, "
                "'euler'); no position is ever masked";
    }
    d["network"] = {{"width", network.value("dim", int64_t{0})},
                    {"layers", network.value("layers", int64_t{0})},
                    {"heads", network.value("heads", int64_t{0})},
                    {"max_length", network.value("max_length", int64_t{0})}};
    const bool conditional = network.value("max_condition_length", int64_t{0}) > 0;
    d["conditional"] = conditional;
    d["recommended_sampler"] =
        config.contains("sampler") ? config.at("sampler").value(family, json(nullptr)) : json(nullptr);
    d["controls"] = std::string(kHardControls) + (conditional ? "; cfg (trained with condition dropout)" : "") + "; " +
                    kLearnedControls;
    return d;
}

}  // namespace

json describe_rudder_model(const fs::path& dir, const json& config) {
    return describe_checked_rudder_model(dir, checked_model_config(config, dir / "config.json"));
}

json describe_dit_checkpoint(const fs::path& dir, const json& config) {
    const nn::DitConfig c = nn::parse_dit_config(config, dir / "config.json");
    const std::string kind = c.flavor == nn::DitFlavor::mdlm   ? "MDLM's DiT (SUBS, absorbing)"
                             : c.flavor == nn::DitFlavor::sedd ? "SEDD's DiT (score entropy, absorbing graph)"
                             : c.flavor == nn::DitFlavor::udlm ? "UDLM's DiT (uniform noise, clean-token output)"
                             : c.flavor == nn::DitFlavor::duo
                                 ? "DUO's DiT (uniform noise, clean-token output)"
                                 : "BD3-LM's DiT (SUBS, absorbing; block-causal attention over blocks of " +
                                       std::to_string(c.block_size) + " positions)";
    json d = {{"format", "public checkpoint (Hugging Face layout)"},
              {"kind", kind},
              {"diffusion", true},
              {"families", {"discrete"}},
              {"noise",
               {{"graph", c.uniform() ? "uniform" : "absorbing"},
                {"log_linear_eps", c.schedule_eps},
                {"time_conditioning", c.time_conditioning}}},
              {"network",
               {{"width", c.hidden_size}, {"layers", c.n_blocks}, {"heads", c.n_heads}, {"max_length", c.max_length}}},
              {"vocab_size", c.vocab_size},
              {"mask_id", c.uniform() ? json(nullptr) : json(c.mask_id())},
              {"conditional", false},
              {"tokenizer", checkpoint_tokenizer_files(dir)},
              {"recommended_sampler", dit_checkpoint_sampler(c)},
              {"controls", std::string(kHardControls) + "; " + kLearnedControls}};
    d["weights"] = weights_of(dir, config);
    return d;
}

json describe_bidirectional_llm(const fs::path& dir, const json& config) {
    const nn::BidirectionalLlmConfig c = nn::parse_bidirectional_llm_config(config, dir / "config.json");
    json d = {{"format", "public checkpoint (Hugging Face layout)"},
              {"kind", c.name() + (c.shifted() ? " (bidirectional transformer, predictions shifted by one)"
                                               : " (bidirectional transformer)")},
              {"diffusion", true},
              {"families", {"discrete"}},
              {"network",
               {{"width", c.hidden_size},
                {"layers", c.n_layers},
                {"heads", c.n_heads},
                {"kv_heads", c.n_kv_heads},
                {"max_length", c.max_length}}},
              {"vocab_size", c.vocab_size},
              {"mask_id", c.mask_id},
              {"conditional", false},
              {"tokenizer", checkpoint_tokenizer_files(dir)},
              {"recommended_sampler", bidirectional_llm_sampler(c.flavor)},
              {"controls", std::string(kHardControls) + "; " + kLearnedControls}};
    d["weights"] = weights_of(dir, config);
    return d;
}

json describe_model(const fs::path& dir) {
    const json config = read_json_file(dir / "config.json");
    json d = format_of(config).describe(dir, config);
    std::error_code ec;
    d["name"] = fs::path(dir).lexically_normal().filename().string();
    d["path"] = fs::absolute(dir, ec).lexically_normal().string();
    return d;
}

bool is_generator(const fs::path& dir) {
    try {
        return describe_model(dir).value("diffusion", false);
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace rudder
