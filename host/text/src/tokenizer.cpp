#include <rudder/text/tokenizer.hpp>
#include <rudder/text/text_files.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace rudder {

namespace {

// Letters, digits, and every byte of a multi-byte UTF-8 sequence, so that "Café" or "£20" stay whole.
bool is_word_byte(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

bool is_space_byte(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Tokens written directly after the previous one, without a space.
bool attaches_left(const std::string& token) {
    static const char* const kClosers[] = {".", ",", ";", ":", "!", "?", ")", "'"};
    for (const char* closer : kClosers) {
        if (token == closer) return true;
    }
    return !token.empty() && token.front() == '\'';  // "'s", "'re", ...
}

}  // namespace

WordTokenizer::WordTokenizer(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
    index_.reserve(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) index_.emplace(tokens_[i], static_cast<int64_t>(i));
}

std::vector<std::string> WordTokenizer::split(std::string_view text) {
    std::vector<std::string> out;
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (is_space_byte(c)) {
            ++i;
            continue;
        }
        if (!is_word_byte(c)) {
            out.emplace_back(1, text[i]);
            ++i;
            continue;
        }
        // A word: word bytes, plus an apostrophe or hyphen that sits between two word bytes.
        size_t end = i + 1;
        while (end < n) {
            const auto d = static_cast<unsigned char>(text[end]);
            if (is_word_byte(d)) {
                ++end;
            } else if ((d == '\'' || d == '-') && end + 1 < n &&
                       is_word_byte(static_cast<unsigned char>(text[end + 1]))) {
                end += 2;
            } else {
                break;
            }
        }
        out.emplace_back(text.substr(i, end - i));
        i = end;
    }
    return out;
}

WordTokenizer WordTokenizer::build(const std::vector<std::string>& lines, int64_t min_count) {
    std::map<std::string, int64_t> counts;  // ordered, so ties below come out by text
    for (const auto& line : lines) {
        for (auto& word : split(line)) ++counts[std::move(word)];
    }
    return from_counts(counts, min_count, "WordTokenizer::build");
}

WordTokenizer WordTokenizer::from_words(const std::vector<std::string>& words, int64_t min_count) {
    std::map<std::string, int64_t> counts;
    for (const auto& word : words) {
        if (word.empty() ||
            std::any_of(word.begin(), word.end(), [](char c) { return is_space_byte(static_cast<unsigned char>(c)); }))
            throw std::invalid_argument("WordTokenizer::from_words: '" + word + "' is empty or holds whitespace");
        ++counts[word];
    }
    return from_counts(counts, min_count, "WordTokenizer::from_words");
}

int64_t WordTokenizer::id(const std::string& word) const {
    auto it = index_.find(word);
    return it == index_.end() ? unk_id() : it->second;
}

WordTokenizer WordTokenizer::from_counts(const std::map<std::string, int64_t>& counts, int64_t min_count,
                                         const char* caller) {
    if (min_count < 1) {
        throw std::invalid_argument(std::string(caller) + ": min_count must be >= 1, got " + std::to_string(min_count));
    }
    std::vector<std::pair<std::string, int64_t>> kept;
    for (auto& entry : counts) {
        if (entry.second >= min_count) kept.emplace_back(entry.first, entry.second);
    }
    std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.second > b.second; });

    std::vector<std::string> tokens = {kPad, kUnk, kMask};
    tokens.reserve(kept.size() + 3);
    for (auto& entry : kept) tokens.push_back(std::move(entry.first));
    return WordTokenizer(std::move(tokens));
}

WordTokenizer WordTokenizer::load(const std::string& vocab_path) {
    std::istringstream in(read_small_file(vocab_path, kMaxTokenizerFileBytes));
    return read(in, vocab_path);
}

