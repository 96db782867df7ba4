// The training loop: the network and its optimiser, steps with a learning-rate schedule and gradient clipping, dev
// losses, progress lines and the log; data (data.hpp), batches (batches.hpp) and what is written (checkpoints.hpp)
// live in their own files.
#include <rudder/train/trainer.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/text_classifier.hpp>
#include <rudder/nn/weights.hpp>
#include "networks.hpp"

#include "batches.hpp"
#include "checkpoints.hpp"
#include "data.hpp"

namespace rudder::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double kPi = 3.14159265358979323846;

// LibTorch's CPU autocast for the scope (torch.autocast("cpu", torch.bfloat16)): matrix products run in bfloat16,
// while the weights, their gradients and the optimiser's state stay float32.
class Autocast {
public:
    explicit Autocast(bool on) : on_(on) {
        if (!on_) return;
        was_enabled_ = at::autocast::is_cpu_enabled();
        was_dtype_ = at::autocast::get_autocast_cpu_dtype();
        at::autocast::set_cpu_enabled(true);
        at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
        at::autocast::increment_nesting();
    }
    ~Autocast() {
        if (!on_) return;
        if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        at::autocast::set_cpu_enabled(was_enabled_);
        at::autocast::set_autocast_cpu_dtype(was_dtype_);
    }
    Autocast(const Autocast&) = delete;
    Autocast& operator=(const Autocast&) = delete;

private:
    bool on_;
    bool was_enabled_ = false;
    at::ScalarType was_dtype_ = at::kBFloat16;
};

// Linear warmup to lr, then a cosine decay to lr / 10 at the last step.
double learning_rate(const TrainConfig& c, int64_t step) {
    if (step <= c.warmup) return c.lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, c.warmup));
    const double progress =
        static_cast<double>(step - c.warmup) / static_cast<double>(std::max<int64_t>(1, c.steps - c.warmup));
    return c.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(kPi * std::min(1.0, progress))));
}

// Scales the gradients so that their global L2 norm is at most max_norm, as torch.nn.utils.clip_grad_norm_ does.
void clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) {
    std::vector<at::Tensor> norms;
    for (const auto& p : parameters)
        if (p.grad().defined()) norms.push_back(p.grad().norm());
    if (norms.empty()) return;
    const double total = at::stack(norms).norm().item<double>();
    const double scale = max_norm / (total + 1e-6);
    if (scale >= 1.0) return;
    for (const auto& p : parameters)
        if (p.grad().defined()) p.grad().mul_(scale);
}

std::string duration_text(double seconds) {
    const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
    char text[32];
    if (s >= 3600)
        std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(s / 3600),
                      static_cast<long long>(s % 3600 / 60));
    else
        std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(s / 60),
                      static_cast<long long>(s % 60));
    return text;
}

class Trainer {
public:
    Trainer(const TrainConfig& config, const TrainOptions& options) : c_(config), o_(options) {}
    TrainResult run();

private:
    void say(const std::string& line) {
        if (o_.progress) *o_.progress << line << std::endl;
    }
    void prepare_out_dir();
    void build_network();
    void copy_denoiser_embedding();
    void start_from_model(bool load_weights);
    double dev_loss();
    void log_step(int64_t step, double loss, std::optional<double> dev, double lr);
    TrainingState state() { return {*network_, *optimizer_, parameters_, averages_}; }
    void update_averages();
    nlohmann::json training_record(int64_t step) const;
    TrainResult write_snapshot();
    void swap_in_averages();

    const TrainConfig& c_;
    const TrainOptions& o_;
    TrainingData data_;
    std::shared_ptr<nn::TrainableNetwork> network_;
    std::unique_ptr<torch::optim::AdamW> optimizer_;
    std::vector<std::pair<std::string, at::Tensor>> parameters_;  // named, in a fixed order
    std::vector<at::Tensor> averages_;  // training.ema: each parameter's moving average, in parameters_' order
    int64_t start_step_ = 0;
    double seconds_before_ = 0.0;    // training time of earlier runs (from the checkpoint)
    int64_t init_steps_ = 0;         // steps behind the training.init_from weights, earlier stages included
    int64_t grown_from_layers_ = 0;  // the init_from model's layers when this network has more, else 0
    std::string from_objective_;     // the init_from model's objective when it is not this network's, else ""
    double run_seconds_ = 0.0;
    std::optional<double> last_dev_;
    std::optional<double> last_dev_accuracy_;  // attribute classifier: share of dev texts classed right
};

