#include "checkpoints.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <rudder/nn/dit_trainable.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/weights.hpp>
#include <rudder/text/text_files.hpp>
#include "networks.hpp"

namespace rudder::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string vocab_text(const Tokenizer& tokenizer) {
    std::string text;
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) text += tokenizer.token(id) + "\n";
    return text;
}

// AdamW keys its per-parameter state by the parameter's TensorImpl address, as torch/optim/serialize.h does.
std::string state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// A stored identity whose folders (TrainConfig::kIdentityFolders) are the config's written another way, e.g. by a
// copy of the config elsewhere, takes the config's spelling. A folder that moved or vanished since still differs.
json with_folders_as_now(json stored, const json& now) {
    for (const char* pointer : TrainConfig::kIdentityFolders) {
        const json::json_pointer at(pointer);
        if (!stored.contains(at) || !now.contains(at) || !stored.at(at).is_string() || !now.at(at).is_string())
            continue;
        std::error_code ec;
        if (fs::equivalent(stored.at(at).get<std::string>(), now.at(at).get<std::string>(), ec))
            stored.at(at) = now.at(at);
    }
    return stored;
}

}  // namespace

void write_atomically(const fs::path& file, const std::string& content) {
    const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << content;
        out.flush();
        if (!out) throw ModelError("cannot write '" + tmp.string() + "'");
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec) throw ModelError("cannot move '" + tmp.string() + "' to '" + file.string() + "': " + ec.message());
}

fs::path checkpoint_dir(const TrainConfig& c) { return c.out / "checkpoint"; }

namespace {

// The weights file a checkpoint's state.json names: a plain file name inside the checkpoint folder, or "" when
// state.json names something else (written by hand, or by another program), which the trainer then leaves alone.
std::string checkpoint_weights_name(const json& state) {
    if (!state.is_object() || !state.contains("weights") || !state.at("weights").is_string()) return "";
    const std::string name = state.at("weights").get<std::string>();
    const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
    return plain ? name : "";
}

}  // namespace

std::optional<json> find_checkpoint(const TrainConfig& c, bool overwrite) {
    const fs::path dir = checkpoint_dir(c);
    const fs::path state_file = dir / "state.json";
    std::error_code ec;
    if (!fs::exists(state_file, ec)) {
        if (fs::exists(c.out / "config.json", ec) && !overwrite)
            throw ModelError("'" + c.out.string() +
                             "' already holds a trained model; choose another \"out\" or "
                             "pass --overwrite to train it again");
        return std::nullopt;
    }
    json state = read_json_file(state_file);
    if (!state.is_object() || !state.contains("identity") || !state.contains("step"))
        throw ModelError("'" + state_file.string() + "' is not a checkpoint state written by rudder train");
    const json identity = c.identity();
    const json stored = with_folders_as_now(state.at("identity"), identity);
    const json patch = json::diff(stored, identity);
    if (!patch.empty()) {
        std::string what;
        for (const auto& op : patch) {
            const json::json_pointer path(op.value("path", ""));
            const json before = stored.contains(path) ? stored.at(path) : json("(absent)");
            const json now = identity.contains(path) ? identity.at(path) : json("(absent)");
            what += "\n  " + path.to_string() + ": " + before.dump() + " in the checkpoint, " + now.dump() +
                    " in the config";
            if (what.size() > 2000) break;
        }
        throw ModelError("the checkpoint in '" + dir.string() + "' was written with another config:" + what +
                         "\nrestore those values, or delete '" + dir.string() + "' to start over");
    }
    return state;
}

void write_checkpoint(const TrainConfig& c, const TrainingState& state, const Progress& progress, int64_t examples,
                      const std::string& fingerprint, const Tokenizer& tokenizer) {
    const fs::path dir = checkpoint_dir(c);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw ModelError("cannot create '" + dir.string() + "': " + ec.message());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [name, tensor] : nn::module_tensors(state.network))
        tensors.emplace_back("network." + name, tensor);
    for (const auto& [name, p] : state.parameters) {
        auto it = state.optimizer.state().find(state_key(p));
        if (it == state.optimizer.state().end()) continue;  // a parameter that never had a gradient
        const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        tensors.emplace_back("adam." + name + ".exp_avg", s.exp_avg());
        tensors.emplace_back("adam." + name + ".exp_avg_sq", s.exp_avg_sq());
        tensors.emplace_back("adam." + name + ".step", at::scalar_tensor(s.step(), at::kLong));
    }
    for (size_t i = 0; i < state.averages.size(); ++i)
        tensors.emplace_back("ema." + state.parameters[i].first, state.averages[i]);
    // The weights go to a new file first; state.json, written last, is what names the current one. A crash at any
    // point leaves a state.json that names a complete file.
    char name[64];
    std::snprintf(name, sizeof name, "checkpoint-%09lld.safetensors", static_cast<long long>(progress.step));
    save_safetensors(dir / name, tensors, {{"step", std::to_string(progress.step)}});
    const fs::path state_file = dir / "state.json";
    std::string previous;
    if (fs::exists(state_file, ec)) previous = checkpoint_weights_name(read_json_file(state_file));
    const json record = {{"step", progress.step},   {"data_position", progress.step * c.batch_size},
                         {"examples", examples},    {"seconds", progress.seconds},
                         {"weights", name},         {"data_fingerprint", fingerprint},
                         {"identity", c.identity()}};
    write_atomically(dir / "vocab.txt", vocab_text(tokenizer));
    write_atomically(state_file, record.dump(2) + "\n");
    if (!previous.empty() && previous != name) fs::remove(dir / previous, ec);
}

