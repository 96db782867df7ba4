// `rudder likelihood MODEL FILE`: a model's own bound on the negative log-likelihood of texts (its negative ELBO:
// MDLM's for absorbing noise, SEDD's for uniform noise, the Gaussian chain's variational bound for the continuous
// family; rudder/runtime/likelihood.hpp), per token and as a perplexity bound.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <rudder/base/output_file.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/runtime/likelihood.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/text/text_files.hpp>

#include "commands.hpp"
#include "progress_line.hpp"

namespace rudder::cli {
namespace {

using json = nlohmann::json;

struct Options {
    std::string model, file, family;
    LikelihoodOptions likelihood;
    int64_t max_texts = 0;
    bool as_json = false, quiet = false;
};

int cmd_likelihood(const Options& o) {
    std::optional<Family> family;
    if (!o.family.empty()) family = o.family == "continuous" ? Family::continuous : Family::discrete;
    const Model model =
        load_model(resolve_model(o.model, std::filesystem::current_path(), default_model_path()), family);
    std::vector<std::string> texts = read_texts(o.file);
    if (o.max_texts > 0 && static_cast<int64_t>(texts.size()) > o.max_texts)
        texts.resize(static_cast<size_t>(o.max_texts));
    ComputeShare share;
    ProgressLine progress(o.quiet);
    const LikelihoodReport r = nelbo(model, texts, o.likelihood, [&](int64_t done, int64_t total) {
        progress.show(done, total, [&] { return std::to_string(done) + "/" + std::to_string(total) + " texts"; });
    });
    progress.finish();
    if (o.as_json) {
        std::cout << json({{"model", model.name},
                           {"bound", nelbo_kind(model)},
                           {"nats_per_token", r.nats_per_token()},
                           {"standard_error", r.standard_error_per_token()},
                           {"perplexity_bound", r.perplexity_bound()},
                           {"nats_per_text", r.nats_per_text()},
                           {"texts", r.texts},
                           {"tokens", r.tokens},
                           {"length", r.length},
                           {"draws", r.draws},
                           {"unknown_tokens", r.unknown_tokens},
                           {"skipped_too_long", r.skipped_too_long}})
                         .dump()
                  << "\n";
        return kExitOk;
    }
    const std::string kind = nelbo_kind(model);
    std::fprintf(results_stream(), "bound: %s\n",
                 kind == "sedd_uniform" ? "SEDD's (uniform noise: diffusion-weighted score entropy + prior)"
                 : kind == "ddpm_vlb"   ? "the Gaussian chain's variational bound (decoding + T steps + prior)"
                                        : "MDLM's (absorbing noise)");
    std::fprintf(results_stream(), "negative ELBO %.4f nats per token (standard error %.4f): perplexity at most %.3f\n",
                 r.nats_per_token(), r.standard_error_per_token(), r.perplexity_bound());
    std::fprintf(results_stream(),
                 "%lld texts, %lld tokens including one end token per text, %lld positions each, %lld draws per text\n",
                 static_cast<long long>(r.texts), static_cast<long long>(r.tokens), static_cast<long long>(r.length),
                 static_cast<long long>(r.draws));
    std::fprintf(results_stream(), "unknown words scored as <unk>: %lld\n", static_cast<long long>(r.unknown_tokens));
    if (r.skipped_too_long)
        std::fprintf(results_stream(), "not scored: %lld texts longer than %lld positions\n",
                     static_cast<long long>(r.skipped_too_long), static_cast<long long>(r.length));
    return kExitOk;
}

}  // namespace

void add_likelihood_command(CLI::App& app, Commands& commands) {
    auto o = std::make_shared<Options>();
    auto* cmd =
        app.add_subcommand("likelihood", "A model's bound on the negative log-likelihood of texts (its negative ELBO)");
    cmd->add_option("model", o->model, "Model: a bundled name or a directory")->required();
    cmd->add_option("file", o->file, "E2E CSV (its refs), JSON Lines with a \"text\" field, or one text per line")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--family", o->family, "For a model that offers both: which family's bound (default: its first)")
        ->check(CLI::IsMember({"continuous", "discrete"}));
    cmd->add_option("--draws", o->likelihood.draws,
                    "Monte Carlo draws (noise level and noised text) per text (default 16)")
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--seed", o->likelihood.seed, "Seed of the draws (default 0)");
    cmd->add_option("--batch-size", o->likelihood.batch_size, "Texts per network call (default 64)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--length", o->likelihood.length,
                    "Positions per sequence (default: the network's, else the longest text + 1)")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--max-texts", o->max_texts, "Score at most the first N texts")->check(CLI::Range(1, 1 << 30));
    cmd->add_flag("--json", o->as_json, "Machine-readable output");
    cmd->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
    commands.add_threads_option(cmd);
    commands.list.push_back({cmd, [o] { return cmd_likelihood(*o); }});
}

}  // namespace rudder::cli
