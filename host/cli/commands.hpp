// The subcommands of `rudder` (docs/cli.md). Each command file defines its options, adds its subcommand to the
// app and says how to run it; run_command_line() parses the command line and runs the one given. rudder (main.cpp)
// has most commands in its own program; serve, train, train-controller and eval run in helper programs beside it
// (serve_main.cpp, train_main.cpp, eval_main.cpp), to which rudder hands its process.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include <rudder/runtime/recipe.hpp>

namespace rudder::plugins {
class Registry;
}

namespace rudder::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitInvalid = 2;        // the input (recipe, config, suite) is invalid
constexpr int kExitInterrupted = 130;  // Ctrl-C or SIGTERM stopped the run (128 + SIGINT, as shells report it)
// 70 (rudder::plugins::kPluginExitStatus): a plugin in the process called exit() during one of its calls.

struct Command {
    CLI::App* app = nullptr;   // parsed() says whether it was given
    std::function<int()> run;  // returns the exit code; errors other than invalid input are thrown
};

struct Commands {
    std::vector<Command> list;
    // --threads N of the command given: the most compute threads it uses (rudder/nn/compute_threads.hpp); main()
    // sets it before the command runs. 0, the default: every core, fewer while other processes keep cores busy.
    int threads = 0;
    void add_threads_option(CLI::App* command) {
        command
            ->add_option("--threads", threads,
                         "Most compute threads (default: every core, fewer while other processes keep cores busy)")
            ->check(CLI::Range(1, 256));
    }
};

// Standard output as results see it (main.cpp): separate_results_from_plugin_output() moves the command's results to
// a duplicate of descriptor 1 (rudder::results_stream(), std::cout) and points descriptor 1 at standard error, for
// every command; restore_standard_output() puts descriptor 1 back, for a command that hands its process over (exec).
// Commands print results through std::cout or results_stream(), never printf.
void separate_results_from_plugin_output();
void restore_standard_output();

// The commands a program of the command line adds: rudder's own (main.cpp) or a helper program's.
using CommandSet = std::function<void(CLI::App& app, Commands& commands)>;
// The command line's main(): parses argv, runs the command given and returns the exit code (cli_main.cpp).
int run_command_line(int argc, char** argv, const CommandSet& add_commands);

// The helper programs' commands as `rudder --help` lists them (and their own programs describe them).
inline constexpr const char* kServeSummary = "Serve controlled generation over HTTP (docs/serving.md)";
inline constexpr const char* kTrainSummary =
    "Train a network (teacher LM, denoiser, MDLM checkpoint, tagger or parser) from a training config";
inline constexpr const char* kTrainControllerSummary =
    "Train a controller's noisy classifier (syntax_classifier) on annotated text, noised as a denoiser does";
inline constexpr const char* kEvalSummary =
    "Run a suite of control tasks over held-out targets: success, teacher perplexity, s/sample";

// The plugins every command finds: $RUDDER_PLUGIN_PATH, then this installation's (Registry::default_search_path).
plugins::Registry plugin_registry();  // (cli_main.cpp)

// "<file>: invalid recipe (N problems)" and one line per problem with its JSON pointer, on stderr (cli_main.cpp).
void print_recipe_error(const std::string& file, const RecipeError& e);

void add_recipe_commands(CLI::App& app, Commands& commands);     // generate, validate  (recipe_commands.cpp)
void add_listing_commands(CLI::App& app, Commands& commands);    // plugins, models     (listing_commands.cpp)
void add_model_commands(CLI::App& app, Commands& commands);      // corpus-model, convert-weights (model_commands.cpp)
void add_train_commands(CLI::App& app, Commands& commands);      // train, train-controller (train_commands.cpp)
void add_score_command(CLI::App& app, Commands& commands);       // score (score_command.cpp)
void add_bench_command(CLI::App& app, Commands& commands);       // bench (bench_command.cpp)
void add_eval_command(CLI::App& app, Commands& commands);        // eval (eval_command.cpp)
void add_syntax_commands(CLI::App& app, Commands& commands);     // annotate, eval-annotator (syntax_commands.cpp)
void add_serve_command(CLI::App& app, Commands& commands);       // serve (serve_command.cpp)
void add_likelihood_command(CLI::App& app, Commands& commands);  // likelihood (likelihood_command.cpp)

}  // namespace rudder::cli
