#include <rudder/text/tree.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

namespace rudder::syntax {

Tree Tree::leaf(std::string word) {
    Tree t;
    t.word = std::move(word);
    return t;
}

Tree Tree::node(std::string label, std::vector<Tree> children) {
    Tree t;
    t.label = std::move(label);
    t.children = std::move(children);
    return t;
}

TreeSyntaxError::TreeSyntaxError(const std::string& source, int64_t line, int64_t column, const std::string& message)
    : std::runtime_error(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
      line_(line), column_(column) {}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// A recursive-descent reader that tracks line and column for its messages. Depth is bounded so that a hostile
// file cannot overflow the stack.
class BracketReader {
public:
    BracketReader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

    bool at_end() {
        skip_space();
        return pos_ >= text_.size();
    }

    Tree tree() {
        skip_space();
        if (pos_ >= text_.size()) fail("expected '(' to start a tree, found the end of the text");
        if (text_[pos_] != '(') fail("expected '(' to start a tree, found '" + std::string(1, text_[pos_]) + "'");
        Tree t = node(0);
        if (t.label.empty()) t.label = "ROOT";
        return t;
    }

    void expect_end() {
        if (!at_end()) fail("expected one tree, but more text follows");
    }

private:
    static constexpr int kMaxDepth = 1000;

    [[noreturn]] void fail(const std::string& message) const { fail_at(pos_, message); }
    [[noreturn]] void fail_at(size_t at, const std::string& message) const {
        int64_t line = 1, column = 1;
        for (size_t i = 0; i < at && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw TreeSyntaxError(source_, line, column, message);
    }

    void skip_space() {
        while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
    }

    std::string atom() {
        const size_t start = pos_;
        while (pos_ < text_.size() && !is_space(text_[pos_]) && text_[pos_] != '(' && text_[pos_] != ')') ++pos_;
        return std::string(text_.substr(start, pos_ - start));
    }

    // At '('. Reads "(LABEL child...)" where a child is a tree or a word.
    Tree node(int depth) {
        if (depth > kMaxDepth) fail("trees nested deeper than " + std::to_string(kMaxDepth) + " levels");
        const size_t open = pos_;
        ++pos_;
        skip_space();
        Tree t;
        if (pos_ < text_.size() && text_[pos_] != '(' && text_[pos_] != ')') t.label = atom();
        for (;;) {
            skip_space();
            if (pos_ >= text_.size()) fail_at(open, "this '(' is never closed");
            const char c = text_[pos_];
            if (c == ')') {
                ++pos_;
                break;
            }
            if (c == '(') {
                t.children.push_back(node(depth + 1));
                continue;
            }
            const size_t word_at = pos_;
            std::string word = atom();
            if (t.label.empty()) fail_at(word_at, "word '" + word + "' in a node without a label");
            if (!t.children.empty())
                fail_at(word_at, "word '" + word + "' after other children of '" + t.label +
                                     "'; a word must be the only child of its tag");
            t.children.push_back(Tree::leaf(std::move(word)));
            skip_space();
            if (pos_ < text_.size() && text_[pos_] != ')')
                fail("expected ')' after the word '" + t.children.back().word + "' of '" + t.label + "'");
        }
        if (t.children.empty())
            fail_at(open, t.label.empty() ? "empty brackets '()'" : "node '" + t.label + "' has no children");
        return t;
    }

    std::string_view text_;
    const std::string& source_;
    size_t pos_ = 0;
};

void write(const Tree& t, std::string& out) {
    if (t.is_leaf()) {
        out += t.word;
        return;
    }
    out += '(';
    out += t.label;
    for (const auto& child : t.children) {
        out += ' ';
        write(child, out);
    }
    out += ')';
}

void collect_leaves(const Tree& t, std::vector<std::string>& words, std::vector<std::string>& tags) {
    if (t.is_preterminal()) {
        words.push_back(t.children[0].word);
        tags.push_back(t.label);
        return;
    }
    if (t.is_leaf()) {  // only a bare word at the top
        words.push_back(t.word);
        tags.emplace_back();
        return;
    }
    for (const auto& child : t.children) collect_leaves(child, words, tags);
}

// Appends the spans under `t` (which starts at word `start`); returns the word after it.
int64_t collect_spans(const Tree& t, int64_t start, bool top, std::vector<Span>& out) {
    if (t.is_leaf() || t.is_preterminal()) return start + 1;
    const size_t at = out.size();
    const bool counted = !(top && is_root_label(t.label));
    if (counted) out.push_back({start, start, strip_function_tags(t.label)});
    int64_t end = start;
    for (const auto& child : t.children) end = collect_spans(child, end, false, out);
    if (counted) out[at].end = end;
    return end;
}

bool is_evalb_punctuation(const std::string& tag) {
    return tag == "," || tag == ":" || tag == "``" || tag == "''" || tag == ".";
}

}  // namespace

std::vector<Tree> read_trees(std::string_view text, const std::string& source) {
    BracketReader reader(text, source);
    std::vector<Tree> trees;
    while (!reader.at_end()) trees.push_back(reader.tree());
    return trees;
}

Tree read_tree(std::string_view text, const std::string& source) {
    BracketReader reader(text, source);
    if (reader.at_end()) throw TreeSyntaxError(source, 1, 1, "expected a tree, found no text");
    Tree t = reader.tree();
    reader.expect_end();
    return t;
}

std::string to_string(const Tree& tree) {
    std::string out;
    write(tree, out);
    return out;
}

std::vector<std::string> words(const Tree& tree) {
    std::vector<std::string> w, t;
    collect_leaves(tree, w, t);
    return w;
}

std::vector<std::string> tags(const Tree& tree) {
    std::vector<std::string> w, t;
    collect_leaves(tree, w, t);
    return t;
}

std::string strip_function_tags(const std::string& label) {
    if (label.empty() || label[0] == '-') return label;
    const size_t cut = label.find_first_of("-=", 1);
    return cut == std::string::npos ? label : label.substr(0, cut);
}

bool is_root_label(const std::string& label) {
    return label.empty() || label == "ROOT" || label == "TOP" || label == "VROOT";
}

Tree remove_empty_elements(const Tree& tree) {
    std::function<bool(const Tree&, Tree&)> prune = [&](const Tree& t, Tree& out) {
        if (t.is_leaf()) {
            out = t;
            return true;
        }
        if (t.is_preterminal() && t.label == "-NONE-") return false;
        out = Tree::node(t.label, {});
        for (const auto& child : t.children) {
            Tree kept;
            if (prune(child, kept)) out.children.push_back(std::move(kept));
        }
        return !out.children.empty();
    };
    Tree out;
    if (!prune(tree, out)) throw std::invalid_argument("the tree holds only empty elements (-NONE-)");
    return out;
}

std::vector<Span> labelled_spans(const Tree& tree) {
    std::vector<Span> out;
    collect_spans(tree, 0, true, out);
    return out;
}

std::vector<Span> chain_spans(const Tree& tree) {
    std::vector<Span> out;
    for (const auto& span : labelled_spans(tree)) {
        // labelled_spans lists a chain's nodes top-down one after the other, with the same positions.
        if (!out.empty() && out.back().start == span.start && out.back().end == span.end)
            out.back().label += "+" + span.label;
        else
            out.push_back(span);
    }
    return out;
}

Tree tree_from_spans(const std::vector<std::string>& words, const std::vector<std::string>& tags,
                     const std::vector<Span>& spans, const std::string& root_label) {
    const auto n = static_cast<int64_t>(words.size());
    if (static_cast<int64_t>(tags.size()) != n)
        throw std::invalid_argument("tree_from_spans: " + std::to_string(n) + " words but " +
                                    std::to_string(tags.size()) + " tags");
    if (n == 0) throw std::invalid_argument("tree_from_spans: no words");
    // Outer spans first; among equal starts, the longer one first.
    std::vector<Span> sorted = spans;
    for (const auto& s : sorted)
        if (s.start < 0 || s.end > n || s.start >= s.end || s.label.empty())
            throw std::invalid_argument("tree_from_spans: bad span [" + std::to_string(s.start) + ", " +
                                        std::to_string(s.end) + ") '" + s.label + "' for " + std::to_string(n) +
                                        " words");
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const Span& a, const Span& b) { return std::tie(a.start, b.end) < std::tie(b.start, a.end); });
    auto chain = [](const std::string& label, std::vector<Tree> children) {
        // "S+VP" -> (S (VP children...))
        std::vector<std::string> parts;
        size_t from = 0;
        for (size_t plus; (plus = label.find('+', from)) != std::string::npos; from = plus + 1)
            parts.push_back(label.substr(from, plus - from));
        parts.push_back(label.substr(from));
        Tree t = Tree::node(parts.back(), std::move(children));
        for (size_t k = parts.size() - 1; k-- > 0;) t = Tree::node(parts[k], {std::move(t)});
        return t;
    };
    size_t next = 0;
    // Builds the children of the region [start, end) from spans sorted[next...] that lie inside it.
    std::function<std::vector<Tree>(int64_t, int64_t)> build = [&](int64_t start, int64_t end) {
        std::vector<Tree> children;
        int64_t at = start;
        while (at < end) {
            if (next < sorted.size() && sorted[next].start < at)
                throw std::invalid_argument("tree_from_spans: span [" + std::to_string(sorted[next].start) + ", " +
                                            std::to_string(sorted[next].end) + ") crosses another span");
            if (next < sorted.size() && sorted[next].start == at && sorted[next].end <= end) {
                const Span s = sorted[next++];
                std::vector<Tree> inner = build(s.start, s.end);
                children.push_back(chain(s.label, std::move(inner)));
                at = s.end;
            } else if (next < sorted.size() && sorted[next].start == at && sorted[next].end > end) {
                throw std::invalid_argument("tree_from_spans: span [" + std::to_string(sorted[next].start) + ", " +
                                            std::to_string(sorted[next].end) + ") crosses another span");
            } else {
                children.push_back(
                    Tree::node(tags[static_cast<size_t>(at)], {Tree::leaf(words[static_cast<size_t>(at)])}));
                ++at;
            }
        }
        return children;
    };
    std::vector<Tree> top = build(0, n);
    if (next != sorted.size()) throw std::invalid_argument("tree_from_spans: overlapping spans");
    if (top.size() == 1 && !top[0].is_preterminal()) return top[0];
    return Tree::node(root_label, std::move(top));
}

