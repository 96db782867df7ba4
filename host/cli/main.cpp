// rudder — the command-line front end. See docs/cli.md; each subcommand lives in its own file (commands.hpp).
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/rudder_plugin.h>
#include <rudder/nn/config_error.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/recipe.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
    namespace cli = rudder::cli;
    CLI::App app{"rudder: controllable text generation with diffusion language models"};
    app.set_version_flag("--version", std::string("rudder ") + RUDDER_VERSION + " (plugin ABI " +
                                          std::to_string(RUDDER_ABI_MAJOR) + "." + std::to_string(RUDDER_ABI_MINOR) +
                                          ")");
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Log debug messages (plugin loading, model files)");
    cli::Commands commands;
    cli::add_recipe_commands(app, commands);
    cli::add_listing_commands(app, commands);
    cli::add_model_commands(app, commands);
    cli::add_train_commands(app, commands);
    cli::add_score_command(app, commands);
    cli::add_bench_command(app, commands);
    cli::add_eval_command(app, commands);
    cli::add_syntax_commands(app, commands);
    cli::add_serve_command(app, commands);
    cli::add_likelihood_command(app, commands);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? cli::kExitOk : cli::kExitInvalid;
    }
    // stdout carries the JSON Lines; every log message goes to stderr.
    spdlog::set_default_logger(spdlog::stderr_color_mt("rudder"));
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
    rudder::keep_freed_memory_in_process();

    rudder::set_compute_threads(commands.threads);
    for (const auto& command : commands.list) {
        if (!command.app->parsed()) continue;
        try {
            const int code = command.run();
            // What went to stdout through std::cout must have arrived (a full disk, a closed pipe are failures).
            std::cout.flush();
            if (!std::cout || std::fflush(stdout) != 0)
                throw std::runtime_error(std::string("cannot write to standard output: ") + std::strerror(errno));
            return code;
        } catch (const rudder::RecipeError& e) {  // a recipe a command built or read for itself
            cli::print_recipe_error("rudder " + command.app->get_name(), e);
            return cli::kExitInvalid;
        } catch (const rudder::ConfigError& e) {  // a bad eval suite
            std::cerr << e.what() << "\n";
            return cli::kExitInvalid;
        } catch (const rudder::Cancelled& e) {
            std::cerr << "rudder: " << e.what() << "\n";
            return cli::kExitFailure;
        } catch (const std::exception& e) {
            std::cerr << "\nrudder: error: " << e.what() << "\n";
            return cli::kExitFailure;
        }
    }
    return cli::kExitFailure;
}
