// `rudder annotate` and `rudder eval-annotator`: the tagger and parser as users run them (see docs/syntax.md).
#pragma once

#include <cstdint>
#include <string>

namespace rudder::cli {

struct AnnotateOptions {
    std::string input;                   // E2E CSV (refs), JSON Lines with "text", or one text per line
    std::string out;                     // JSON Lines file; empty = stdout
    std::string tagger = "ewt-tagger";   // bundled name or directory
    std::string parser = "gum-parser";   // bundled name or directory
    bool tags_only = false;              // no parser, no trees
    int64_t batch_size = 64;
    int threads = 0;                     // LibTorch intra-op threads; 0 = LibTorch's default
    bool quiet = false;
};

// Writes one {"text", "words", "pos", "tree"} object per text; progress on stderr. Returns the exit code.
int run_annotate(const AnnotateOptions& options);

struct EvalAnnotatorOptions {
    std::string model;     // a tagger or parser: bundled name or directory
    std::string treebank;  // .conllu or bracketed trees (.ptb ...), plain or .gz
    int64_t batch_size = 64;
    int threads = 0;
    bool as_json = false;
};

// Tagging accuracy (a tagger) or labelled bracket precision, recall and F1 (a parser) on a treebank's sentences,
// with the treebank's own tokens. Returns the exit code.
int run_eval_annotator(const EvalAnnotatorOptions& options);

}  // namespace rudder::cli