void Trainer::prepare_out_dir() {
    std::error_code ec;
    fs::create_directories(c_.out, ec);
    if (ec) throw ModelError("cannot create '" + c_.out.string() + "': " + ec.message());
}

void Trainer::copy_denoiser_embedding() {
    auto* classifier = dynamic_cast<nn::TextClassifierNet*>(network_.get());
    if (classifier == nullptr || classifier->family() != Family::continuous) return;
    const json denoiser = read_json_file(c_.denoiser / "config.json");
    const fs::path weights = model_file(c_.denoiser, denoiser.value("weights", "model.safetensors"));
    const SafeTensors saved =
        load_safetensors(weights, [](const SafeTensorsEntry& e) { return e.name == "embedding"; });
    const at::Tensor* table = saved.find("embedding");
    if (table == nullptr)
        throw ModelError("'" + weights.string() + "' has no tensor 'embedding' (not a continuous denoiser)");
    // A CDCD denoiser diffuses its table's rows normalised: the classifier must see the same.
    const bool cdcd = denoiser.contains("network") && denoiser.at("network").value("objective", "") == "cdcd";
    classifier->set_noise_embedding(cdcd ? nn::cdcd_embedding(*table) : *table);
}

void Trainer::build_network() {
    // The initial weights come from the default CPU generator: seeding it makes them a function of the seed.
    at::manual_seed(c_.seed);
    try {
        network_ = make_network(c_.kind, data_.network_config, *data_.tokenizer);
    } catch (const ConfigError& e) {
        std::vector<ConfigIssue> issues;
        for (const auto& issue : e.issues()) issues.push_back({"/network" + issue.pointer, issue.message});
        throw ConfigError(c_.source, std::move(issues));
    }
    if (is_controller_kind(c_.kind)) copy_denoiser_embedding();
    network_->train();
    parameters_.clear();
    std::vector<at::Tensor> decay, no_decay;
    for (const auto& item : network_->named_parameters()) {
        parameters_.emplace_back(item.key(), item.value());
        // Weight decay on matrices only: biases and LayerNorm gains are not decayed.
        (item.value().dim() >= 2 ? decay : no_decay).push_back(item.value());
    }
    auto options = [&](double weight_decay) {
        return torch::optim::AdamWOptions(c_.lr).betas({0.9, 0.98}).eps(1e-8).weight_decay(weight_decay);
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options(c_.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    optimizer_ = std::make_unique<torch::optim::AdamW>(std::move(groups), options(c_.weight_decay));
}

void Trainer::start_from_model(bool load_weights) {
    // Steps behind the weights: the model's own, plus those of the model it started from, if any.
    // An MDLM folder keeps the trainer's record in training.json (its config.json is MDLM's).
    const json config = read_json_file(c_.init_from / (is_hub_kind(c_.kind) ? "training.json" : "config.json"));
    if (const auto training = config.find("training"); training != config.end() && training->is_object()) {
        init_steps_ = training->value("steps", int64_t{0});
        if (const auto earlier = training->find("init_from"); earlier != training->end() && earlier->is_object())
            init_steps_ += earlier->value("steps", int64_t{0});
    }
    // A denoiser with more layers than the trained one grows from it: the trained blocks come first, and the new
    // ones start as the identity, so training goes on from the trained network's function. A CDCD network may
    // start from a Diffusion-LM one: what the two objectives share, and the head as its rounding. (Decided before
    // the weights are read, so that a resumed run's model records them too.)
    const json held_network = config.value("network", json::object());
    const int64_t held_layers = held_network.value("layers", int64_t{0});
    const int64_t layers = network_->config().value("layers", int64_t{0});
    const bool grows = is_denoiser_kind(c_.kind) && held_layers > 0 && layers > held_layers;
    const std::string held_objective = held_network.value("objective", "diffusion_lm");
    const std::string objective = network_->config().value("objective", "diffusion_lm");
    const bool other_objective = c_.kind == "continuous" && held_objective != objective;
    if (other_objective && (held_objective != "diffusion_lm" || objective != "cdcd" || grows))
        throw ModelError("training.init_from: '" + c_.init_from.string() + "' was trained with the " + held_objective +
                         " objective; a " + objective + " network" + (grows ? " with more layers" : "") +
                         " cannot start from it (a cdcd network can start from a diffusion_lm one of its sizes)");
    if (grows) grown_from_layers_ = held_layers;
    if (other_objective) from_objective_ = held_objective;
    if (!load_weights) return;

    const fs::path weights = c_.init_from / "model.safetensors";
    // The trainer stamps every model's weights with its kind (the header says it; no tensor is read for it).
    const SafeTensors header = load_safetensors(weights, [](const SafeTensorsEntry&) { return false; });
    const auto kind = header.metadata.find("rudder_kind");
    const std::string held = kind != header.metadata.end() ? kind->second : "?";
    if (held != c_.kind)
        throw ModelError("training.init_from: '" + c_.init_from.string() + "' holds a " + held +
                         " model; this config trains a " + c_.kind);
    const SafeTensors tensors = load_safetensors(weights);
    const std::string from = "starting from the weights of '" + c_.init_from.string() + "' (trained for " +
                             std::to_string(init_steps_) + " steps)";
    if (other_objective) {
        auto* continuous = dynamic_cast<nn::ContinuousDenoiserNet*>(network_.get());
        if (continuous == nullptr) throw std::logic_error("a continuous kind without a continuous denoiser network");
        continuous->start_from_diffusion_lm(tensors, weights);
        say(from +
            ", trained with the diffusion_lm objective: the cdcd head starts as its rounding of x0, "
            "self-conditioning at zero");
        return;
    }
    if (!grows) {
        nn::load_module_tensors(*network_, tensors, weights);
        say(from);
        return;
    }
    auto* denoiser = dynamic_cast<nn::DenoiserNet*>(network_.get());
    if (denoiser == nullptr) throw std::logic_error("a denoiser kind without a denoiser network");
    const std::vector<std::string> fresh = denoiser->grow_from(tensors, weights, held_layers);
    say(from + "; grown from " + std::to_string(held_layers) + " to " + std::to_string(layers) +
        " layers, the new ones starting as the identity (" + std::to_string(fresh.size()) + " new tensors)");
}

// config.json's "training" record of the weights after `step`: what any model written from this run says.
json Trainer::training_record(int64_t step) const {
    json training = {{"steps", step}, {"seed", c_.seed}, {"seconds", seconds_before_ + run_seconds_}};
    if (!c_.init_from.empty()) {
        training["init_from"] = {{"model", c_.init_from.string()}, {"steps", init_steps_}};
        if (grown_from_layers_ > 0) training["init_from"]["layers"] = grown_from_layers_;
        if (!from_objective_.empty()) training["init_from"]["objective"] = from_objective_;
    }
    if (c_.ema > 0) training["ema"] = c_.ema;
    if (c_.precision != "float32") training["precision"] = c_.precision;
    return training;
}

TrainResult Trainer::write_snapshot() {
    json training = training_record(start_step_);
    training["snapshot_of"] = c_.out.string();
    if (o_.snapshot_raw_weights)  // run() refused it for a run without an average
        training["snapshot_weights"] = "raw: the weights at this step, not their moving average";
    else
        swap_in_averages();
    write_model_files(o_.snapshot, c_, *network_, *data_.tokenizer, start_step_, training);
    say("wrote the model of '" + c_.out.string() + "' at step " + std::to_string(start_step_) + " of " +
        std::to_string(c_.steps) + " to '" + o_.snapshot.string() + "'");
    TrainResult result;
    result.step = result.resumed_from = start_step_;
    return result;
}

void Trainer::update_averages() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < averages_.size(); ++i) averages_[i].lerp_(parameters_[i].second, 1.0 - c_.ema);
}

