// From Rudder's words to treebank tokens and back, and the per-word features the tagger and parser read. No
// LibTorch.
//
// WordTokenizer::split keeps "It's", "isn't", "family-friendly" and "£20-25" whole; the treebanks (UD EWT, GUM)
// split clitics ("It" "'s"), hyphens ("family" "-" "friendly") and currency signs ("£" "20"). The annotator
// splits each word into such pieces, tags and parses the pieces, and projects the result back onto the words:
//   - a word's tag joins its clitic pieces' tags with '+' ("It's" -> "PRP+VBZ", "Eagle's" -> "NNP+POS"); within
//     a hyphenated or currency piece group the last non-hyphen piece's tag stands for the group (compounds are
//     right-headed: "family-friendly" -> "JJ", "£20-25" -> "CD");
//   - a constituent survives if it starts at a word's first piece and ends at a word's last piece; otherwise it is
//     dropped and its children join its parent.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <rudder/text/tree.hpp>

namespace rudder::syntax {

// How one sentence's words map to treebank tokens.
struct Segmentation {
    std::vector<std::string> words;
    std::vector<std::string> tokens;
    std::vector<int64_t> word_of_token;  // per token, the word it came from
    std::vector<int64_t> first_token;    // per word, its first token; plus tokens.size() at the end
    // Per token: the group it belongs to within its word. Clitic pieces are groups of their own; a hyphen or a
    // currency sign joins the group of the piece around it.
    std::vector<int64_t> group_of_token;
};

// The treebank tokens of one word: clitics ('s 're 've 'll 'd 'm n't, also "cannot" -> "can" "not"), hyphens
// between word characters, and a leading currency sign before a digit are split off.
std::vector<std::string> split_word(const std::string& word);
Segmentation segment(const std::vector<std::string>& words);

// Word tags from token tags (see the rules above).
std::vector<std::string> project_tags(const Segmentation& seg, const std::vector<std::string>& token_tags);
// A tree over the words from a tree over the tokens; preterminals get `word_tags`.
Tree project_tree(const Segmentation& seg, const Tree& token_tree, const std::vector<std::string>& word_tags);

// ---------------------------------------------------------------------------------------------------------------
// Features

// The form used for the word embedding table: PTB escapes undone ("-LRB-" -> "("), ASCII lower case, every digit
// -> '0', whitespace -> '_'. Never empty for a non-empty word.
std::string word_key(const std::string& word);
// "-LRB-" -> "(", "-RRB-" -> ")", "-LSB-" -> "[", "-RSB-" -> "]", "-LCB-" -> "{", "-RCB-" -> "}"; others unchanged.
std::string unescape_ptb(const std::string& word);

// Hashed sub-word features of one word, each an id in [1, buckets): prefixes of 1-3 and suffixes of 1-4
// characters (UTF-8 code points, lower-cased), and the word's shape ("Aromi" -> "Xx", "£20-25" -> "£d-d", runs
// collapsed). They let the networks tag words they never saw, such as restaurant names. `buckets` >= 2.
constexpr int64_t kWordFeatures = 8;
std::array<int64_t, kWordFeatures> word_features(const std::string& word, int64_t buckets);

}  // namespace rudder::syntax
