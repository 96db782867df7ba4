#include <rudder/text/words.hpp>

#include <rudder/text/utf8.hpp>

#include <algorithm>
#include <stdexcept>

namespace rudder::syntax {

namespace {

bool ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lower_ascii(std::string s) {
    for (char& c : s) c = lower(c);
    return s;
}

// `s` ends with `suffix` and has something before it (a clitic alone is a word, not split off).
bool has_suffix_after_stem(const std::string& s, const std::string& suffix) {
    return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The UTF-8 characters of `s` as strings (a byte that starts none stands alone).
std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        const size_t n = std::min(utf8::sequence_length(s[i]), s.size() - i);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

const char* const kCurrencySigns[] = {"£", "€", "¥", "$"};

// A piece with its group: clitics start groups; hyphens and currency signs stay in the group of their stem.
struct Piece {
    std::string text;
    int64_t group;
};

std::vector<Piece> split_pieces(const std::string& word) {
    // Clitics, peeled off the end. Apostrophes may be ASCII or U+2019.
    std::string stem = word;
    std::vector<std::string> clitics;  // in reverse order
    const std::string lowered = lower_ascii(word);
    if (lowered == "cannot") {
        stem = word.substr(0, 3);
        clitics.push_back(word.substr(3));
    } else {
        for (const char* apostrophe : {"'", "\xE2\x80\x99"}) {
            const std::string a = apostrophe;
            bool found = false;
            if (has_suffix_after_stem(lowered, "n" + a + "t") && lowered.size() > a.size() + 2) {
                const size_t cut = word.size() - a.size() - 2;
                clitics.push_back(word.substr(cut));
                stem = word.substr(0, cut);
                found = true;
            } else {
                for (const char* ending : {"s", "re", "ve", "ll", "d", "m"}) {
                    const std::string clitic = a + ending;
                    if (has_suffix_after_stem(lowered, clitic)) {
                        const size_t cut = word.size() - clitic.size();
                        clitics.push_back(word.substr(cut));
                        stem = word.substr(0, cut);
                        found = true;
                        break;
                    }
                }
            }
            if (found) break;
        }
    }
    // Hyphens between word characters, then leading currency signs before a digit.
    std::vector<Piece> pieces;
    size_t start = 0;
    auto add_stem_piece = [&](std::string text) {
        for (const char* sign : kCurrencySigns) {
            const std::string s = sign;
            if (text.size() > s.size() && text.compare(0, s.size(), s) == 0 && ascii_digit(text[s.size()])) {
                pieces.push_back({s, 0});
                text = text.substr(s.size());
                break;
            }
        }
        if (!text.empty()) pieces.push_back({text, 0});
    };
    for (size_t i = 1; i + 1 < stem.size(); ++i) {
        if (stem[i] == '-' && stem[i - 1] != '-' && stem[i + 1] != '-' && i > start) {
            add_stem_piece(stem.substr(start, i - start));
            pieces.push_back({"-", 0});
            start = i + 1;
        }
    }
    if (start < stem.size()) add_stem_piece(stem.substr(start));
    int64_t group = 0;
    for (auto it = clitics.rbegin(); it != clitics.rend(); ++it) pieces.push_back({*it, ++group});
    if (pieces.empty()) pieces.push_back({word, 0});
    return pieces;
}

uint64_t fnv1a(char kind, const std::string& text) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto add = [&](unsigned char c) { h = (h ^ c) * 0x100000001b3ull; };
    add(static_cast<unsigned char>(kind));
    for (char c : text) add(static_cast<unsigned char>(c));
    return h;
}

}  // namespace

std::vector<std::string> split_word(const std::string& word) {
    std::vector<std::string> out;
    for (auto& piece : split_pieces(word)) out.push_back(std::move(piece.text));
    return out;
}

Segmentation segment(const std::vector<std::string>& words) {
    Segmentation seg;
    seg.words = words;
    int64_t group_base = 0;
    for (size_t w = 0; w < words.size(); ++w) {
        if (words[w].empty()) throw std::invalid_argument("segment: word " + std::to_string(w + 1) + " is empty");
        seg.first_token.push_back(static_cast<int64_t>(seg.tokens.size()));
        int64_t groups = 0;
        for (auto& piece : split_pieces(words[w])) {
            seg.tokens.push_back(std::move(piece.text));
            seg.word_of_token.push_back(static_cast<int64_t>(w));
            seg.group_of_token.push_back(group_base + piece.group);
            groups = std::max(groups, piece.group + 1);
        }
        group_base += groups;
    }
    seg.first_token.push_back(static_cast<int64_t>(seg.tokens.size()));
    return seg;
}

std::vector<std::string> project_tags(const Segmentation& seg, const std::vector<std::string>& token_tags) {
    if (token_tags.size() != seg.tokens.size())
        throw std::invalid_argument("project_tags: " + std::to_string(token_tags.size()) + " tags for " +
                                    std::to_string(seg.tokens.size()) + " tokens");
    std::vector<std::string> out;
    for (size_t w = 0; w + 1 < seg.first_token.size(); ++w) {
        std::string tag;
        const auto begin = static_cast<size_t>(seg.first_token[w]), end = static_cast<size_t>(seg.first_token[w + 1]);
        for (size_t t = begin; t < end;) {
            // One group: its last piece that is not a hyphen speaks for it.
            size_t group_end = t;
            std::string group_tag;
            while (group_end < end && seg.group_of_token[group_end] == seg.group_of_token[t]) {
                if (seg.tokens[group_end] != "-" || group_tag.empty()) group_tag = token_tags[group_end];
                ++group_end;
            }
            tag += (tag.empty() ? "" : "+") + group_tag;
            t = group_end;
        }
        out.push_back(tag);
    }
    return out;
}

Tree project_tree(const Segmentation& seg, const Tree& token_tree, const std::vector<std::string>& word_tags) {
    const auto n_tokens = static_cast<int64_t>(seg.tokens.size());
    // word_at_boundary[t]: the word that starts at token t (or the word count at the end), -1 inside a word.
    std::vector<int64_t> word_at_boundary(static_cast<size_t>(n_tokens) + 1, -1);
    for (size_t w = 0; w < seg.first_token.size(); ++w)
        word_at_boundary[static_cast<size_t>(seg.first_token[w])] = static_cast<int64_t>(w);
    std::vector<Span> word_spans;
    for (const auto& s : chain_spans(token_tree)) {
        if (s.end > n_tokens)
            throw std::invalid_argument("project_tree: the tree has more tokens than the segmentation");
        const int64_t start = word_at_boundary[static_cast<size_t>(s.start)],
                      end = word_at_boundary[static_cast<size_t>(s.end)];
        if (start >= 0 && end >= 0) word_spans.push_back({start, end, s.label});
    }
    return tree_from_spans(seg.words, word_tags, word_spans);
}

std::string unescape_ptb(const std::string& word) {
    if (word.size() != 5 || word[0] != '-' || word[4] != '-') return word;
    if (word == "-LRB-") return "(";
    if (word == "-RRB-") return ")";
    if (word == "-LSB-") return "[";
    if (word == "-RSB-") return "]";
    if (word == "-LCB-") return "{";
    if (word == "-RCB-") return "}";
    return word;
}

std::string word_key(const std::string& word) {
    std::string key = unescape_ptb(word);
    for (char& c : key) {
        if (ascii_digit(c))
            c = '0';
        else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')
            c = '_';
        else
            c = lower(c);
    }
    return key;
}

std::array<int64_t, kWordFeatures> word_features(const std::string& word, int64_t buckets) {
    if (buckets < 2) throw std::invalid_argument("word_features: buckets must be >= 2");
    const std::string plain = unescape_ptb(word);
    const std::vector<std::string> chars = code_points(lower_ascii(plain));
    auto bucket = [&](char kind, const std::string& text) {
        return 1 + static_cast<int64_t>(fnv1a(kind, text) % static_cast<uint64_t>(buckets - 1));
    };
    std::array<int64_t, kWordFeatures> out{};
    size_t k = 0;
    for (size_t n = 1; n <= 3; ++n) {
        std::string prefix;
        for (size_t i = 0; i < std::min(n, chars.size()); ++i) prefix += chars[i];
        out[k++] = bucket(static_cast<char>('0' + n), prefix);
    }
    for (size_t n = 1; n <= 4; ++n) {
        std::string suffix;
        for (size_t i = chars.size() - std::min(n, chars.size()); i < chars.size(); ++i) suffix += chars[i];
        out[k++] = bucket(static_cast<char>('a' + n), suffix);
    }
    std::string shape;
    std::string last;
    for (const auto& cp : code_points(plain)) {
        std::string cls = cp;
        if (cp.size() == 1) {
            const char c = cp[0];
            if (ascii_digit(c))
                cls = "d";
            else if (ascii_letter(c))
                cls = (c >= 'A' && c <= 'Z') ? "X" : "x";
        } else if (cp.size() == 2 && static_cast<unsigned char>(cp[0]) == 0xC3) {
            cls = "x";  // Latin-1 letters (é, ü, ...): letters in names
        }
        if (cls != last) shape += cls;
        last = cls;
    }
    out[k++] = bucket('s', shape);
    return out;
}

}  // namespace rudder::syntax