// Exchanges the network's weights and their moving averages (twice restores them): dev losses and the written
// model are the average's.
void Trainer::swap_in_averages() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < averages_.size(); ++i) {
        const at::Tensor held = parameters_[i].second.clone();
        parameters_[i].second.copy_(averages_[i]);
        averages_[i].copy_(held);
    }
}

double Trainer::dev_loss() {
    swap_in_averages();
    struct Restore {
        Trainer& t;
        ~Restore() { t.swap_in_averages(); }
    } restore{*this};
    at::NoGradGuard no_grad;
    network_->eval();
    auto* classifier = dynamic_cast<nn::TextClassifierNet*>(network_.get());
    const bool attribute = classifier != nullptr && !classifier->classes().empty();
    double sum = 0.0;
    int64_t rows_done = 0, correct = 0;
    const auto n = static_cast<int64_t>(data_.dev.examples.size());
    for (int64_t start = 0, index = 0; start < n; start += c_.batch_size, ++index) {
        std::vector<int64_t> rows;
        for (int64_t i = start; i < std::min(n, start + c_.batch_size); ++i) rows.push_back(i);
        const nn::TrainingBatch batch = make_batch(c_, data_.dev.examples, rows, data_.tokenizer->pad_id());
        // The same noise at every evaluation, so dev losses are comparable across steps.
        at::Generator gen =
            at::make_generator<at::CPUGeneratorImpl>(derived_seed(c_.seed, Stream::dev, static_cast<uint64_t>(index)));
        sum += network_->loss(batch, gen).item<double>() * static_cast<double>(rows.size());
        rows_done += static_cast<int64_t>(rows.size());
        if (attribute) {
            at::Generator same = at::make_generator<at::CPUGeneratorImpl>(
                derived_seed(c_.seed, Stream::dev, static_cast<uint64_t>(index)));
            correct += classifier->predict_classes(batch.tokens, same).eq(batch.classes).sum().item<int64_t>();
        }
    }
    network_->train();
    if (attribute) last_dev_accuracy_ = static_cast<double>(correct) / static_cast<double>(rows_done);
    return sum / static_cast<double>(rows_done);
}

