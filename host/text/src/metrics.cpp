#include <rudder/text/metrics.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <unordered_set>

#include <rudder/text/tokenizer.hpp>

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

DiversityReport text_diversity(const std::vector<std::string>& texts) {
    DiversityReport report;
    std::unordered_set<std::string> grams[3];
    int64_t totals[3] = {}, words_total = 0;
    for (const auto& text : texts) {
        const std::vector<std::string> words = WordTokenizer::split(text);
        report.texts += 1;
        words_total += static_cast<int64_t>(words.size());
        for (size_t n = 1; n <= 3; ++n) {
            for (size_t i = 0; i + n <= words.size(); ++i) {
                std::string gram = words[i];
                for (size_t j = 1; j < n; ++j) gram += ' ' + words[i + j];  // words never contain a space
                grams[n - 1].insert(std::move(gram));
                totals[n - 1] += 1;
            }
        }
    }
    if (report.texts) report.mean_words = static_cast<double>(words_total) / static_cast<double>(report.texts);
    for (size_t n = 0; n < 3; ++n)
        report.distinct[n] = totals[n] ? static_cast<double>(grams[n].size()) / static_cast<double>(totals[n]) : 0.0;
    return report;
}

double corpus_bleu(const std::vector<std::vector<std::string>>& hypotheses,
                   const std::vector<std::vector<std::string>>& references) {
    std::vector<std::vector<std::vector<std::string>>> each(references.size());
    for (size_t k = 0; k < references.size(); ++k) each[k] = {references[k]};
    return multi_reference_bleu(hypotheses, each);
}

double multi_reference_bleu(const std::vector<std::vector<std::string>>& hypotheses,
                            const std::vector<std::vector<std::vector<std::string>>>& references) {
    if (hypotheses.size() != references.size())
        throw std::invalid_argument("multi_reference_bleu: " + std::to_string(hypotheses.size()) + " hypotheses but " +
                                    std::to_string(references.size()) + " reference sets");
    constexpr size_t kOrder = 4;
    double matched[kOrder] = {}, total[kOrder] = {};
    double hypothesis_length = 0, reference_length = 0;
    auto counts = [](const std::vector<std::string>& words, size_t n) {
        std::map<std::vector<std::string>, int64_t> out;
        for (size_t i = 0; i + n <= words.size(); ++i)
            ++out[std::vector<std::string>(words.begin() + i, words.begin() + i + n)];
        return out;
    };
    for (size_t k = 0; k < hypotheses.size(); ++k) {
        const auto& hypothesis = hypotheses[k];
        const auto& refs = references[k];
        if (refs.empty())
            throw std::invalid_argument("multi_reference_bleu: hypothesis " + std::to_string(k) + " has no reference");
        const auto length = static_cast<int64_t>(hypothesis.size());
        int64_t closest = static_cast<int64_t>(refs[0].size());
        for (const auto& r : refs) {
            const auto n = static_cast<int64_t>(r.size());
            if (std::abs(n - length) < std::abs(closest - length) ||
                (std::abs(n - length) == std::abs(closest - length) && n < closest))
                closest = n;
        }
        hypothesis_length += static_cast<double>(length);
        reference_length += static_cast<double>(closest);
        for (size_t n = 1; n <= kOrder; ++n) {
            std::map<std::vector<std::string>, int64_t> most;  // each n-gram's largest count in one reference
            for (const auto& r : refs)
                for (const auto& [gram, c] : counts(r, n)) most[gram] = std::max(most[gram], c);
            for (const auto& [gram, c] : counts(hypothesis, n)) {
                const auto it = most.find(gram);
                matched[n - 1] += static_cast<double>(std::min(c, it == most.end() ? int64_t{0} : it->second));
                total[n - 1] += static_cast<double>(c);
            }
        }
    }
    double log_precision = 0;
    for (size_t n = 0; n < kOrder; ++n) {
        if (matched[n] == 0) return 0.0;
        log_precision += std::log(matched[n] / total[n]) / static_cast<double>(kOrder);
    }
    const double brevity = hypothesis_length < reference_length ? 1.0 - reference_length / hypothesis_length : 0.0;
    return std::exp(log_precision + brevity);
}

std::vector<std::string> bleu_words(const std::string& text) {
    // MT-Eval v13a's basic tokenization, written out over bytes (ASCII punctuation only; other bytes are letters):
    // the punctuation {|}~ [\]^_` space-to-& ( to + : to @ / stands apart; a period or comma unless between digits
    // (split when the byte before or after it is not a digit); a dash after a digit. Then lower case.
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    const auto always_apart = [](char c) {
        return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
               (c >= ':' && c <= '@') || c == '/';
    };
    std::vector<std::string> words;
    std::string word;
    const auto flush = [&] {
        if (!word.empty()) words.push_back(word);
        word.clear();
    };
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        const char before = i > 0 ? text[i - 1] : ' ', after = i + 1 < text.size() ? text[i + 1] : ' ';
        bool apart = always_apart(c) || space(c);
        if (c == '.' || c == ',') apart = !digit(before) || !digit(after);
        if (c == '-' && digit(before)) apart = true;
        if (!apart) {
            word += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
            continue;
        }
        flush();
        if (!space(c)) words.emplace_back(1, c);
    }
    flush();
    return words;
}

}  // namespace rudder