Progress resume_checkpoint(const TrainConfig& c, const json& checkpoint, const TrainingState& state,
                           const std::string& fingerprint) {
    const fs::path dir = checkpoint_dir(c);
    const fs::path state_file = dir / "state.json";
    if (checkpoint.value("data_fingerprint", "") != fingerprint)
        throw ModelError("the training data or vocabulary changed since the checkpoint in '" + dir.string() +
                         "' was written; delete it to start over");
    if (!checkpoint.at("step").is_number_integer() || checkpoint.at("step").get<int64_t>() < 0 ||
        checkpoint.at("step").get<int64_t>() > c.steps)
        throw ModelError("'" + state_file.string() + "': step " + checkpoint.at("step").dump() + " is not in [0, " +
                         std::to_string(c.steps) + "]");
    Progress progress;
    progress.step = checkpoint.at("step").get<int64_t>();
    progress.seconds = checkpoint.value("seconds", 0.0);
    const std::string weights_name = checkpoint_weights_name(checkpoint);
    if (weights_name.empty())
        throw ModelError("'" + state_file.string() + "': \"weights\" must name a file in the checkpoint folder");
    const fs::path weights = dir / weights_name;
    const SafeTensors saved = load_safetensors(weights);
    nn::load_module_tensors(state.network, saved, weights, "network.");
    for (const auto& [name, p] : state.parameters) {
        const at::Tensor* exp_avg = saved.find("adam." + name + ".exp_avg");
        const at::Tensor* exp_avg_sq = saved.find("adam." + name + ".exp_avg_sq");
        const at::Tensor* step = saved.find("adam." + name + ".step");
        if (!exp_avg && !exp_avg_sq && !step) continue;
        if (!exp_avg || !exp_avg_sq || !step || exp_avg->sizes() != p.sizes() || exp_avg_sq->sizes() != p.sizes() ||
            step->numel() != 1 || step->scalar_type() != at::kLong)
            throw SafeTensorsError("'" + weights.string() + "': incomplete or misshapen optimizer state for '" + name +
                                   "'");
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(step->item<int64_t>());
        s->exp_avg(exp_avg->clone());
        s->exp_avg_sq(exp_avg_sq->clone());
        state.optimizer.state()[state_key(p)] = std::move(s);
    }
    for (size_t i = 0; i < state.averages.size(); ++i) {
        const auto& [name, p] = state.parameters[i];
        const at::Tensor* average = saved.find("ema." + name);
        if (!average || average->sizes() != p.sizes() || average->scalar_type() != p.scalar_type())
            throw SafeTensorsError("'" + weights.string() + "': no moving average of '" + name +
                                   "' of its shape (training.ema)");
        state.averages[i].copy_(*average);
    }
    return progress;
}

void start_train_log(const TrainConfig& c, std::optional<int64_t> resumed_step) {
    const fs::path log_file = c.out / "train_log.jsonl";
    std::string kept;
    std::error_code ec;
    if (resumed_step && fs::exists(log_file, ec)) {
        for (const auto& line : read_lines(log_file)) {
            try {
                if (!line.empty() && json_input::parse(line).value("step", int64_t{0}) <= *resumed_step)
                    kept += line + "\n";
            } catch (const std::exception&) {
                // A line cut short by a crash: dropped.
            }
        }
    }
    write_atomically(log_file, kept);
}

