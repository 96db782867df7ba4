// `rudder score`: fluency (teacher perplexity), variety and copies of a file of texts.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <rudder/base/output_file.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/nn/teacher_model.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/text/metrics.hpp>
#include <rudder/text/text_files.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

int cmd_score(const std::string& file, const std::string& teacher_name, const std::string& against, bool as_json,
              int64_t batch_size) {
    fs::path dir;
    try {
        dir = resolve_model(teacher_name, fs::current_path(), default_model_path());
    } catch (const ModelError& e) {
        throw ModelError(std::string(e.what()) +
                         "\n(train a teacher with `rudder train examples/train/teacher.json`, or pass --teacher DIR)");
    }
    const TeacherModel teacher = load_teacher(dir);
    const std::vector<std::string> texts = read_texts(file);
    ComputeShare share;
    const auto report = score_texts(teacher, texts, batch_size);
    const DiversityReport diversity = text_diversity(texts);
    std::optional<OverlapReport> overlap;
    if (!against.empty()) overlap = text_overlap(texts, read_texts(against));
    if (as_json) {
        json out = {{"perplexity", report.perplexity()},
                    {"mean_nll", report.mean_nll()},
                    {"texts", report.texts},
                    {"tokens", report.tokens},
                    {"unknown_tokens", report.unknown_tokens},
                    {"skipped_too_long", report.skipped_too_long},
                    {"mean_words", diversity.mean_words},
                    {"distinct_1", diversity.distinct[0]},
                    {"distinct_2", diversity.distinct[1]},
                    {"distinct_3", diversity.distinct[2]},
                    {"teacher", dir.string()}};
        if (overlap) {
            out["distinct_texts"] = overlap->distinct;
            out["copies"] = overlap->copies;
            out["copy_share"] = overlap->copy_share();
            out["against"] = against;
        }
        std::cout << out.dump() << "\n";
        return kExitOk;
    }
    std::fprintf(results_stream(),
                 "perplexity %.3f over %lld texts (%lld tokens including one end token per text; mean NLL %.4f nats)\n",
                 report.perplexity(), static_cast<long long>(report.texts), static_cast<long long>(report.tokens),
                 report.mean_nll());
    std::fprintf(results_stream(), "unknown words scored as <unk>: %lld\n",
                 static_cast<long long>(report.unknown_tokens));
    if (report.skipped_too_long)
        std::fprintf(results_stream(), "not scored: %lld texts longer than the teacher's max_length\n",
                     static_cast<long long>(report.skipped_too_long));
    std::fprintf(results_stream(), "teacher: %s\n", dir.string().c_str());
    std::fprintf(
        results_stream(),
        "mean words per text %.2f; distinct-1 %.4f, distinct-2 %.4f, distinct-3 %.4f (different n-grams over all "
        "n-grams of the %lld texts)\n",
        diversity.mean_words, diversity.distinct[0], diversity.distinct[1], diversity.distinct[2],
        static_cast<long long>(diversity.texts));
    if (overlap) {
        std::fprintf(results_stream(), "distinct texts: %lld of %lld\n", static_cast<long long>(overlap->distinct),
                     static_cast<long long>(overlap->texts));
        std::fprintf(results_stream(), "verbatim copies of a text in %s: %lld of %lld (%.1f%%)\n", against.c_str(),
                     static_cast<long long>(overlap->copies), static_cast<long long>(overlap->texts),
                     100.0 * overlap->copy_share());
    }
    return kExitOk;
}

}  // namespace

void add_score_command(CLI::App& app, Commands& commands) {
    struct Options {
        std::string file, teacher = "e2e-teacher", against;
        int64_t batch_size = 64;
        bool as_json = false;
    };
    auto o = std::make_shared<Options>();
    auto* score = app.add_subcommand("score", "Perplexity of texts under a teacher language model");
    score
        ->add_option(
            "file", o->file,
            "JSON Lines with a \"text\" field (rudder generate's output), E2E CSV (its refs), or one text per line")
        ->required()
        ->check(CLI::ExistingFile);
    score->add_option("--teacher", o->teacher, "Teacher model: a bundled name or a directory (default e2e-teacher)");
    score->add_option("--batch-size", o->batch_size, "Texts scored together")->check(CLI::Range(1, 4096));
    score
        ->add_option("--against", o->against,
                     "Also count texts that copy a text of this file verbatim (E2E CSV, JSON Lines or lines)")
        ->check(CLI::ExistingFile);
    score->add_flag("--json", o->as_json, "Machine-readable output");
    commands.add_threads_option(score);
    commands.list.push_back(
        {score, [o] { return cmd_score(o->file, o->teacher, o->against, o->as_json, o->batch_size); }});
}

}  // namespace rudder::cli
