// `rudder annotate` (POS tags and trees of texts) and `rudder eval-annotator` (the tagger and parser against a
// treebank).
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <rudder/base/output_file.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/syntax/annotator.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/treebank.hpp>

#include "commands.hpp"
#include "progress_line.hpp"

namespace rudder::cli {
namespace {

struct AnnotateOptions {
    std::string input;                  // E2E CSV (refs), JSON Lines with "text", or one text per line
    std::string out;                    // JSON Lines file; empty = stdout
    std::string tagger = "ewt-tagger";  // bundled name or directory
    std::string parser = "gum-parser";  // bundled name or directory
    bool tags_only = false;             // no parser, no trees
    int64_t batch_size = 64;
    bool quiet = false;
};

// Writes one {"text", "words", "pos", "tree"} object per text; progress on stderr. Returns the exit code.

struct EvalAnnotatorOptions {
    std::string model;     // a tagger or parser: bundled name or directory
    std::string treebank;  // .conllu or bracketed trees (.ptb ...), plain or .gz
    int64_t batch_size = 64;
    bool as_json = false;
};

// Tagging accuracy (a tagger) or labelled bracket precision, recall and F1 (a parser) on a treebank's sentences,
// with the treebank's own tokens. Returns the exit code.

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path find_model(const std::string& name, const char* what, const char* config) {
    try {
        return resolve_model(name, fs::current_path(), default_model_path());
    } catch (const ModelError& e) {
        throw ModelError(std::string(e.what()) + "\n(train a " + what + " with `rudder train " + config +
                         "`, or name a model directory)");
    }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run_annotate(const AnnotateOptions& o) {
    ComputeShare share;
    const auto tagger = syntax::TaggerModel::load(find_model(o.tagger, "tagger", "examples/train/tagger.json"));
    std::shared_ptr<syntax::ParserModel> parser;
    if (!o.tags_only) parser = syntax::ParserModel::load(find_model(o.parser, "parser", "examples/train/parser.json"));
    const syntax::Annotator annotator(tagger, parser);
    const std::vector<std::string> texts = read_texts(o.input);

    std::ofstream file;
    if (!o.out.empty()) {
        file.open(o.out);
        if (!file) throw std::runtime_error("cannot write '" + o.out + "'");
    }
    std::ostream& out = o.out.empty() ? std::cout : file;
    if (!o.quiet)
        std::fprintf(stderr, "annotating %zu texts with %s%s%s\n", texts.size(), tagger->dir().string().c_str(),
                     parser ? " and " : " (tags only)", parser ? parser->dir().string().c_str() : "");
    const auto start = std::chrono::steady_clock::now();
    ProgressLine progress(o.quiet);
    for (size_t begin = 0; begin < texts.size(); begin += static_cast<size_t>(o.batch_size)) {
        const size_t end = std::min(texts.size(), begin + static_cast<size_t>(o.batch_size));
        const std::vector<std::string> batch(texts.begin() + static_cast<std::ptrdiff_t>(begin),
                                             texts.begin() + static_cast<std::ptrdiff_t>(end));
        const auto annotations = annotator.annotate_texts(batch);
        for (size_t k = 0; k < batch.size(); ++k) {
            const auto& a = annotations[k];
            // Keys in the order a reader expects them, not sorted.
            nlohmann::ordered_json line = {{"text", batch[k]}, {"words", a.words}, {"pos", a.pos}};
            line["tree"] = parser && !a.words.empty() ? nlohmann::ordered_json(syntax::to_string(a.tree))
                                                      : nlohmann::ordered_json(nullptr);
            out << line.dump() << "\n";
        }
        if (!out) throw std::runtime_error("cannot write '" + (o.out.empty() ? std::string("stdout") : o.out) + "'");
        progress.show(static_cast<int64_t>(end), static_cast<int64_t>(texts.size()), [&] {
            const double secs = seconds_since(start);
            return fmt::format("{}/{} texts  {:.1f} texts/s", end, texts.size(),
                               secs > 0 ? static_cast<double>(end) / secs : 0.0);
        });
    }
    out.flush();
    if (!o.quiet) {
        const double secs = seconds_since(start);
        std::fprintf(stderr, "annotated %zu texts in %.2f s (%.1f texts/s)%s%s\n", texts.size(), secs,
                     secs > 0 ? static_cast<double>(texts.size()) / secs : 0.0, o.out.empty() ? "" : " -> ",
                     o.out.c_str());
    }
    return 0;
}

int run_eval_annotator(const EvalAnnotatorOptions& o) {
    ComputeShare share;
    const fs::path dir = resolve_model(o.model, fs::current_path(), default_model_path());
    const json config = read_json_file(dir / "config.json");
    const std::string type = config.is_object() ? config.value("type", std::string()) : std::string();
    const std::vector<syntax::TreebankSentence> sentences = syntax::read_treebank(o.treebank);
    if (sentences.empty()) throw std::runtime_error("'" + o.treebank + "' holds no sentences");
    std::vector<std::vector<std::string>> words;
    for (const auto& s : sentences) words.push_back(s.words);

    if (type == "tagger") {
        const auto tagger = syntax::TaggerModel::load(dir);
        const auto start = std::chrono::steady_clock::now();  // the rate excludes loading
        const auto predicted = tagger->tag(words, o.batch_size);
        const double secs = seconds_since(start);
        int64_t tokens = 0, correct = 0, upos_tokens = 0, upos_correct = 0;
        for (size_t s = 0; s < sentences.size(); ++s) {
            for (size_t k = 0; k < sentences[s].words.size(); ++k) {
                ++tokens;
                correct += predicted[s].xpos[k] == sentences[s].xpos[k];
                if (!sentences[s].upos.empty() && !predicted[s].upos.empty()) {
                    ++upos_tokens;
                    upos_correct += predicted[s].upos[k] == sentences[s].upos[k];
                }
            }
        }
        const double accuracy = static_cast<double>(correct) / static_cast<double>(tokens);
        const double upos_accuracy =
            upos_tokens ? static_cast<double>(upos_correct) / static_cast<double>(upos_tokens) : 0.0;
        if (o.as_json) {
            json j = {{"model", dir.string()},  {"type", "tagger"},
                      {"treebank", o.treebank}, {"sentences", sentences.size()},
                      {"tokens", tokens},       {"ptb_tag_accuracy", accuracy},
                      {"seconds", secs}};
            j["upos_accuracy"] = upos_tokens ? json(upos_accuracy) : json(nullptr);
            std::cout << j.dump() << "\n";
        } else {
            std::fprintf(results_stream(), "PTB tag accuracy %.2f%% (%lld of %lld tokens, %zu sentences)\n",
                         100.0 * accuracy, static_cast<long long>(correct), static_cast<long long>(tokens),
                         sentences.size());
            if (upos_tokens)
                std::fprintf(results_stream(), "universal tag accuracy %.2f%% (%lld of %lld tokens)\n",
                             100.0 * upos_accuracy, static_cast<long long>(upos_correct),
                             static_cast<long long>(upos_tokens));
            std::fprintf(results_stream(), "tagger: %s; %.1f sentences/s\n", dir.string().c_str(),
                         static_cast<double>(sentences.size()) / secs);
        }
        return 0;
    }
    if (type == "parser") {
        if (syntax::treebank_format(o.treebank) != syntax::TreebankFormat::ptb)
            throw std::runtime_error("'" + o.treebank +
                                     "': a parser is scored against constituency trees (.ptb, .mrg, "
                                     ".tree, .trees, optionally .gz)");
        const auto parser = syntax::ParserModel::load(dir);
        // The gold tags become the preterminals; they do not count in the score (evalb ignores preterminals).
        std::vector<std::vector<std::string>> gold_tags;
        for (const auto& s : sentences) gold_tags.push_back(s.xpos);
        const auto start = std::chrono::steady_clock::now();
        const auto trees = parser->parse(words, gold_tags, o.batch_size);
        const double secs = seconds_since(start);
        syntax::BracketScore score;
        for (size_t s = 0; s < sentences.size(); ++s) score += syntax::evalb(sentences[s].tree, trees[s]);
        if (o.as_json) {
            std::cout << json{{"model", dir.string()},
                              {"type", "parser"},
                              {"treebank", o.treebank},
                              {"sentences", score.sentences},
                              {"gold_brackets", score.gold},
                              {"test_brackets", score.test},
                              {"matched_brackets", score.matched},
                              {"precision", score.precision()},
                              {"recall", score.recall()},
                              {"f1", score.f1()},
                              {"exact_match", static_cast<double>(score.exact) / static_cast<double>(score.sentences)},
                              {"seconds", secs}}
                             .dump()
                      << "\n";
        } else {
            std::fprintf(results_stream(),
                         "labelled bracket F1 %.2f (precision %.2f, recall %.2f; %lld of %lld gold and %lld predicted "
                         "brackets match)\n",
                         100.0 * score.f1(), 100.0 * score.precision(), 100.0 * score.recall(),
                         static_cast<long long>(score.matched), static_cast<long long>(score.gold),
                         static_cast<long long>(score.test));
            std::fprintf(results_stream(),
                         "exact match %.2f%% of %lld sentences; evalb conventions (COLLINS.prm), see docs/syntax.md\n",
                         100.0 * static_cast<double>(score.exact) / static_cast<double>(score.sentences),
                         static_cast<long long>(score.sentences));
            std::fprintf(results_stream(), "parser: %s; %.1f sentences/s\n", dir.string().c_str(),
                         static_cast<double>(sentences.size()) / secs);
        }
        return 0;
    }
    throw ModelError("'" + dir.string() + "' is " +
                     (type.empty() ? "a model without a type" : "a '" + type + "' model") +
                     ", not a tagger or a parser");
}

}  // namespace

void add_syntax_commands(CLI::App& app, Commands& commands) {
    auto a = std::make_shared<AnnotateOptions>();
    auto* annotate = app.add_subcommand("annotate", "POS tags and a constituency tree per text, as JSON Lines");
    annotate->add_option("file", a->input, "E2E CSV (its refs), JSON Lines with a \"text\" field, or one text per line")
        ->required()
        ->check(CLI::ExistingFile);
    annotate->add_option("-o,--out", a->out, "Write JSON Lines here instead of stdout");
    annotate->add_option("--tagger", a->tagger, "Tagger: a bundled name or a directory (default ewt-tagger)");
    annotate->add_option("--parser", a->parser, "Parser: a bundled name or a directory (default gum-parser)");
    annotate->add_flag("--tags-only", a->tags_only, "No parser: \"tree\" is null");
    annotate->add_option("--batch-size", a->batch_size, "Texts annotated together")->check(CLI::Range(1, 4096));
    commands.add_threads_option(annotate);
    annotate->add_flag("-q,--quiet", a->quiet, "No progress on stderr");
    commands.list.push_back({annotate, [a] { return run_annotate(*a); }});

    auto e = std::make_shared<EvalAnnotatorOptions>();
    auto* eval_annotator = app.add_subcommand(
        "eval-annotator", "Accuracy of a tagger, or labelled bracket F1 of a parser, on a treebank file");
    eval_annotator->add_option("model", e->model, "A tagger or parser: a bundled name or a directory")->required();
    eval_annotator
        ->add_option("treebank", e->treebank,
                     "CoNLL-U (.conllu) or bracketed trees (.ptb, .mrg, .tree, .trees), plain or .gz")
        ->required()
        ->check(CLI::ExistingFile);
    eval_annotator->add_option("--batch-size", e->batch_size, "Sentences processed together")
        ->check(CLI::Range(1, 4096));
    commands.add_threads_option(eval_annotator);
    eval_annotator->add_flag("--json", e->as_json, "Machine-readable output");
    commands.list.push_back({eval_annotator, [e] { return run_eval_annotator(*e); }});
}

}  // namespace rudder::cli
