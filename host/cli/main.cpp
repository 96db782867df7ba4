// rudder — the command-line front end. See docs/cli.md.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "bench_command.hpp"
#include "eval_command.hpp"
#include "syntax_commands.hpp"
#include <rudder/runtime/generator.hpp>
#include <rudder/text/metrics.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/nn/teacher_model.hpp>
#include <rudder/train/trainer.hpp>

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitInvalid = 2;

void print_recipe_error(const std::string& file, const rudder::RecipeError& e) {
    std::cerr << file << ": invalid recipe (" << e.issues().size() << (e.issues().size() == 1 ? " problem" : " problems")
              << ")\n";
    for (const auto& issue : e.issues())
        std::cerr << "  " << (issue.pointer.empty() ? "(recipe)" : issue.pointer) << ": " << issue.message << "\n";
}

// Progress on stderr: a line rewritten in place on a terminal, a line per 10% otherwise (logs, CI).
class ProgressPrinter {
public:
    explicit ProgressPrinter(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO) != 0) {}
    bool operator()(const rudder::Progress& p) {
        if (quiet_) return true;
        const auto now = std::chrono::steady_clock::now();
        if (p.step == 1) batch_start_ = now;
        const double secs = std::chrono::duration<double>(now - batch_start_).count();
        const double rate = secs > 0 ? static_cast<double>(p.step) / secs : 0.0;
        const int64_t tenth = std::max<int64_t>(1, p.steps / 10);
        if (!tty_ && p.step % tenth != 0 && p.step != p.steps) return true;
        std::fprintf(stderr, "%s[batch %lld/%lld] step %lld/%lld  t=%.3f  %.1f steps/s%s", tty_ ? "\r" : "",
                     static_cast<long long>(p.batch + 1), static_cast<long long>(p.batches),
                     static_cast<long long>(p.step), static_cast<long long>(p.steps), p.t, rate,
                     tty_ ? "   " : "\n");
        if (tty_ && p.step == p.steps) std::fputc('\n', stderr);
        return true;
    }

private:
    bool quiet_, tty_;
    std::chrono::steady_clock::time_point batch_start_ = std::chrono::steady_clock::now();
};

// One readable line per sample: its text, then each controller's verdict.
std::string sample_text_line(const rudder::SampleResult& s) {
    std::string line = std::to_string(s.index + 1) + ". " + s.text;
    if (s.controls.empty()) return line;
    line += "   [";
    for (size_t i = 0; i < s.controls.size(); ++i) {
        const auto& v = s.controls[i].verdict;
        line += (i ? ", " : "") + s.controls[i].label + ": " +
                (v.satisfied < 0 ? "n/a" : v.satisfied == 1 ? "ok" : "NOT MET");
    }
    return line + "]";
}