void Trainer::log_step(int64_t step, double loss, std::optional<double> dev, double lr) {
    const double rate = run_seconds_ > 0 ? static_cast<double>(step - start_step_) / run_seconds_ : 0.0;
    char dev_text[32] = "";
    if (dev) std::snprintf(dev_text, sizeof dev_text, "  dev %.4f", *dev);
    if (dev && last_dev_accuracy_)
        std::snprintf(dev_text + std::strlen(dev_text), sizeof dev_text - std::strlen(dev_text), " (accuracy %.3f)",
                      *last_dev_accuracy_);
    char line[256];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f%s  lr %.2e  %.2f steps/s  ETA %s",
                  static_cast<long long>(step), static_cast<long long>(c_.steps), loss, dev_text, lr, rate,
                  rate > 0 ? duration_text(static_cast<double>(c_.steps - step) / rate).c_str() : "?");
    say(line);
    json entry = {{"step", step},
                  {"loss", loss},
                  {"dev_loss", dev ? json(*dev) : json(nullptr)},
                  {"dev_accuracy", dev && last_dev_accuracy_ ? json(*last_dev_accuracy_) : json(nullptr)},
                  {"lr", lr},
                  {"seconds", seconds_before_ + run_seconds_}};
    entry.update(network_->training_log());
    std::ofstream log(c_.out / "train_log.jsonl", std::ios::app);
    log << entry.dump() << "\n";
    if (!log) throw ModelError("cannot append to '" + (c_.out / "train_log.jsonl").string() + "'");
}