BracketScore& BracketScore::operator+=(const BracketScore& o) {
    matched += o.matched;
    gold += o.gold;
    test += o.test;
    sentences += o.sentences;
    exact += o.exact;
    return *this;
}

namespace {

// Labelled brackets (start, end, label) with their counts: a multiset.
using Brackets = std::map<std::tuple<int64_t, int64_t, std::string>, int64_t>;

BracketScore match_brackets(const Brackets& g, const Brackets& t) {
    BracketScore score;
    score.sentences = 1;
    for (const auto& [key, count] : g) {
        score.gold += count;
        auto it = t.find(key);
        if (it != t.end()) score.matched += std::min(count, it->second);
    }
    for (const auto& [key, count] : t) score.test += count;
    score.exact = score.matched == score.gold && score.matched == score.test ? 1 : 0;
    return score;
}

}  // namespace

BracketScore evalb(const Tree& gold, const Tree& test) {
    const auto gold_words = words(gold), test_words = words(test), gold_tags = tags(gold);
    if (gold_words.size() != test_words.size())
        throw std::invalid_argument("evalb: the gold tree has " + std::to_string(gold_words.size()) +
                                    " words, the test tree " + std::to_string(test_words.size()));
    for (size_t i = 0; i < gold_words.size(); ++i)
        if (gold_words[i] != test_words[i])
            throw std::invalid_argument("evalb: word " + std::to_string(i + 1) + " is '" + gold_words[i] +
                                        "' in the gold tree, '" + test_words[i] + "' in the test tree");
    // Position of each word once punctuation is deleted: kept[i] = number of kept words before i.
    std::vector<int64_t> kept(gold_words.size() + 1, 0);
    for (size_t i = 0; i < gold_words.size(); ++i) kept[i + 1] = kept[i] + (is_evalb_punctuation(gold_tags[i]) ? 0 : 1);
    auto brackets = [&](const Tree& t) {
        Brackets out;
        for (const auto& s : labelled_spans(t)) {
            const int64_t start = kept[static_cast<size_t>(s.start)], end = kept[static_cast<size_t>(s.end)];
            if (start == end) continue;  // only punctuation inside
            ++out[{start, end, s.label == "PRT" ? "ADVP" : s.label}];
        }
        return out;
    };
    return match_brackets(brackets(gold), brackets(test));
}

BracketScore span_score(const Tree& gold, const Tree& test) {
    auto brackets = [](const Tree& t) {
        Brackets out;
        for (const auto& s : labelled_spans(t)) ++out[{s.start, s.end, s.label == "PRT" ? "ADVP" : s.label}];
        return out;
    };
    return match_brackets(brackets(gold), brackets(test));
}

}  // namespace rudder::syntax
