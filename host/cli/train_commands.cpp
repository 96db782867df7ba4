// `rudder train` and `rudder train-controller`: the same arguments, each refusing the other's kinds.
#include <cstdio>
#include <iostream>

#include <rudder/train/trainer.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

// `rudder train` trains the model networks, `rudder train-controller` a controller's noisy classifier.
int cmd_train(const std::string& config_path, int64_t stop_after, bool overwrite, const std::string& snapshot,
              bool raw_weights, const std::string& texts_out, bool quiet, bool controller) {
    train::TrainConfig config;
    try {
        config = train::load_train_config(config_path);
    } catch (const ConfigError& e) {
        std::cerr << e.what() << "\n";
        return kExitInvalid;
    }
    if (train::is_controller_kind(config.kind) != controller) {
        std::cerr << config_path << ": /kind: a " << config.kind << " is trained with `rudder "
                  << (controller ? "train" : "train-controller") << "`\n";
        return kExitInvalid;
    }
    if (!texts_out.empty()) {
        const int64_t count = train::write_training_texts(config, texts_out);
        if (!quiet)
            std::fprintf(stderr, "wrote %lld training texts to %s\n", static_cast<long long>(count), texts_out.c_str());
        return kExitOk;
    }
    train::TrainOptions options;
    options.progress = quiet ? nullptr : &std::cerr;
    options.stop_after = stop_after;
    options.overwrite = overwrite;
    options.snapshot = snapshot;
    options.snapshot_raw_weights = raw_weights;
    try {
        const auto result = train::train(config, options);
        if (!quiet && result.step > result.resumed_from)
            std::fprintf(stderr, "%lld steps in %.1f s (%.2f steps/s)\n",
                         static_cast<long long>(result.step - result.resumed_from), result.seconds,
                         result.steps_per_second);
    } catch (const ConfigError& e) {  // the network's config, checked once the vocabulary is known
        std::cerr << e.what() << "\n";
        return kExitInvalid;
    }
    return kExitOk;
}

}  // namespace

void add_train_commands(CLI::App& app, Commands& commands) {
    struct Options {
        std::string config, snapshot, texts_out;
        int64_t stop_after = 0;
        bool overwrite = false, raw_weights = false, quiet = false;
    };
    auto o = std::make_shared<Options>();
    auto training_command = [&](const char* name, const char* description, bool controller) {
        auto* cmd = app.add_subcommand(name, description);
        cmd->add_option("config", o->config, "Training config (JSON, see docs/training.md)")
            ->required()
            ->check(CLI::ExistingFile);
        auto* stop = cmd->add_option("--stop-after", o->stop_after,
                                     "Stop after this step with a checkpoint, as an interrupted run")
                         ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
        auto* overwrite =
            cmd->add_flag("--overwrite", o->overwrite, "Train again into an out directory that holds a finished model");
        auto* snapshot =
            cmd->add_option("--snapshot", o->snapshot,
                            "Train nothing: write the model of the run's checkpoint to this folder, as the "
                            "run would if it ended there (the run may be going on)")
                ->excludes(stop)
                ->excludes(overwrite);
        cmd->add_flag("--raw-weights", o->raw_weights,
                      "With --snapshot, for a run with training.ema: the weights themselves, not their moving average")
            ->needs(snapshot);
        if (!controller)
            cmd->add_option("--texts-out", o->texts_out,
                            "Train nothing: write the training texts of an mdlm config (JSON Lines of prompt and "
                            "answer), which its BPE tokenizer is trained on")
                ->excludes(stop)
                ->excludes(overwrite)
                ->excludes(snapshot);
        cmd->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
        commands.list.push_back({cmd, [o, controller] {
                                     return cmd_train(o->config, o->stop_after, o->overwrite, o->snapshot,
                                                      o->raw_weights, o->texts_out, o->quiet, controller);
                                 }});
    };
    training_command("train", kTrainSummary, false);
    training_command("train-controller", kTrainControllerSummary, true);
}

}  // namespace rudder::cli