TrainResult Trainer::run() {
    // At most training.threads, fewer while other processes keep cores busy: two threads spinning against another
    // process make a step 14 times slower (docs/design.md, "Compute threads").
    ComputeShare share(static_cast<int>(c_.threads));
    if (o_.snapshot_raw_weights && (o_.snapshot.empty() || c_.ema <= 0))
        throw ConfigError(c_.source, {{"/training/ema",
                                       "raw weights are for a snapshot (--snapshot) of a run that keeps a "
                                       "moving average (training.ema); its model holds the weights themselves"}});
    prepare_out_dir();
    const std::optional<json> checkpoint = find_checkpoint(c_, o_.overwrite);
    data_ = load_training_data(c_, [&](const std::string& line) { say(line); });
    build_network();
    // A resumed run's weights come from its checkpoint; init_from is still read for its kind and step count.
    if (!c_.init_from.empty()) start_from_model(/*load_weights=*/!checkpoint);
    averages_.clear();
    if (c_.ema > 0)  // the average starts at the initial weights; a checkpoint holds where it stood
        for (const auto& [name, p] : parameters_) averages_.push_back(p.detach().clone());
    if (!o_.snapshot.empty() && !checkpoint)
        throw ModelError("no checkpoint in '" + checkpoint_dir(c_).string() + "' to write a snapshot from");
    if (checkpoint) {
        const Progress resumed = resume_checkpoint(c_, *checkpoint, state(), data_.fingerprint);
        start_step_ = resumed.step;
        seconds_before_ = resumed.seconds;
        if (!o_.snapshot.empty()) return write_snapshot();
        say("resuming from the checkpoint at step " + std::to_string(start_step_) + " in '" +
            checkpoint_dir(c_).string() + "'");
    }
    start_train_log(c_, checkpoint ? std::optional<int64_t>(start_step_) : std::nullopt);

    TrainResult result;
    result.resumed_from = start_step_;
    result.texts = static_cast<int64_t>(data_.train.examples.size());
    result.dropped_too_long = data_.train.dropped_too_long + data_.train.dropped_condition;
    result.vocab_size = data_.tokenizer->vocab_size();
    for (const auto& [name, p] : parameters_) result.parameters += p.numel();
    {
        std::ostringstream line;
        const char* unit = is_syntax_kind(c_.kind) ? " sentences" : " texts";
        line << "training " << c_.kind << ": " << result.texts << unit;
        if (data_.train.dropped_too_long)
            line << ", " << data_.train.dropped_too_long << " dropped (longer than max_length " << c_.max_length << ")";
        if (data_.train.dropped_condition)
            line << ", " << data_.train.dropped_condition
                 << " dropped (meaning representation longer than max_condition_length " << c_.max_condition_length
                 << ")";
        if (data_.train.dropped_empty) line << ", " << data_.train.dropped_empty << " empty";
        line << "; vocabulary " << result.vocab_size << "; " << result.parameters << " parameters; " << share.threads()
             << " compute thread" << (share.threads() == 1 ? "" : "s") << " (at most " << c_.threads << ")";
        if (is_syntax_kind(c_.kind) || is_controller_kind(c_.kind)) {
            const json& net = network_->config();
            if (c_.kind == "attribute_classifier")
                line << "; classes " << net.at("classes").dump() << ", " << data_.train.dropped_unlabelled
                     << " texts with no class dropped" << (net.value("noise", true) ? "" : "; clean text (no noise)");
            else if (is_controller_kind(c_.kind))
                line << "; " << net.at("tags").size() << " tags, " << net.at("labels").size() << " span labels";
            else if (c_.kind == "tagger")
                line << "; " << net.at("tags").size() << " PTB tags, " << net.at("upos").size() << " universal tags";
            else
                line << "; " << net.at("labels").size() << " span labels (unary chains joined with '+')";
        }
        if (!data_.dev.examples.empty())
            line << "; dev loss on " << data_.dev.examples.size() << unit << " every " << c_.dev_every << " steps";
        if (data_.dev.unknown_labels)
            line << " (" << data_.dev.unknown_labels << " dev " << (c_.kind == "tagger" ? "tags" : "constituents")
                 << " with labels the training data lacks are not scored)";
        say(line.str());
    }

    EpochOrder order(static_cast<int64_t>(data_.train.examples.size()), c_.seed);
    double loss_sum = 0.0;
    int64_t loss_count = 0;
    const auto started = std::chrono::steady_clock::now();
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(c_.seed);
    for (int64_t step = start_step_ + 1; step <= c_.steps; ++step) {
        const nn::TrainingBatch batch =
            make_batch(c_, data_.train.examples, order.rows(step, c_.batch_size), data_.tokenizer->pad_id(),
                       derived_seed(c_.seed, Stream::condition_fields, static_cast<uint64_t>(step)));
        gen.set_current_seed(derived_seed(c_.seed, Stream::step, static_cast<uint64_t>(step)));
        const double lr = learning_rate(c_, step);
        for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
        optimizer_->zero_grad();
        at::Tensor loss;
        {
            const Autocast autocast(c_.precision == "bfloat16");
            loss = network_->loss(batch, gen);
        }
        const double loss_value = loss.item<double>();
        if (!std::isfinite(loss_value))
            throw std::runtime_error("the training loss is " + std::to_string(loss_value) + " at step " +
                                     std::to_string(step) + " (try a lower training.lr or a training.grad_clip)");
        loss.backward();
        if (c_.grad_clip > 0) clip_gradients(network_->parameters(), c_.grad_clip);
        optimizer_->step();
        update_averages();
        loss_sum += loss_value;
        ++loss_count;
        run_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

        if (step % c_.log_every == 0) {
            const int before = share.threads();
            if (share.refresh() != before)
                say("compute threads: " + std::to_string(share.threads()) + " from step " + std::to_string(step + 1) +
                    (share.threads() < before ? " (other processes keep cores busy)" : ""));
        }
        std::optional<double> dev;
        if (!data_.dev.examples.empty() && (step % c_.dev_every == 0 || step == c_.steps)) last_dev_ = dev = dev_loss();
        if (step % c_.log_every == 0 || step == c_.steps || step == o_.stop_after) {
            result.last_loss = loss_sum / static_cast<double>(loss_count);
            log_step(step, result.last_loss, dev, lr);
            loss_sum = 0.0;
            loss_count = 0;
        }
        result.step = step;
        const bool stopping = step == o_.stop_after && step < c_.steps;
        if (stopping || (c_.checkpoint_every > 0 && step % c_.checkpoint_every == 0 && step < c_.steps))
            write_checkpoint(c_, state(), {step, seconds_before_ + run_seconds_},
                             static_cast<int64_t>(data_.train.examples.size()), data_.fingerprint, *data_.tokenizer);
        if (stopping) {
            say("stopped after step " + std::to_string(step) + " as asked; the checkpoint in '" +
                checkpoint_dir(c_).string() + "' resumes it");
            break;
        }
    }
    if (loss_count > 0) result.last_loss = loss_sum / static_cast<double>(loss_count);
    result.step = std::max(result.step, start_step_);
    result.dev_loss = last_dev_;
    result.seconds = run_seconds_;
    result.steps_per_second = run_seconds_ > 0 ? static_cast<double>(result.step - start_step_) / run_seconds_ : 0.0;
    if (result.step < c_.steps) return result;

    json training = training_record(result.step);
    training["texts"] = result.texts;
    training["final_loss"] = result.last_loss;
    training["dev_loss"] = result.dev_loss ? json(*result.dev_loss) : json(nullptr);
    if (last_dev_accuracy_) training["dev_accuracy"] = *last_dev_accuracy_;
    swap_in_averages();  // the model is the average
    write_model(c_, *network_, *data_.tokenizer, result.step, training);
    result.finished = true;
    std::error_code ec;
    say("wrote model '" + c_.out.string() + "' (" +
        std::to_string(fs::file_size(c_.out / "model.safetensors", ec) / 1024) + " KB of weights) after " +
        duration_text(seconds_before_ + run_seconds_) + " of training");
    return result;
}

}  // namespace

int64_t write_training_texts(const TrainConfig& config, const fs::path& file) {
    int64_t count = 0;
    write_atomically(file, prompted_texts_jsonl(config, count));
    return count;
}

TrainResult train(const TrainConfig& config, const TrainOptions& options) {
    Trainer trainer(config, options);
    return trainer.run();
}

}  // namespace rudder::train