int cmd_generate(const std::string& recipe_path, const std::string& out_path, std::optional<int64_t> samples,
                 std::optional<uint64_t> seed, bool quiet, bool as_text) {
    std::vector<rudder::RecipeIssue> issues;
    rudder::Recipe recipe = rudder::load_recipe(recipe_path, {}, &issues);
    if (samples) recipe.samples = *samples;
    if (seed) recipe.seed = *seed;
    rudder::plugins::Registry registry(rudder::plugins::Registry::default_search_path());
    rudder::Generator generator(recipe, registry, rudder::default_model_path(), std::move(issues));

    std::ofstream file;
    if (!out_path.empty()) {
        file.open(out_path);
        if (!file) throw std::runtime_error("cannot write '" + out_path + "'");
    }
    std::ostream& out = out_path.empty() ? std::cout : file;
    if (!quiet)
        std::fprintf(stderr, "model %s (%s), sampler %s, %lld steps, %lld samples, %zu controllers\n",
                     generator.model().name.c_str(), rudder::family_name(generator.model().family),
                     generator.recipe().sampler.name.c_str(), static_cast<long long>(recipe.sampler.steps),
                     static_cast<long long>(recipe.samples), recipe.controllers.size());

    std::map<std::string, std::pair<int64_t, int64_t>> tally;  // label -> (satisfied, judged)
    std::vector<std::string> order;
    const auto start = std::chrono::steady_clock::now();
    ProgressPrinter printer(quiet);
    generator.generate(std::ref(printer), [&](const rudder::SampleResult& s) {
        out << (as_text ? sample_text_line(s) : rudder::sample_json(s).dump()) << "\n" << std::flush;
        for (const auto& c : s.controls) {
            if (!tally.count(c.label)) order.push_back(c.label);
            auto& t = tally[c.label];
            if (c.verdict.satisfied >= 0) {
                t.second += 1;
                t.first += c.verdict.satisfied;
            }
        }
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!quiet) {
        std::fprintf(stderr, "%lld samples in %.2f s (%.2f samples/s)%s%s\n", static_cast<long long>(recipe.samples),
                     secs, static_cast<double>(recipe.samples) / secs, out_path.empty() ? "" : " -> ",
                     out_path.c_str());
        for (const auto& label : order)
            std::fprintf(stderr, "  %s: %lld/%lld satisfied\n", label.c_str(), static_cast<long long>(tally[label].first),
                         static_cast<long long>(tally[label].second));
    }
    return kExitOk;
}

int cmd_validate(const std::string& recipe_path) {
    std::vector<rudder::RecipeIssue> issues;
    rudder::Recipe recipe = rudder::load_recipe(recipe_path, {}, &issues);
    rudder::plugins::Registry registry(rudder::plugins::Registry::default_search_path());
    rudder::Generator generator(recipe, registry, rudder::default_model_path(), std::move(issues));
    std::cout << recipe_path << ": valid (model " << generator.model().name << ", "
              << rudder::family_name(generator.model().family) << ", sampler " << generator.recipe().sampler.name
              << ", " << recipe.controllers.size() << " controller" << (recipe.controllers.size() == 1 ? "" : "s")
              << ")\n";
    return kExitOk;
}

int cmd_plugins(bool as_json) {
    rudder::plugins::Registry registry(rudder::plugins::Registry::default_search_path());
    const auto& found = registry.controllers();
    const auto& rejected = registry.rejections();
    if (as_json) {
        json j = {{"search_path", json::array()}, {"controllers", json::array()}, {"rejected", json::array()}};
        for (const auto& p : registry.search_path()) j["search_path"].push_back(p.string());
        for (const auto& c : found)
            j["controllers"].push_back({{"id", c.id()},
                                        {"version", c.version()},
                                        {"abi", std::to_string(c.abi_major()) + "." + std::to_string(c.abi_minor())},
                                        {"capabilities", rudder::plugins::capability_names(c.capabilities())},
                                        {"description", c.description()},
                                        {"file", c.path.string()},
                                        {"sha256", c.sha256()}});
        for (const auto& r : rejected) j["rejected"].push_back({{"file", r.path.string()}, {"reason", r.reason}});
        std::cout << j.dump(2) << "\n";
        return kExitOk;
    }
    std::cout << "search path:\n";
    for (const auto& p : registry.search_path()) std::cout << "  " << p.string() << "\n";
    if (registry.search_path().empty()) std::cout << "  (empty: set RUDDER_PLUGIN_PATH)\n";
    std::cout << "controllers:\n";
    for (const auto& c : found) {
        std::string caps;
        for (const auto& name : rudder::plugins::capability_names(c.capabilities())) caps += (caps.empty() ? "" : ",") + name;
        std::cout << "  " << c.id() << " " << c.version() << "  abi " << c.abi_major() << "." << c.abi_minor() << "  ["
                  << caps << "]  " << c.description() << "\n      " << c.path.string() << "\n      sha256 " << c.sha256()
                  << "\n";
    }
    if (found.empty()) std::cout << "  (none)\n";
    if (!rejected.empty()) {
        std::cout << "rejected:\n";
        for (const auto& r : rejected) std::cout << "  " << r.path.string() << ": " << r.reason << "\n";
    }
    return kExitOk;
}

int cmd_corpus_model(const std::string& input, const std::string& out_dir, const rudder::CorpusModelOptions& options) {
    const std::vector<std::string> sentences = rudder::read_texts(input);
    rudder::write_corpus_model(sentences, out_dir, options);
    const rudder::Model model = rudder::load_model(out_dir, std::nullopt);
    std::cout << "wrote corpus model " << out_dir << ": "
              << static_cast<rudder::CorpusDenoiser&>(*model.denoiser).corpus_size() << " sentences, vocabulary "
              << model.tokenizer->vocab_size() << "\n";
    return kExitOk;
}

// `rudder train` trains the model networks, `rudder train-controller` a controller's noisy classifier.
int cmd_train(const std::string& config_path, int64_t stop_after, bool overwrite, bool quiet, bool controller) {
    rudder::train::TrainConfig config;
    try {
        config = rudder::train::load_train_config(config_path);
    } catch (const rudder::ConfigError& e) {
        std::cerr << e.what() << "\n";
        return kExitInvalid;
    }
    if (rudder::train::is_controller_kind(config.kind) != controller) {
        std::cerr << config_path << ": /kind: a " << config.kind << " is trained with `rudder "
                  << (controller ? "train" : "train-controller") << "`\n";
        return kExitInvalid;
    }
    rudder::train::TrainOptions options;
    options.progress = quiet ? nullptr : &std::cerr;
    options.stop_after = stop_after;
    options.overwrite = overwrite;
    try {
        const auto result = rudder::train::train(config, options);
        if (!quiet && result.step > result.resumed_from)
            std::fprintf(stderr, "%lld steps in %.1f s (%.2f steps/s)\n",
                         static_cast<long long>(result.step - result.resumed_from), result.seconds,
                         result.steps_per_second);
    } catch (const rudder::ConfigError& e) {  // the network's config, checked once the vocabulary is known
        std::cerr << e.what() << "\n";
        return kExitInvalid;
    }
    return kExitOk;
}

int cmd_score(const std::string& file, const std::string& teacher_name, const std::string& against, bool as_json,
              int64_t batch_size) {
    fs::path dir;
    try {
        dir = rudder::resolve_model(teacher_name, fs::current_path(), rudder::default_model_path());
    } catch (const rudder::ModelError& e) {
        throw rudder::ModelError(std::string(e.what()) +
                                 "\n(train a teacher with `rudder train examples/train/teacher.json`, or pass --teacher DIR)");
    }
    const rudder::TeacherModel teacher = rudder::load_teacher(dir);
    const std::vector<std::string> texts = rudder::read_texts(file);
    const auto report = rudder::score_texts(teacher, texts, batch_size);
    const rudder::DiversityReport diversity = rudder::text_diversity(texts);
    std::optional<rudder::OverlapReport> overlap;
    if (!against.empty()) overlap = rudder::text_overlap(texts, rudder::read_texts(against));
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
    std::printf("perplexity %.3f over %lld texts (%lld tokens including one end token per text; mean NLL %.4f nats)\n",
                report.perplexity(), static_cast<long long>(report.texts), static_cast<long long>(report.tokens),
                report.mean_nll());
    std::printf("unknown words scored as <unk>: %lld\n", static_cast<long long>(report.unknown_tokens));
    if (report.skipped_too_long)
        std::printf("not scored: %lld texts longer than the teacher's max_length\n",
                    static_cast<long long>(report.skipped_too_long));
    std::printf("teacher: %s\n", dir.string().c_str());
    std::printf("mean words per text %.2f; distinct-1 %.4f, distinct-2 %.4f, distinct-3 %.4f (different n-grams over all "
                "n-grams of the %lld texts)\n",
                diversity.mean_words, diversity.distinct[0], diversity.distinct[1], diversity.distinct[2],
                static_cast<long long>(diversity.texts));
    if (overlap) {
        std::printf("distinct texts: %lld of %lld\n", static_cast<long long>(overlap->distinct),
                    static_cast<long long>(overlap->texts));
        std::printf("verbatim copies of a text in %s: %lld of %lld (%.1f%%)\n", against.c_str(),
                    static_cast<long long>(overlap->copies), static_cast<long long>(overlap->texts),
                    100.0 * overlap->copy_share());
    }
    return kExitOk;
}

int cmd_convert_weights(const std::string& model, const std::string& dtype_name) {
    const std::filesystem::path dir = rudder::resolve_model(model, std::filesystem::current_path(), rudder::default_model_path());
    const nlohmann::json config = rudder::read_json_file(dir / "config.json");
    const std::filesystem::path weights = dir / config.value("weights", std::string("model.safetensors"));
    const auto before = std::filesystem::file_size(weights);
    const uint64_t after = rudder::convert_floating_tensors(weights, dtype_name);
    std::cout << weights.string() << ": floating-point tensors stored as " << dtype_name << ", " << before / 1024 << " KB -> "
              << after / 1024 << " KB\n";
    return kExitOk;
}

int cmd_models() {
    const auto path = rudder::default_model_path();
    std::cout << "search path:\n";
    for (const auto& p : path) std::cout << "  " << p.string() << "\n";
    std::cout << "models:\n";
    for (const auto& name : rudder::list_models(path)) std::cout << "  " << name << "\n";
    return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"rudder: controllable text generation with diffusion language models"};
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Log debug messages (plugin loading, model files)");

    std::string recipe_path, out_path;
    std::optional<int64_t> samples;
    std::optional<uint64_t> seed;
    bool quiet = false, as_json = false;

    auto* generate = app.add_subcommand("generate", "Generate samples from a recipe as JSON Lines");
    generate->add_option("recipe", recipe_path, "Recipe file (JSON)")->required()->check(CLI::ExistingFile);
    generate->add_option("-o,--out", out_path, "Write JSON Lines here instead of stdout");
    generate->add_option("-n,--samples", samples, "Override the recipe's sample count")->check(CLI::Range(1, 1000000));
    generate->add_option("-s,--seed", seed, "Override the recipe's seed");
    generate->add_flag("-q,--quiet", quiet, "No progress on stderr");
    std::string format = "jsonl";
    generate->add_option("-f,--format", format, "jsonl (default) or text: one readable line per sample")
        ->check(CLI::IsMember({"jsonl", "text"}));

    auto* validate = app.add_subcommand("validate", "Check a recipe, its model and its controllers' params");
    validate->add_option("recipe", recipe_path, "Recipe file (JSON)")->required()->check(CLI::ExistingFile);

    auto* plugins = app.add_subcommand("plugins", "List controller plugins found, and files rejected");
    plugins->add_flag("--json", as_json, "Machine-readable output");

    auto* models = app.add_subcommand("models", "List bundled models");

    std::string corpus_input, corpus_out;
    rudder::CorpusModelOptions corpus_options;
    auto* corpus = app.add_subcommand("corpus-model", "Build an exact corpus-denoiser model from sentences");
    corpus->add_option("input", corpus_input, "One sentence per line, or E2E CSV (.csv, .csv.gz: the ref column)")
        ->required()
        ->check(CLI::ExistingFile);
    corpus->add_option("out", corpus_out, "Model directory to write")->required();
    corpus->add_option("--embed-dim", corpus_options.embed_dim, "Continuous family: embedding width")
        ->check(CLI::Range(1, 4096));
    corpus->add_option("--embed-seed", corpus_options.embed_seed, "Continuous family: embedding seed");

    std::string convert_model, convert_dtype = "float16";
    auto* convert = app.add_subcommand("convert-weights", "Store a model's floating-point weights as float16 (half the size) or float32");
    convert->add_option("model", convert_model, "Bundled model name or model directory")->required();
    convert->add_option("--dtype", convert_dtype, "float16 (default), bfloat16 or float32")
        ->check(CLI::IsMember({"float16", "bfloat16", "float32"}));

    std::string train_config;
    int64_t stop_after = 0;
    bool overwrite = false;
    // `train` and `train-controller` take the same arguments; each refuses the other's kinds.
    auto training_command = [&](const char* name, const char* description) {
        auto* cmd = app.add_subcommand(name, description);
        cmd->add_option("config", train_config, "Training config (JSON, see docs/training.md)")
            ->required()
            ->check(CLI::ExistingFile);
        cmd->add_option("--stop-after", stop_after, "Stop after this step with a checkpoint, as an interrupted run")
            ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
        cmd->add_flag("--overwrite", overwrite, "Train again into an out directory that holds a finished model");
        cmd->add_flag("-q,--quiet", quiet, "No progress on stderr");
        return cmd;
    };
    auto* train = training_command("train", "Train a network (teacher LM, denoiser, tagger or parser) from a training config");
    auto* train_controller = training_command(
        "train-controller", "Train a controller's noisy classifier (syntax_classifier) on annotated text, noised as a denoiser does");

    std::string score_file, teacher_name = "e2e-teacher";
    int64_t score_batch = 64;
    auto* score = app.add_subcommand("score", "Perplexity of texts under a teacher language model");
    score->add_option("file", score_file,
                      "JSON Lines with a \"text\" field (rudder generate's output), E2E CSV (its refs), or one text per line")
        ->required()
        ->check(CLI::ExistingFile);
    score->add_option("--teacher", teacher_name, "Teacher model: a bundled name or a directory (default e2e-teacher)");
    score->add_option("--batch-size", score_batch, "Texts scored together")->check(CLI::Range(1, 4096));
    std::string score_against;
    score->add_option("--against", score_against,
                      "Also count texts that copy a text of this file verbatim (E2E CSV, JSON Lines or lines)")
        ->check(CLI::ExistingFile);
    score->add_flag("--json", as_json, "Machine-readable output");

    rudder::cli::BenchOptions bench_options;
    auto* bench = app.add_subcommand("bench", "Sampling throughput (samples/s) of models at several batch sizes");
    bench->add_option("-m,--model", bench_options.models, "Models: bundled names or directories (default: "
                                                           "e2e-continuous e2e-discrete)");
    bench->add_option("-b,--batch-sizes", bench_options.batch_sizes, "Batch sizes (default 1 16 64)")
        ->check(CLI::Range(1, 4096))
        ->delimiter(',');
    bench->add_option("--steps", bench_options.steps, "Reverse steps per sample (default 200)")
        ->check(CLI::Range(1, 100000));
    bench->add_option("--min-samples", bench_options.min_samples, "Samples per measurement, at least (default 16)")
        ->check(CLI::Range(1, 100000));
    bench->add_option("--threads", bench_options.threads, "LibTorch threads (default: LibTorch's choice)")
        ->check(CLI::Range(1, 256));
    bench->add_flag("--json", bench_options.as_json, "Machine-readable output");

    rudder::cli::EvalOptions suite_options;
    auto* eval = app.add_subcommand("eval", "Run a suite of control tasks over held-out targets: success, teacher perplexity, s/sample");
    eval->add_option("suite", suite_options.suite, "Suite (JSON, see docs/eval.md; suites ship in examples/eval/)")
        ->required()
        ->check(CLI::ExistingFile);
    eval->add_option("-o,--out", suite_options.out, "Folder for results.json, results.md and samples/ (default <suite>-results)");
    eval->add_option("--targets", suite_options.targets, "At most this many targets per task (a quick run)")
        ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
    eval->add_option("--only", suite_options.only, "Run only the tasks whose name contains this text");
    eval->add_option("--threads", suite_options.threads, "Compute threads (default: LibTorch's choice)")->check(CLI::Range(1, 256));
    eval->add_flag("-q,--quiet", suite_options.quiet, "No progress on stderr");

    rudder::cli::AnnotateOptions annotate_options;
    auto* annotate = app.add_subcommand("annotate", "POS tags and a constituency tree per text, as JSON Lines");
    annotate->add_option("file", annotate_options.input,
                         "E2E CSV (its refs), JSON Lines with a \"text\" field, or one text per line")
        ->required()
        ->check(CLI::ExistingFile);
    annotate->add_option("-o,--out", annotate_options.out, "Write JSON Lines here instead of stdout");
    annotate->add_option("--tagger", annotate_options.tagger, "Tagger: a bundled name or a directory (default ewt-tagger)");
    annotate->add_option("--parser", annotate_options.parser, "Parser: a bundled name or a directory (default gum-parser)");
    annotate->add_flag("--tags-only", annotate_options.tags_only, "No parser: \"tree\" is null");
    annotate->add_option("--batch-size", annotate_options.batch_size, "Texts annotated together")->check(CLI::Range(1, 4096));
    annotate->add_option("--threads", annotate_options.threads, "LibTorch threads (default: LibTorch's choice)")
        ->check(CLI::Range(1, 256));
    annotate->add_flag("-q,--quiet", annotate_options.quiet, "No progress on stderr");

    rudder::cli::EvalAnnotatorOptions eval_options;
    auto* eval_annotator = app.add_subcommand(
        "eval-annotator", "Accuracy of a tagger, or labelled bracket F1 of a parser, on a treebank file");
    eval_annotator->add_option("model", eval_options.model, "A tagger or parser: a bundled name or a directory")->required();
    eval_annotator->add_option("treebank", eval_options.treebank,
                               "CoNLL-U (.conllu) or bracketed trees (.ptb, .mrg, .tree, .trees), plain or .gz")
        ->required()
        ->check(CLI::ExistingFile);
    eval_annotator->add_option("--batch-size", eval_options.batch_size, "Sentences processed together")
        ->check(CLI::Range(1, 4096));
    eval_annotator->add_option("--threads", eval_options.threads, "LibTorch threads (default: LibTorch's choice)")
        ->check(CLI::Range(1, 256));
    eval_annotator->add_flag("--json", eval_options.as_json, "Machine-readable output");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? kExitOk : kExitInvalid;
    }
    // stdout carries the JSON Lines; every log message goes to stderr.
    spdlog::set_default_logger(spdlog::stderr_color_mt("rudder"));
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);

    rudder::keep_freed_memory_in_process();
    try {
        if (generate->parsed()) return cmd_generate(recipe_path, out_path, samples, seed, quiet, format == "text");
        if (validate->parsed()) return cmd_validate(recipe_path);
        if (plugins->parsed()) return cmd_plugins(as_json);
        if (models->parsed()) return cmd_models();
        if (corpus->parsed()) return cmd_corpus_model(corpus_input, corpus_out, corpus_options);
        if (convert->parsed()) return cmd_convert_weights(convert_model, convert_dtype);
        if (train->parsed()) return cmd_train(train_config, stop_after, overwrite, quiet, false);
        if (train_controller->parsed()) return cmd_train(train_config, stop_after, overwrite, quiet, true);
        if (score->parsed()) return cmd_score(score_file, teacher_name, score_against, as_json, score_batch);
        if (bench->parsed()) return rudder::cli::run_bench(bench_options);
        if (annotate->parsed()) return rudder::cli::run_annotate(annotate_options);
        if (eval->parsed()) return rudder::cli::run_eval(suite_options);
        if (eval_annotator->parsed()) return rudder::cli::run_eval_annotator(eval_options);
    } catch (const rudder::RecipeError& e) {
        print_recipe_error(recipe_path, e);
        return kExitInvalid;
    } catch (const rudder::ConfigError& e) {  // a bad eval suite
        std::cerr << e.what() << "\n";
        return kExitInvalid;
    } catch (const rudder::Cancelled& e) {
        std::cerr << "rudder: " << e.what() << "\n";
        return kExitFailure;
    } catch (const std::exception& e) {
        std::cerr << "\nrudder: error: " << e.what() << "\n";
        return kExitFailure;
    }
    return kExitFailure;
}