namespace {

// The BPE tokenizer.json of the config (an MDLM checkpoint's, or a classifier's denoiser's), copied into `dir`.
void copy_tokenizer_file(const fs::path& dir, const TrainConfig& c) {
    write_atomically(dir / "tokenizer.json", read_small_file(c.tokenizer_file, kMaxTokenizerFileBytes, "tokenizer"));
}

// The Hugging Face MDLM folder: tokenizer.json (the config's), training.json (`training` and the network config),
// model.safetensors (the DiT's tensors under the hub's names), config.json last (MDLM's).
void write_hub_model(const fs::path& dir, const TrainConfig& c, const nn::TrainableNetwork& network, int64_t step,
                     const json& training) {
    const auto* dit = dynamic_cast<const nn::DitTrainableNet*>(&network);
    if (dit == nullptr) throw std::logic_error("the mdlm kind without its DiT network");
    // Exactly the files of a Hugging Face MDLM folder, plus what Rudder's trainer records beside them (no reader
    // needs it): training.json, as config.json's "training" is for Rudder's own models.
    copy_tokenizer_file(dir, c);
    write_atomically(dir / "training.json",
                     json{{"kind", c.kind}, {"network", network.config()}, {"training", training}}.dump(2) + "\n");
    save_safetensors(dir / "model.safetensors", nn::module_tensors(network),
                     {{"format", "pt"}, {"rudder_kind", c.kind}, {"step", std::to_string(step)}});
    write_atomically(dir / "config.json", dit->hub_config().dump(2) + "\n");
}

}  // namespace

void write_model_files(const fs::path& dir, const TrainConfig& c, const nn::TrainableNetwork& network,
                       const Tokenizer& tokenizer, int64_t step, const json& training) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw ModelError("cannot create '" + dir.string() + "': " + ec.message());
    if (is_hub_kind(c.kind)) {
        write_hub_model(dir, c, network, step, training);
        return;
    }
    const bool denoiser = is_denoiser_kind(c.kind);
    const bool controller = is_controller_kind(c.kind);
    const json network_config = network.config();
    json families = json::array();
    if (denoiser) families.push_back(c.kind);
    if (controller) families.push_back(network_config.at("family"));
    // A classifier of an MDLM checkpoint reads its denoiser's BPE tokenizer.json as the runtime reads the checkpoint's
    // (load_model_tokenizer); every other model its word vocabulary.
    const bool bpe = !c.tokenizer_file.empty();
    const json tokenizer_spec = bpe ? json{{"type", "bpe"},
                                           {"file", "tokenizer.json"},
                                           {"pad", tokenizer.token(tokenizer.pad_id())},
                                           {"mask", tokenizer.token(tokenizer.mask_id())}}
                                    : json{{"type", "word"}, {"vocab", "vocab.txt"}};
    json config = {{"format_version", kModelFormatVersion},
                   {"type", denoiser ? "transformer" : c.kind},
                   {"families", families},
                   {"tokenizer", tokenizer_spec},
                   {"weights", "model.safetensors"},
                   {"network", network_config}};
    // The sampler reads the noise schedule from the top level; the network's config holds the one it learned.
    for (const char* key : {"schedule", "mask_schedule"})
        if (denoiser && network_config.contains(key)) config[key] = network_config.at(key);
    config["training"] = training;
    if (controller) config["denoiser"] = c.denoiser.filename().string();
    if (bpe)
        copy_tokenizer_file(dir, c);
    else
        write_atomically(dir / "vocab.txt", vocab_text(tokenizer));
    save_safetensors(dir / "model.safetensors", nn::module_tensors(network),
                     {{"format", "pt"}, {"rudder_kind", c.kind}, {"step", std::to_string(step)}});
    // config.json last: a directory with one holds a complete model.
    write_atomically(dir / "config.json", config.dump(2) + "\n");
}

void write_model(const TrainConfig& c, const nn::TrainableNetwork& network, const Tokenizer& tokenizer, int64_t step,
                 const json& training) {
    write_model_files(c.out, c, network, tokenizer, step, training);
    remove_checkpoint(c);
}

void remove_checkpoint(const TrainConfig& c) {
    // Only the files the trainer writes there: anything else a user keeps in the folder stays, and so does the
    // folder then.
    const fs::path dir = checkpoint_dir(c);
    std::error_code ec;
    std::string weights;
    try {
        if (fs::exists(dir / "state.json", ec)) weights = checkpoint_weights_name(read_json_file(dir / "state.json"));
    } catch (const ModelError&) {  // unreadable: its weights file is not known to be ours
    }
    for (const std::string& name : {weights, std::string("vocab.txt"), std::string("state.json")})
        if (!name.empty()) fs::remove(dir / name, ec);
    fs::remove(dir, ec);  // fails, as it should, when the folder still holds something
}

}  // namespace rudder::train
