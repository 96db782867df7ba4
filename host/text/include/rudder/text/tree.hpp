// Constituency trees without LibTorch: PTB bracket notation in and out, labelled spans, and evalb-style labelled
// bracket scores. The syntax controllers and the parser share these; see docs/syntax.md for the conventions.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rudder::syntax {

// A node: a leaf holds a word (no label, no children); any other node has a label and at least one child. A
// preterminal is a node whose only child is a leaf; its label is the word's part-of-speech tag.
struct Tree {
    std::string label;
    std::string word;
    std::vector<Tree> children;

    bool is_leaf() const { return children.empty(); }
    bool is_preterminal() const { return children.size() == 1 && children[0].is_leaf(); }

    static Tree leaf(std::string word);
    static Tree node(std::string label, std::vector<Tree> children);
};

// Bad bracket notation: what() is "<source>:<line>:<column>: <what is wrong>".
class TreeSyntaxError : public std::runtime_error {
public:
    TreeSyntaxError(const std::string& source, int64_t line, int64_t column, const std::string& message);
    int64_t line() const { return line_; }
    int64_t column() const { return column_; }

private:
    int64_t line_, column_;
};

// Every tree in `text` (PTB bracket notation, any whitespace between trees). A tree whose root has no label, as
// in the Penn Treebank's "( (S ...) )", gets the label "ROOT". A label is any run of characters other than
// whitespace and parentheses; a leaf is a word after a label. Errors name `source`, the line and the column.
std::vector<Tree> read_trees(std::string_view text, const std::string& source = "tree");
// Exactly one tree.
Tree read_tree(std::string_view text, const std::string& source = "tree");

// One line of bracket notation: "(S (NP (DT The) (NN dog)) (VP (VBZ barks)))".
std::string to_string(const Tree& tree);

// The words (leaves) and the preterminals' tags, left to right.
std::vector<std::string> words(const Tree& tree);
std::vector<std::string> tags(const Tree& tree);

// "NP-SBJ" -> "NP", "PP-LOC-PRD" -> "PP", "NP=2" -> "NP"; labels that start with '-' ("-NONE-", "-LRB-") are kept.
std::string strip_function_tags(const std::string& label);
// True for the labels a treebank puts above the sentence: "ROOT", "TOP", "" (and "VROOT").
bool is_root_label(const std::string& label);

// A copy without empty elements (preterminals tagged -NONE-) and the constituents they leave with no words.
// Throws std::invalid_argument if nothing is left.
Tree remove_empty_elements(const Tree& tree);

// A constituent over the words [start, end), end exclusive.
struct Span {
    int64_t start = 0;
    int64_t end = 0;
    std::string label;
    bool operator==(const Span& o) const { return start == o.start && end == o.end && label == o.label; }
};

// Every constituent of `tree` in word positions, top-down and left to right, except leaves, preterminals and
// the root label (is_root_label). Labels lose their function tags. Nodes of a unary chain ("(S (VP ...))") are
// separate spans with the same positions.
std::vector<Span> labelled_spans(const Tree& tree);

// Like labelled_spans, but each unary chain is one span whose label joins the chain's labels top-down with '+'
// ("S+VP"): the parser predicts one label per span. Spans are unique by position.
std::vector<Span> chain_spans(const Tree& tree);

// Builds a tree over `words` with preterminals `tags` from non-crossing chain spans (labels joined by '+' become
// unary chains). Words not covered by a span of two or more words hang from the nearest span above them; the
// result's root is the span over all words if there is one, else a node labelled `root_label`. Throws
// std::invalid_argument for crossing spans, spans out of range, or words and tags of different lengths.
Tree tree_from_spans(const std::vector<std::string>& words, const std::vector<std::string>& tags,
                     const std::vector<Span>& spans, const std::string& root_label = "ROOT");

// Labelled bracket scores as evalb computes them with COLLINS.prm: root labels and preterminals are not brackets;
// words whose gold tag is punctuation (, : `` '' .) are deleted from both trees first (brackets left empty are
// dropped); function tags are stripped; ADVP and PRT count as the same label; brackets are matched as a multiset
// of (label, start, end).
struct BracketScore {
    int64_t matched = 0;
    int64_t gold = 0;
    int64_t test = 0;
    int64_t sentences = 0;
    int64_t exact = 0;  // sentences whose brackets all match

    double precision() const { return test ? static_cast<double>(matched) / static_cast<double>(test) : 0.0; }
    double recall() const { return gold ? static_cast<double>(matched) / static_cast<double>(gold) : 0.0; }
    double f1() const {
        const double p = precision(), r = recall();
        return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
    }
    BracketScore& operator+=(const BracketScore& o);
};

// Scores one test tree against its gold tree. Both must have the same words; otherwise std::invalid_argument
// saying where they differ.
BracketScore evalb(const Tree& gold, const Tree& test);

// Labelled brackets matched by word position alone, for trees over different words: a generated text's parse
// against a target tree, as Diffusion-LM scores its syntax-tree control. Brackets are labelled_spans (function
// tags stripped, ADVP = PRT); unlike evalb no punctuation is deleted, since the two texts' punctuation differs.
BracketScore span_score(const Tree& gold, const Tree& test);

}  // namespace rudder::syntax
