// The CKY decoder of the span parser, on plain arrays (no LibTorch): the best binary bracketing under span scores,
// as in Stern, Andreas & Klein (2017), "A Minimal Span-Based Neural Constituency Parser".
#pragma once

#include <cstdint>
#include <vector>

namespace rudder::syntax {

// Scores of every span [i, j) of an n-word sentence, 0 <= i < j <= n, in dense (n+1) x (n+1) row-major arrays
// (entries with i >= j are ignored): the best non-empty label and its score, and the score of "no constituent".
struct SpanChart {
    int64_t n = 0;
    std::vector<float> label_score;
    std::vector<int64_t> label;  // >= 1
    std::vector<float> empty_score;

    explicit SpanChart(int64_t words);
    int64_t at(int64_t i, int64_t j) const { return i * (n + 1) + j; }
};

struct LabelledSpan {
    int64_t start, end, label;
};

// The tree maximising the summed scores of its spans: a binary bracketing whose every span takes its better
// choice (its best label, or no constituent), except the whole sentence, which always takes its best label.
// Returns the labelled spans (the ones that are constituents), outermost first. O(n^3).
std::vector<LabelledSpan> decode_chart(const SpanChart& chart);

}  // namespace rudder::syntax
