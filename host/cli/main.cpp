// rudder: the command-line front end (docs/cli.md). Most commands run in this program; serve, train,
// train-controller and eval run in helper programs beside it (<prefix>/<libexecdir>/rudder/rudder-<program>), to
// which this one hands its process with the same arguments. So `make demo` builds only what the demo runs, and a
// deployment can take the server alone.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string_view>

#include <rudder/base/paths.hpp>

#include "commands.hpp"

namespace {

struct HelperCommand {
    const char* command;
    const char* program;  // rudder-<program>
    const char* summary;
};

constexpr HelperCommand kHelperCommands[] = {
    {"serve", "serve", rudder::cli::kServeSummary},
    {"train", "train", rudder::cli::kTrainSummary},
    {"train-controller", "train", rudder::cli::kTrainControllerSummary},
    {"eval", "eval", rudder::cli::kEvalSummary},
};

// The helper command given, if any: the first argument that is not a global option (-v, --verbose) names the command.
const HelperCommand* helper_command(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "-v" || arg == "--verbose") continue;
        for (const HelperCommand& helper : kHelperCommands)
            if (arg == helper.command) return &helper;
        return nullptr;
    }
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    namespace cli = rudder::cli;
    if (const HelperCommand* helper = helper_command(argc, argv)) {
        // The helper parses the same arguments (its help names the command as this program does).
        const std::string program = rudder::helper_program_file(helper->program).string();
        ::execv(program.c_str(), argv);
        const int error = errno;
        std::cerr << "rudder: cannot run '" << helper->command << "': " << program << ": " << std::strerror(error)
                  << (error == ENOENT ? " (not built: `make demo` builds only what the demo runs; `make` or `cmake "
                                        "--build BUILD` builds the rest)"
                                      : "")
                  << "\n";
        return cli::kExitFailure;
    }
    return cli::run_command_line(argc, argv, [](CLI::App& app, cli::Commands& commands) {
        cli::add_recipe_commands(app, commands);
        cli::add_listing_commands(app, commands);
        cli::add_model_commands(app, commands);
        cli::add_score_command(app, commands);
        cli::add_bench_command(app, commands);
        cli::add_syntax_commands(app, commands);
        cli::add_likelihood_command(app, commands);
        // Listed by --help; given, they never get here (the helper runs them above).
        for (const HelperCommand& helper : kHelperCommands)
            app.add_subcommand(helper.command, helper.summary)->allow_extras();
    });
}
