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

}  // namespace rudder
