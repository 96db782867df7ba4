// Measures of generated text that need no network. Fluency (teacher perplexity) is in train/score.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rudder {

// How generated texts relate to each other and to a reference set (the training texts, for a memorisation check).
// Texts are compared word for word: split as the word tokenizer splits (so spacing does not matter), case kept.
struct OverlapReport {
    int64_t texts = 0;     // texts compared
    int64_t distinct = 0;  // different texts among them
    int64_t copies = 0;    // texts equal to some reference text
    double copy_share() const { return texts ? static_cast<double>(copies) / static_cast<double>(texts) : 0.0; }
};

OverlapReport text_overlap(const std::vector<std::string>& texts, const std::vector<std::string>& references);

// How varied a set of texts is, over words split as the word tokenizer splits them (case kept). distinct-n
// (Li et al. 2016) is the number of different n-grams over the number of n-grams in all texts together; it falls
// as the set grows, so compare sets of the same size.
struct DiversityReport {
    int64_t texts = 0;
    double mean_words = 0;
    double distinct[3] = {};  // distinct-1, distinct-2, distinct-3 (0 when the texts have no n-gram of that order)
};

DiversityReport text_diversity(const std::vector<std::string>& texts);

// Corpus BLEU-4 (Papineni et al. 2002) of hypotheses against one reference each, over word sequences as given
// (no further tokenization or lowercasing): clipped n-gram precisions for n = 1..4 summed over the corpus, their
// geometric mean, times the brevity penalty exp(1 - r/c) when the hypotheses are shorter. 0 when some order has
// no match, as in the paper (no smoothing). In [0, 1]. Written here because no C++ package in Debian has it.
double corpus_bleu(const std::vector<std::vector<std::string>>& hypotheses,
                   const std::vector<std::vector<std::string>>& references);

// The same against several references each: an n-gram's count is clipped by its largest count in any reference of
// its hypothesis, and a hypothesis's reference length is that of its reference closest in length (the shorter of
// two as close). How the E2E NLG challenge scores (its MT-Eval v13a script adapted to many references).
double multi_reference_bleu(const std::vector<std::vector<std::string>>& hypotheses,
                            const std::vector<std::vector<std::vector<std::string>>>& references);

// A text's words as MT-Eval v13a's basic tokenization splits them, lower-cased (its default, case-insensitive
// scoring): punctuation apart, a period or comma kept inside a number, a dash after a digit apart.
std::vector<std::string> bleu_words(const std::string& text);

}  // namespace rudder
