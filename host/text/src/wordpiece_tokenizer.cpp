#include <rudder/text/wordpiece_tokenizer.hpp>

#include <rudder/rudder_json.hpp>
#include <rudder/text/utf8.hpp>

#include "tokenizer_internal.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace rudder {

namespace {

using json = nlohmann::json;
using json_input::shown;  // a value in a message, cut short
using tokenizer_internal::JsonFields;
using tokenizer_internal::path_of;
using tokenizer_internal::read_file;
using utf8::next_code_point;

// The character classes of Hugging Face's BertNormalizer and BertPreTokenizer (Rust), with utf8proc's Unicode
// tables: the reference's and Rust's own tables differ from them only on characters of recent Unicode versions.

// Rust's char::is_whitespace: the White_Space property.
bool is_whitespace(uint32_t cp) {
    switch (cp) {
        case 0x09:
        case 0x0A:
        case 0x0B:
        case 0x0C:
        case 0x0D:
        case 0x20:
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000: return true;
        default: return cp >= 0x2000 && cp <= 0x200A;
    }
}

utf8proc_category_t category(uint32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

// clean_text drops these: Cc, Cf and Co (the unicode_categories crate's is_other, which leaves unassigned code points
// alone), except \t \n \r, which count as whitespace.
bool is_control(uint32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    const utf8proc_category_t c = category(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO;
}

// ASCII punctuation (symbols such as '$' and '+' included, as BERT does) and Unicode's P* categories.
bool is_punctuation(uint32_t cp) {
    if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
        return true;
    switch (category(cp)) {
        case UTF8PROC_CATEGORY_PC:
        case UTF8PROC_CATEGORY_PD:
        case UTF8PROC_CATEGORY_PS:
        case UTF8PROC_CATEGORY_PE:
        case UTF8PROC_CATEGORY_PI:
        case UTF8PROC_CATEGORY_PF:
        case UTF8PROC_CATEGORY_PO: return true;
        default: return false;
    }
}

// The CJK ideograph blocks BERT spaces apart, as Hugging Face's Rust crate writes them: 0x2B920, not BERT's
// 0x2B820, starts the fifth range. Code points, beyond the BMP too (the JavaScript reference walks UTF-16 units and
// misses those; docs/tokenizers.md).
bool is_chinese_char(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Rust's char::to_lowercase, character by character (no final-sigma rule): the simple mapping, except U+0130, whose
// full mapping is two characters.
void append_lowercase(std::u32string& out, uint32_t cp) {
    if (cp == 0x130) {
        out += U'i';
        out += U'\u0307';
        return;
    }
    out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

std::string to_utf8(const std::u32string& chars) {
    std::string out;
    out.reserve(chars.size());
    for (char32_t c : chars) utf8::append(out, static_cast<uint32_t>(c));
    return out;
}

// The WordPiece decoder's clean-up in Hugging Face's Rust crate: each rule replaces every occurrence (str::replace),
// one rule after another.
std::string clean_up(std::string text) {
    static const std::pair<std::string, std::string> kRules[] = {
        {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (const auto& [from, to] : kRules) {
        size_t at = text.find(from);
        if (at == std::string::npos) continue;
        std::string out;
        size_t done = 0;
        for (; at != std::string::npos; at = text.find(from, done)) {
            out.append(text, done, at - done);
            out += to;
            done = at + from.size();
        }
        out.append(text, done, std::string::npos);
        text = std::move(out);
    }
    return text;
}

}  // namespace

struct WordPieceTokenizer::Model : tokenizer_internal::TokenTable {
    std::unordered_map<std::string, int64_t> vocab;  // model.vocab (the table has the added tokens too)
    size_t longest_piece_bytes = 0;
    tokenizer_internal::AddedTokenSplitter added_tokens;

    std::string prefix = "##";  // before a continuation piece
    int64_t max_word_chars = 100;
    int64_t word_unk = -1;  // model.unk_token: what a word without a split becomes

    bool bert_normalizer = false;
    bool clean_text = false, chinese_chars = false, strip_accents = false, lowercase = false;

    bool wordpiece_decoder = false;  // else tokens are joined by spaces
    std::string decoder_prefix;
    bool cleanup = false;

    int64_t pad = -1, unk = -1, mask = -1;

    std::u32string normalize(std::string_view text) const;
    void encode_word(const std::string& word, std::vector<int64_t>& out) const;
    void encode_plain(std::string_view text, std::vector<int64_t>& out) const;
};

// BertNormalizer, step by step as Hugging Face's Rust crate applies it: clean_text, CJK spacing, accents (NFD, then
// no Mn), lowercase. (The JavaScript reference lowercases before stripping accents, with a final-sigma rule;
// docs/tokenizers.md says where the two depart.)
std::u32string WordPieceTokenizer::Model::normalize(std::string_view text) const {
    std::u32string chars;
    chars.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const uint32_t cp = next_code_point(text, i);
        if (clean_text) {
            if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
            if (is_whitespace(cp)) {
                chars += U' ';
                continue;
            }
        }
        if (chinese_chars && is_chinese_char(cp)) {
            chars += U' ';
            chars += static_cast<char32_t>(cp);
            chars += U' ';
            continue;
        }
        chars += static_cast<char32_t>(cp);
    }
    const bool ascii = std::all_of(chars.begin(), chars.end(), [](char32_t c) { return c < 0x80; });
    if (strip_accents && !ascii) {
        const std::string utf8 = to_utf8(chars);
        utf8proc_uint8_t* decomposed = nullptr;
        const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                                                static_cast<utf8proc_ssize_t>(utf8.size()), &decomposed,
                                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
        if (n < 0) throw std::runtime_error(std::string("NFD normalisation failed: ") + utf8proc_errmsg(n));
        const std::string_view nfd(reinterpret_cast<const char*>(decomposed), static_cast<size_t>(n));
        chars.clear();
        for (size_t i = 0; i < nfd.size();) {
            const uint32_t cp = next_code_point(nfd, i);
            if (category(cp) != UTF8PROC_CATEGORY_MN) chars += static_cast<char32_t>(cp);
        }
        std::free(decomposed);
    }
    if (lowercase) {
        if (ascii) {
            for (char32_t& c : chars) {
                if (c >= U'A' && c <= U'Z') c += U'a' - U'A';
            }
        } else {
            std::u32string lower;
            lower.reserve(chars.size());
            for (char32_t c : chars) append_lowercase(lower, static_cast<uint32_t>(c));
            chars.swap(lower);
        }
    }
    return chars;
}

// Greedy longest match from the start, continuations with the prefix; the whole word is unk when it is too long or
// some position has no piece, as Hugging Face's WordPiece model does.
void WordPieceTokenizer::Model::encode_word(const std::string& word, std::vector<int64_t>& out) const {
    std::vector<size_t> bounds;  // byte offsets of the word's characters, and its end
    for (size_t i = 0; i < word.size(); next_code_point(word, i)) bounds.push_back(i);
    bounds.push_back(word.size());
    const size_t n = bounds.size() - 1;
    if (static_cast<int64_t>(n) > max_word_chars) {
        out.push_back(word_unk);
        return;
    }
    const size_t first = out.size();
    std::string candidate;
    for (size_t start = 0; start < n;) {
        const size_t prefix_bytes = start > 0 ? prefix.size() : 0;
        int64_t found = -1;
        size_t end = n;
        for (; end > start; --end) {
            // A candidate longer than every piece cannot match; skipping it leaves the result as it is.
            if (prefix_bytes + bounds[end] - bounds[start] > longest_piece_bytes) continue;
            candidate.assign(prefix, 0, prefix_bytes);
            candidate.append(word, bounds[start], bounds[end] - bounds[start]);
            const auto hit = vocab.find(candidate);
            if (hit != vocab.end()) {
                found = hit->second;
                break;
            }
        }
        if (found < 0) {
            out.resize(first);
            out.push_back(word_unk);
            return;
        }
        out.push_back(found);
        start = end;
    }
}

// Normalised text split as BertPreTokenizer splits it: whitespace ends a word, each punctuation mark is a word.
void WordPieceTokenizer::Model::encode_plain(std::string_view text, std::vector<int64_t>& out) const {
    if (text.empty()) return;
    const std::u32string chars = bert_normalizer ? normalize(text) : [&] {
        std::u32string plain;
        for (size_t i = 0; i < text.size();) plain += static_cast<char32_t>(next_code_point(text, i));
        return plain;
    }();
    std::string word;
    for (char32_t c : chars) {
        const auto cp = static_cast<uint32_t>(c);
        const bool space = is_whitespace(cp);
        if (space || is_punctuation(cp)) {
            if (!word.empty()) encode_word(word, out);
            word.clear();
            if (space) continue;
            utf8::append(word, cp);
            encode_word(word, out);
            word.clear();
            continue;
        }
        utf8::append(word, cp);
    }
    if (!word.empty()) encode_word(word, out);
}

namespace {

// A member that must be there and be true or false.
bool flag(const JsonFields& in, const json& object, const std::string& parent, const std::string& key) {
    const json& value = in.member(object, parent, key);
    if (!value.is_boolean()) in.unsupported(path_of(parent, key), shown(value), "true or false");
    return value.get<bool>();
}

// A member that must be there and be a string.
std::string text_member(const JsonFields& in, const json& object, const std::string& parent, const std::string& key) {
    const json& value = in.member(object, parent, key);
    if (!value.is_string()) in.unsupported(path_of(parent, key), shown(value), "a string");
    return value.get<std::string>();
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_json(std::string_view json_text, const std::string& source,
                                                 const WordPieceSpecialNames& names) {
    const JsonFields in(source, "WordPiece");
    const json root = in.parse_top_level(json_text);
    auto model = std::make_unique<Model>();

    // Hugging Face requires every field of the model; so does Rudder, rather than guess a default.
    const json& wordpiece = in.member(root, "", "model");
    const std::string model_type = in.type_of(wordpiece, "model");
    if (model_type != "WordPiece") in.unsupported("model.type", "\"" + model_type + "\"", "\"WordPiece\"");
    const json& vocab = in.member(wordpiece, "model", "vocab");
    if (!vocab.is_object()) in.unsupported("model.vocab", shown(vocab), "an object {token: id}");
    for (const auto& [text, id] : vocab.items()) {
        if (!id.is_number_integer()) in.unsupported("model.vocab[\"" + text + "\"]", shown(id), "an integer id");
        model->add_token(text, id.get<int64_t>(), source + ": model.vocab");
        model->vocab.emplace(text, id.get<int64_t>());
        model->longest_piece_bytes = std::max(model->longest_piece_bytes, text.size());
    }
    const std::string model_unk = text_member(in, wordpiece, "model", "unk_token");
    const auto word_unk = model->vocab.find(model_unk);
    if (word_unk == model->vocab.end()) {
        throw std::runtime_error(source + ": model.unk_token \"" + model_unk +
                                 "\" is not in model.vocab; WordPiece writes it for words it cannot split");
    }
    model->word_unk = word_unk->second;
    model->prefix = text_member(in, wordpiece, "model", "continuing_subword_prefix");
    const json& max_chars = in.member(wordpiece, "model", "max_input_chars_per_word");
    if (!max_chars.is_number_integer() || max_chars.get<int64_t>() < 0) {
        in.unsupported("model.max_input_chars_per_word", shown(max_chars), "a count of characters");
    }
    model->max_word_chars = max_chars.get<int64_t>();

    const json* normalizer = root.contains("normalizer") ? &root["normalizer"] : nullptr;
    if (normalizer && !normalizer->is_null()) {
        const std::string type = in.type_of(*normalizer, "normalizer");
        if (type != "BertNormalizer") {
            in.unsupported("normalizer.type", "\"" + type + "\"", "\"BertNormalizer\" or a null normalizer");
        }
        model->bert_normalizer = true;
        model->clean_text = flag(in, *normalizer, "normalizer", "clean_text");
        model->chinese_chars = flag(in, *normalizer, "normalizer", "handle_chinese_chars");
        model->lowercase = flag(in, *normalizer, "normalizer", "lowercase");
        // null (or absent) follows lowercase, as in Hugging Face.
        const auto strip = normalizer->find("strip_accents");
        if (strip == normalizer->end() || strip->is_null()) {
            model->strip_accents = model->lowercase;
        } else if (strip->is_boolean()) {
            model->strip_accents = strip->get<bool>();
        } else {
            in.unsupported("normalizer.strip_accents", shown(*strip), "true, false or null");
        }
    }

    const json& pre = in.member(root, "", "pre_tokenizer");
    if (pre.is_null()) in.unsupported("pre_tokenizer", "null", "{\"type\": \"BertPreTokenizer\"}");
    const std::string pre_type = in.type_of(pre, "pre_tokenizer");
    if (pre_type != "BertPreTokenizer") {
        in.unsupported("pre_tokenizer.type", "\"" + pre_type + "\"", "\"BertPreTokenizer\"");
    }

    // Read, not applied: encode returns the text's tokens alone (the header says so).
    if (root.contains("post_processor") && !root["post_processor"].is_null()) {
        const std::string type = in.type_of(root["post_processor"], "post_processor");
        if (type != "TemplateProcessing" && type != "BertProcessing") {
            in.unsupported("post_processor.type", "\"" + type + "\"",
                           "\"TemplateProcessing\", \"BertProcessing\" (read, not applied) or a null post-processor");
        }
    }

    if (root.contains("decoder") && !root["decoder"].is_null()) {
        const json& decoder = root["decoder"];
        const std::string type = in.type_of(decoder, "decoder");
        if (type != "WordPiece") in.unsupported("decoder.type", "\"" + type + "\"", "\"WordPiece\" or a null decoder");
        model->wordpiece_decoder = true;
        model->decoder_prefix = text_member(in, decoder, "decoder", "prefix");
        // Hugging Face's Rust decoder glues every token to the one before when the prefix is empty, its JavaScript
        // one none; Rudder takes neither side.
        if (model->decoder_prefix.empty()) in.unsupported("decoder.prefix", "\"\"", "a non-empty prefix");
        model->cleanup = flag(in, decoder, "decoder", "cleanup");
    }

    // A normalized added token is matched in normalised text; Rudder matches the raw text only.
    in.added_tokens(root, model->bert_normalizer, [&](const std::string& content, int64_t id, const std::string& path) {
        model->add_token(content, id, source + ": " + path);
        model->added_tokens.add(content, id);
    });

    model->pad = model->special_id(source, names.pad, "pad");
    model->unk = model->special_id(source, names.unk.empty() ? model_unk : names.unk, "unk");
    model->mask = model->special_id(source, names.mask, "mask");
    return WordPieceTokenizer(std::move(model));
}

WordPieceTokenizer WordPieceTokenizer::load_json(const std::string& tokenizer_json_path,
                                                 const WordPieceSpecialNames& names) {
    return from_json(read_file(tokenizer_json_path), tokenizer_json_path, names);
}

WordPieceTokenizer WordPieceTokenizer::load_vocab_txt(const std::string& vocab_txt_path, bool lowercase,
                                                      const WordPieceSpecialNames& names) {
    json vocab = json::object();
    std::istringstream lines(read_file(vocab_txt_path));
    std::string line;
    for (int64_t id = 0; std::getline(lines, line); ++id) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const std::string where = vocab_txt_path + ":" + std::to_string(id + 1);
        if (line.empty()) throw std::runtime_error(where + ": empty line; each line is one token, its id the line's");
        if (vocab.contains(line)) {
            throw std::runtime_error(where + ": token \"" + line + "\" is already id " +
                                     std::to_string(vocab[line].get<int64_t>()));
        }
        vocab[line] = id;
    }
    json added = json::array();
    for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
        if (vocab.contains(special)) {
            added.push_back({{"id", vocab[special]}, {"content", special}, {"special", true}, {"normalized", false}});
        }
    }
    const json root = {
        {"model",
         {{"type", "WordPiece"},
          {"vocab", vocab},
          {"unk_token", "[UNK]"},
          {"continuing_subword_prefix", "##"},
          {"max_input_chars_per_word", 100}}},
        {"normalizer",
         {{"type", "BertNormalizer"},
          {"clean_text", true},
          {"handle_chinese_chars", true},
          {"strip_accents", nullptr},
          {"lowercase", lowercase}}},
        {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
        {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
        {"added_tokens", added},
    };
    return from_json(root.dump(), vocab_txt_path, names);
}

WordPieceTokenizer::WordPieceTokenizer(std::unique_ptr<Model> model) : model_(std::move(model)) {}
WordPieceTokenizer::WordPieceTokenizer(WordPieceTokenizer&&) noexcept = default;
WordPieceTokenizer& WordPieceTokenizer::operator=(WordPieceTokenizer&&) noexcept = default;
WordPieceTokenizer::~WordPieceTokenizer() = default;

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view raw) const {
    // Added tokens first, in the raw text; the text between them is normalised, split into words and pieces.
    return model_->added_tokens.encode(
        replace_invalid_utf8(raw),
        [&](std::string_view plain, std::vector<int64_t>& out) { model_->encode_plain(plain, out); });
}

std::string WordPieceTokenizer::piece(int64_t id, bool first) const {
    const std::string& text = token(id);
    // Hugging Face's WordPiece decoder, token by token: the first as it is, then a continuation without its prefix and
    // any other token after a space; the clean-up applies to each token so made.
    std::string piece;
    if (first) {
        piece = text;
    } else if (model_->wordpiece_decoder &&
               text.compare(0, model_->decoder_prefix.size(), model_->decoder_prefix) == 0) {
        piece = text.substr(model_->decoder_prefix.size());
    } else {
        piece = " " + text;
    }
    return model_->cleanup ? clean_up(std::move(piece)) : piece;
}

std::string WordPieceTokenizer::decode(const int64_t* ids, int64_t n) const {
    std::string out;
    for (int64_t k = 0; k < n; ++k) {
        if (model_->pad >= 0 && ids[k] == model_->pad) break;
        out += piece(ids[k], k == 0);
    }
    return out;
}

std::optional<TokenPieces> WordPieceTokenizer::pieces() const {
    TokenPieces out;
    out.text.assign(2, std::vector<std::string>(static_cast<size_t>(vocab_size())));
    for (int64_t v = 0; v < vocab_size(); ++v) {
        out.text[0][static_cast<size_t>(v)] = piece(v, true);
        out.text[1][static_cast<size_t>(v)] = piece(v, false);
    }
    out.kind_after.assign(static_cast<size_t>(vocab_size()), 1);
    return out;
}

int64_t WordPieceTokenizer::vocab_size() const { return static_cast<int64_t>(model_->tokens.size()); }

const std::string& WordPieceTokenizer::token(int64_t id) const { return model_->token_at(id, "WordPiece"); }

int64_t WordPieceTokenizer::pad_id() const { return model_->pad; }
int64_t WordPieceTokenizer::unk_id() const { return model_->unk; }
int64_t WordPieceTokenizer::mask_id() const { return model_->mask; }

int64_t WordPieceTokenizer::id(const std::string& token) const { return model_->id_of(token); }

}  // namespace rudder
