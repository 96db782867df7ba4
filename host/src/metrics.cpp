#include "metrics.hpp"

#include <unordered_set>

#include "tokenizer.hpp"

namespace rudder {
namespace {

// The text's words joined by single spaces: equal for texts the tokenizer cannot tell apart.
std::string normalised(const std::string& text) {
    std::string out;
    for (const auto& word : WordTokenizer::split(text)) {
        if (!out.empty()) out += ' ';
        out += word;
    }
    return out;
}

}  // namespace

OverlapReport text_overlap(const std::vector<std::string>& texts, const std::vector<std::string>& references) {
    std::unordered_set<std::string> reference_set;
    reference_set.reserve(references.size());
    for (const auto& r : references) reference_set.insert(normalised(r));
    std::unordered_set<std::string> seen;
    OverlapReport report;
    for (const auto& t : texts) {
        const std::string key = normalised(t);
        report.texts += 1;
        report.distinct += seen.insert(key).second ? 1 : 0;
        report.copies += reference_set.count(key) ? 1 : 0;
    }
    return report;
}

}  // namespace rudder