WordTokenizer WordTokenizer::read(std::istream& in, const std::string& vocab_path) {
    const std::string specials[] = {kPad, kUnk, kMask};
    std::vector<std::string> tokens;
    std::unordered_map<std::string, int64_t> first_line;
    std::string line;
    int64_t line_no = 0;
    auto fail = [&](const std::string& what) {
        throw std::runtime_error(vocab_path + ":" + std::to_string(line_no) + ": " + what);
    };
    while (std::getline(in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();  // tolerate CRLF files
        if (line.empty()) fail("empty line");
        if (std::any_of(line.begin(), line.end(),
                        [](char c) { return is_space_byte(static_cast<unsigned char>(c)); })) {
            fail("token '" + line + "' contains whitespace");
        }
        if (line_no <= 3 && line != specials[line_no - 1]) {
            fail("expected special token '" + specials[line_no - 1] + "', found '" + line + "'");
        }
        auto inserted = first_line.emplace(line, line_no);
        if (!inserted.second) {
            fail("duplicate token '" + line + "' (first on line " + std::to_string(inserted.first->second) + ")");
        }
        tokens.push_back(line);
    }
    if (in.bad()) throw std::runtime_error("error reading vocabulary file '" + vocab_path + "'");
    if (tokens.size() < 3) {
        throw std::runtime_error(vocab_path + ": expected at least the 3 special tokens <pad>, <unk>, <mask>, found " +
                                 std::to_string(tokens.size()) + " line(s)");
    }
    return WordTokenizer(std::move(tokens));
}

void WordTokenizer::save(const std::string& vocab_path) const {
    std::ofstream out(vocab_path, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot open vocabulary file '" + vocab_path + "' for writing");
    for (const auto& token : tokens_) out << token << '\n';
    out.flush();
    if (!out) throw std::runtime_error("error writing vocabulary file '" + vocab_path + "'");
}

std::vector<int64_t> WordTokenizer::encode(std::string_view text) const {
    std::vector<int64_t> ids;
    for (const auto& word : split(text)) {
        auto it = index_.find(word);
        ids.push_back(it == index_.end() ? unk_id() : it->second);
    }
    return ids;
}

std::string WordTokenizer::decode(const int64_t* ids, int64_t n) const {
    std::string text;
    bool after_open_paren = false;
    for (int64_t i = 0; i < n; ++i) {
        if (ids[i] == pad_id()) break;
        const std::string& word = token(ids[i]);
        if (!text.empty() && !after_open_paren && !attaches_left(word)) text += ' ';
        text += word;
        after_open_paren = word == "(";
    }
    return text;
}

std::string TokenPieces::spell(const int64_t* ids, int64_t n, int64_t end) const {
    std::string out;
    int32_t kind = 0;
    for (int64_t k = 0; k < n && ids[k] != end; ++k) {
        out += text[static_cast<size_t>(kind)][static_cast<size_t>(ids[k])];
        kind = kind_after[static_cast<size_t>(ids[k])];
    }
    return out;
}

std::optional<TokenPieces> WordTokenizer::pieces() const {
    TokenPieces out;
    out.text.assign(3, std::vector<std::string>(tokens_.size()));
    out.kind_after.resize(tokens_.size());
    for (size_t v = 0; v < tokens_.size(); ++v) {
        const std::string& word = tokens_[v];
        out.text[0][v] = word;
        out.text[1][v] = attaches_left(word) ? word : " " + word;
        out.text[2][v] = word;
        out.kind_after[v] = word == "(" ? 2 : 1;
    }
    return out;
}

const std::string& WordTokenizer::token(int64_t id) const {
    if (id < 0 || id >= vocab_size()) {
        throw std::out_of_range("token id " + std::to_string(id) + " out of range [0, " + std::to_string(vocab_size()) +
                                ")");
    }
    return tokens_[static_cast<size_t>(id)];
}

WithMaskToken::WithMaskToken(std::shared_ptr<const Tokenizer> tokenizer, std::string mask_text)
    : tokenizer_(std::move(tokenizer)), mask_text_(std::move(mask_text)) {
    if (!tokenizer_) throw std::invalid_argument("WithMaskToken: a tokenizer is required");
    if (tokenizer_->mask_id() >= 0)
        throw std::invalid_argument("WithMaskToken: the tokenizer has a mask token already (id " +
                                    std::to_string(tokenizer_->mask_id()) + ")");
}

std::string WithMaskToken::decode(const int64_t* ids, int64_t n) const {
    const int64_t pad = pad_id(), mask = mask_id();
    std::string text;
    int64_t start = 0;
    for (int64_t i = 0; i <= n; ++i) {
        const bool end = i == n || ids[i] == pad;
        if (!end && ids[i] != mask) continue;
        text += tokenizer_->decode(ids + start, i - start);  // the run of the tokenizer's own ids before it
        if (end) break;
        text += mask_text_;
        start = i + 1;
    }
    return text;
}

std::optional<TokenPieces> WithMaskToken::pieces() const {
    std::optional<TokenPieces> out = tokenizer_->pieces();
    if (!out) return out;
    for (auto& kind : out->text) kind.push_back(mask_text_);
    out->kind_after.push_back(0);  // decode() starts the tokenizer again after a mask
    return out;
}

const std::string& WithMaskToken::token(int64_t id) const {
    return id == mask_id() ? mask_text_ : tokenizer_->token(id);
}

}  // namespace rudder
