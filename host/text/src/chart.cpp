#include <rudder/text/chart.hpp>

#include <limits>
#include <stdexcept>

namespace rudder::syntax {

SpanChart::SpanChart(int64_t words)
    : n(words), label_score(static_cast<size_t>((words + 1) * (words + 1)), 0.0f),
      label(static_cast<size_t>((words + 1) * (words + 1)), 1),
      empty_score(static_cast<size_t>((words + 1) * (words + 1)), 0.0f) {
    if (words < 1) throw std::invalid_argument("SpanChart: a sentence needs at least one word");
}

std::vector<LabelledSpan> decode_chart(const SpanChart& c) {
    const int64_t n = c.n;
    const auto cells = static_cast<size_t>((n + 1) * (n + 1));
    std::vector<double> best(cells, 0.0);   // best score of a subtree over [i, j)
    std::vector<int64_t> split(cells, -1);  // its split point
    std::vector<char> labelled(cells, 0);   // whether [i, j) itself is a constituent in it
    for (int64_t length = 1; length <= n; ++length) {
        for (int64_t i = 0; i + length <= n; ++i) {
            const int64_t j = i + length, at = c.at(i, j);
            const bool top = length == n;
            const bool take_label =
                top || c.label_score[static_cast<size_t>(at)] >= c.empty_score[static_cast<size_t>(at)];
            double score = take_label ? c.label_score[static_cast<size_t>(at)] : c.empty_score[static_cast<size_t>(at)];
            labelled[static_cast<size_t>(at)] = take_label;
            if (length > 1) {
                double best_split = -std::numeric_limits<double>::infinity();
                for (int64_t k = i + 1; k < j; ++k) {
                    const double s = best[static_cast<size_t>(c.at(i, k))] + best[static_cast<size_t>(c.at(k, j))];
                    if (s > best_split) {
                        best_split = s;
                        split[static_cast<size_t>(at)] = k;
                    }
                }
                score += best_split;
            }
            best[static_cast<size_t>(at)] = score;
        }
    }
    std::vector<LabelledSpan> out;
    std::vector<std::pair<int64_t, int64_t>> stack = {{0, n}};
    while (!stack.empty()) {
        const auto [i, j] = stack.back();
        stack.pop_back();
        const auto at = static_cast<size_t>(c.at(i, j));
        if (labelled[at]) out.push_back({i, j, c.label[at]});
        if (j - i > 1) {
            // Right child pushed first so that the left one is visited (and listed) first.
            stack.push_back({split[at], j});
            stack.push_back({i, split[at]});
        }
    }
    return out;
}

}  // namespace rudder::syntax
