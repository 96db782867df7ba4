// The command line's main() (commands.hpp: run_command_line), shared by rudder and the helper programs that run some
// of its commands (main.cpp), and what every command uses: standard output kept for results, the plugin registry,
// recipe errors.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <ext/stdio_sync_filebuf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <rudder/base/output_file.hpp>
#include <rudder/plugins/plugins.hpp>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/rudder_plugin.h>
#include <rudder/nn/config_error.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/recipe.hpp>

#include "commands.hpp"

namespace rudder::cli {

namespace {
int g_results_fd = -1;  // the duplicate of standard output that results go to, once separated
}  // namespace

void separate_results_from_plugin_output() {
    // Results go to a duplicate of standard output; descriptor 1 then points at standard error, so that whatever a
    // plugin in this process prints (printf, std::cout in its library) can never pass for a result line.
    const int results = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (results < 0) return;  // no standard output to keep apart
    std::FILE* stream = ::fdopen(results, "w");
    if (stream == nullptr || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        if (stream != nullptr)
            std::fclose(stream);
        else
            ::close(results);
        return;
    }
    g_results_fd = results;
    set_results_stream(stream);
    static __gnu_cxx::stdio_sync_filebuf<char> buffer(stream);  // std::cout writes where the results go
    std::cout.rdbuf(&buffer);
}

void restore_standard_output() {
    if (g_results_fd < 0) return;
    std::cout.flush();
    std::fflush(results_stream());
    ::dup2(g_results_fd, STDOUT_FILENO);
}

plugins::Registry plugin_registry() { return plugins::Registry(plugins::Registry::default_search_path()); }

void print_recipe_error(const std::string& file, const RecipeError& e) {
    std::cerr << file << ": invalid recipe (" << e.issues().size()
              << (e.issues().size() == 1 ? " problem" : " problems") << ")\n";
    for (const auto& issue : e.issues())
        std::cerr << "  " << (issue.pointer.empty() ? "(recipe)" : issue.pointer) << ": " << issue.message << "\n";
}

int run_command_line(int argc, char** argv, const CommandSet& add_commands) {
    CLI::App app{"rudder: controllable text generation with diffusion language models"};
    app.set_version_flag("--version", std::string("rudder ") + RUDDER_VERSION + " (plugin ABI " +
                                          std::to_string(RUDDER_ABI_MAJOR) + "." + std::to_string(RUDDER_ABI_MINOR) +
                                          ")");
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Log debug messages (plugin loading, model files)");
    Commands commands;
    add_commands(app, commands);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? kExitOk : kExitInvalid;
    }
    // stdout carries the JSON Lines (through the duplicate set apart here); every log message goes to stderr.
    separate_results_from_plugin_output();
    spdlog::set_default_logger(spdlog::stderr_color_mt("rudder"));
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
    keep_freed_memory_in_process();

    set_compute_threads(commands.threads);
    for (const auto& command : commands.list) {
        if (!command.app->parsed()) continue;
        try {
            const int code = command.run();
            // What went to stdout through std::cout must have arrived (a full disk, a closed pipe are failures).
            std::cout.flush();
            if (!std::cout || std::fflush(results_stream()) != 0)
                throw std::runtime_error(std::string("cannot write to standard output: ") + std::strerror(errno));
            return code;
        } catch (const RecipeError& e) {  // a recipe a command built or read for itself
            print_recipe_error("rudder " + command.app->get_name(), e);
            return kExitInvalid;
        } catch (const ConfigError& e) {  // a bad eval suite
            std::cerr << e.what() << "\n";
            return kExitInvalid;
        } catch (const Cancelled& e) {
            std::cerr << "rudder: " << e.what() << "\n";
            return kExitFailure;
        } catch (const std::exception& e) {
            std::cerr << "\nrudder: error: " << e.what() << "\n";
            return kExitFailure;
        }
    }
    return kExitFailure;
}

}  // namespace rudder::cli
