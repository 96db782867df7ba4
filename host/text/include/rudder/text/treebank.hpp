// Treebank files without LibTorch: CoNLL-U (Universal Dependencies) and PTB bracketed trees, plain or gzip.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <rudder/text/tree.hpp>

namespace rudder::syntax {

// One sentence of a treebank: its syntactic words with their tags, and its tree when the file has trees.
struct TreebankSentence {
    std::vector<std::string> words;
    std::vector<std::string> xpos;  // PTB tags (CoNLL-U's XPOS column; a tree's preterminals)
    std::vector<std::string> upos;  // universal tags (CoNLL-U only; empty for trees)
    bool has_tree = false;
    Tree tree;           // with empty elements removed (PTB files only)
    std::string source;  // "file:line" where the sentence starts
};

enum class TreebankFormat { conllu, ptb };

// By name: ".conllu" -> conllu; ".ptb", ".mrg", ".tree", ".trees" -> ptb; a trailing ".gz" is ignored. Throws
// std::invalid_argument naming the file and the names understood.
TreebankFormat treebank_format(const std::filesystem::path& file);
const char* treebank_format_name(TreebankFormat format);

// CoNLL-U: sentences separated by blank lines; comment lines start with '#'. Multi-word token lines ("3-4") and
// empty nodes ("5.1") are skipped: the words are the syntactic words. Throws std::runtime_error "file:line: what"
// for a malformed line (wrong column count, non-consecutive ids, empty form or tag).
std::vector<TreebankSentence> read_conllu(const std::filesystem::path& file);
// One tree per sentence in PTB bracket notation. Throws TreeSyntaxError with file:line:column.
std::vector<TreebankSentence> read_ptb(const std::filesystem::path& file);
// Either, by treebank_format.
std::vector<TreebankSentence> read_treebank(const std::filesystem::path& file);

// One text as `rudder annotate` writes it: {"text", "words", "pos", "tree"} per line of JSON Lines.
struct AnnotatedText {
    int64_t line = 0;  // in the file, for messages
    std::string text;
    std::vector<std::string> pos;  // one tag per word of the text
    std::string tree;              // bracket notation; "" when annotated without a parser (--tags-only)
};

// Reads `rudder annotate` output (plain or .gz), skipping blank lines. Throws std::runtime_error naming the file
// and line of anything else.
std::vector<AnnotatedText> read_annotated_texts(const std::filesystem::path& file);

}  // namespace rudder::syntax
