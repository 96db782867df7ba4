#include <rudder/text/bpe_tokenizer.hpp>

#include <rudder/rudder_json.hpp>

#include "tokenizer_internal.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <functional>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace rudder {

namespace {

using json = nlohmann::json;
using tokenizer_internal::JsonFields;
using tokenizer_internal::path_of;
using tokenizer_internal::read_file;
using utf8::next_code_point;

// GPT-2's pre-split, which a ByteLevel pre-tokenizer with use_regex applies (and Hugging Face's Rust crate too).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Words longer than this are encoded without the cache: they are rare, and would crowd out the common ones.
constexpr size_t kCachedWordBytes = 64;
constexpr size_t kCacheEntries = 1 << 16;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for U+0100 onwards, so that
// every byte is a visible character in vocab.json.
struct ByteAlphabet {
    std::string char_of[256];
    std::unordered_map<uint32_t, unsigned char> byte_of;

    ByteAlphabet() {
        uint32_t next_extra = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const uint32_t cp = printable ? static_cast<uint32_t>(b) : next_extra++;
            utf8::append(char_of[b], cp);
            byte_of.emplace(cp, static_cast<unsigned char>(b));
        }
    }
};

const ByteAlphabet& byte_alphabet() {
    static const ByteAlphabet alphabet;
    return alphabet;
}

// A compiled PCRE2 pattern in UTF + UCP mode (\p{L}, \s over Unicode), JIT-compiled where the library can.
class Regex {
public:
    Regex(const std::string& pattern, const std::string& where) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
        if (!code_) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            throw std::runtime_error(where + ": the regex does not compile with PCRE2 at offset " +
                                     std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // without JIT, matching is slower but the same
    }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    ~Regex() { pcre2_code_free(code_); }

    // Splits `text` (valid UTF-8) into the matches and the text between them, in order, as Hugging Face's Split
    // with behavior "Isolated" does.
    void split_isolated(std::string_view text, std::vector<std::string_view>& out) const {
        pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
        const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t start = 0;
        size_t emitted = 0;
        while (start < text.size()) {
            const int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                pcre2_match_data_free(match);
                PCRE2_UCHAR message[256];
                pcre2_get_error_message(rc, message, sizeof message);
                throw std::runtime_error(std::string("BPE pre-split regex failed: ") +
                                         reinterpret_cast<const char*>(message));
            }
            const PCRE2_SIZE* bounds = pcre2_get_ovector_pointer(match);
            const size_t begin = bounds[0];
            const size_t end = bounds[1];
            if (begin > emitted) out.push_back(text.substr(emitted, begin - emitted));
            if (end > begin) {
                out.push_back(text.substr(begin, end - begin));
                emitted = end;
                start = end;
            } else {
                // An empty match splits nothing; step over one character.
                size_t next = begin;
                next_code_point(text, next);
                start = next;
            }
        }
        pcre2_match_data_free(match);
        if (emitted < text.size()) out.push_back(text.substr(emitted));
    }

private:
    pcre2_code* code_ = nullptr;
};

}  // namespace

struct BpeTokenizer::Model : tokenizer_internal::TokenTable {
    std::vector<bool> is_added;  // by id
    int64_t byte_id[256] = {};
    // (left id << 32 | right id) -> (rank, merged id).
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
    tokenizer_internal::AddedTokenSplitter added_tokens;
    bool nfc = false;
    // model.ignore_merges (Llama 3's tokenizer): a piece that is itself a token of the vocabulary is that token,
    // whatever the merges would make of it.
    bool ignore_merges = false;
    std::vector<std::unique_ptr<Regex>> splits;  // applied in order, each to the pieces of the one before
    int64_t pad = -1, unk = -1, mask = -1;

    mutable std::mutex cache_mutex;
    mutable std::unordered_map<std::string, std::vector<int64_t>> cache;

    void add_token(const std::string& text, int64_t id, bool added, const std::string& where);
    void finish(const std::string& source, const std::string& model_unk, const BpeSpecialNames& names);
    void encode_word(std::string_view word, std::vector<int64_t>& out) const;
    void encode_plain(std::string_view text, std::vector<int64_t>& out) const;
};

void BpeTokenizer::Model::add_token(const std::string& text, int64_t id, bool added, const std::string& where) {
    TokenTable::add_token(text, id, where);
    is_added.resize(tokens.size(), false);
    if (added) {
        is_added[static_cast<size_t>(id)] = true;
        added_tokens.add(text, id);
    }
}

void BpeTokenizer::Model::finish(const std::string& source, const std::string& model_unk,
                                 const BpeSpecialNames& names) {
    const ByteAlphabet& alphabet = byte_alphabet();
    for (int b = 0; b < 256; ++b) {
        const auto found = ids.find(alphabet.char_of[b]);
        // Every byte must have a token, or some text would have no encoding; the files refused here would need
        // an unk or byte fallback, which Rudder does not implement.
        if (found == ids.end()) {
            throw std::runtime_error(source + ": the vocabulary has no token for byte " + std::to_string(b) + " (\"" +
                                     alphabet.char_of[b] + "\"); byte-level BPE needs all 256");
        }
        byte_id[b] = found->second;
    }
    pad = special_id(source, names.pad, "pad");
    unk = special_id(source, names.unk.empty() ? model_unk : names.unk, "unk");
    mask = special_id(source, names.mask, "mask");
}

void BpeTokenizer::Model::encode_word(std::string_view word, std::vector<int64_t>& out) const {
    const bool cacheable = word.size() <= kCachedWordBytes;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex);
        const auto found = cache.find(std::string(word));
        if (found != cache.end()) {
            out.insert(out.end(), found->second.begin(), found->second.end());
            return;
        }
    }
    if (ignore_merges) {
        const ByteAlphabet& alphabet = byte_alphabet();
        std::string spelled;
        for (unsigned char b : word) spelled += alphabet.char_of[b];
        const auto found = ids.find(spelled);
        if (found != ids.end() && !is_added[static_cast<size_t>(found->second)]) {
            out.push_back(found->second);
            return;
        }
    }
    // Merge the lowest-ranked adjacent pair, the leftmost of equals, until no pair has a merge: the order both
    // GPT-2's bpe() and Hugging Face's merge queue produce. A heap of candidate pairs keeps long pieces (a line of
    // CJK without spaces is one) at n log n; a popped pair whose symbols have changed since is stale and skipped.
    const size_t n = word.size();
    std::vector<int32_t> symbol(n);
    std::vector<size_t> next(n), prev(n);
    constexpr size_t kNone = std::numeric_limits<size_t>::max();
    for (size_t i = 0; i < n; ++i) {
        symbol[i] = static_cast<int32_t>(byte_id[static_cast<unsigned char>(word[i])]);
        next[i] = i + 1 < n ? i + 1 : kNone;
        prev[i] = i > 0 ? i - 1 : kNone;
    }
    struct Candidate {
        int32_t rank;
        size_t left;  // the index of the pair's left symbol, which orders pairs from left to right
        int32_t left_id, right_id, merged;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::vector<Candidate> heap;
    auto push = [&](size_t left) {
        const size_t right = next[left];
        if (right == kNone) return;
        const uint64_t key = static_cast<uint64_t>(symbol[left]) << 32 | static_cast<uint32_t>(symbol[right]);
        const auto found = merges.find(key);
        if (found == merges.end()) return;
        heap.push_back({found->second.first, left, symbol[left], symbol[right], found->second.second});
        std::push_heap(heap.begin(), heap.end(), std::greater<Candidate>());
    };
    for (size_t i = 0; i + 1 < n; ++i) push(i);
    std::vector<bool> alive(n, true);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<Candidate>());
        const Candidate c = heap.back();
        heap.pop_back();
        const size_t right = next[c.left];
        if (!alive[c.left] || right == kNone || symbol[c.left] != c.left_id || symbol[right] != c.right_id) continue;
        symbol[c.left] = c.merged;
        alive[right] = false;
        next[c.left] = next[right];
        if (next[right] != kNone) prev[next[right]] = c.left;
        if (prev[c.left] != kNone) push(prev[c.left]);
        push(c.left);
    }
    const size_t first = out.size();
    for (size_t i = 0; i != kNone && n > 0; i = next[i]) out.push_back(symbol[i]);
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex);
        if (cache.size() >= kCacheEntries) cache.clear();
        cache.emplace(std::string(word),
                      std::vector<int64_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
}

void BpeTokenizer::Model::encode_plain(std::string_view text, std::vector<int64_t>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc && !utf8::is_ascii(text)) {
        utf8proc_uint8_t* composed = nullptr;
        const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                                static_cast<utf8proc_ssize_t>(text.size()), &composed,
                                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (n < 0) throw std::runtime_error(std::string("NFC normalisation failed: ") + utf8proc_errmsg(n));
        normalized.assign(reinterpret_cast<const char*>(composed), static_cast<size_t>(n));
        std::free(composed);
        text = normalized;
    }
    std::vector<std::string_view> pieces{text};
    std::vector<std::string_view> next;
    for (const auto& split : splits) {
        next.clear();
        for (std::string_view piece : pieces) split->split_isolated(piece, next);
        pieces.swap(next);
    }
    for (std::string_view piece : pieces) encode_word(piece, out);
}

namespace {

using json_input::shown;  // a value in a message, cut short

// One pre-tokenizer; appends its split regex, if it has one. ByteLevel must come last: the byte-level characters it
// makes are what the BPE model reads.
void read_pre_tokenizer(const JsonFields& in, const json& pre, const std::string& path, bool last,
                        BpeTokenizer::Model& model) {
    const std::string type = in.type_of(pre, path);
    if (type == "ByteLevel") {
        if (!last) in.unsupported(path, "a ByteLevel before other pre-tokenizers", "ByteLevel last");
        in.expect_member(pre, path, "add_prefix_space", {false}, "false");
        const auto use_regex = pre.find("use_regex");
        // Hugging Face's default for use_regex is true.
        if (use_regex == pre.end() || use_regex->is_null() || *use_regex == true) {
            model.splits.push_back(std::make_unique<Regex>(kGpt2Pattern, in.source() + ": " + path));
        } else if (*use_regex != false) {
            in.unsupported(path_of(path, "use_regex"), shown(*use_regex), "true or false");
        }
        return;
    }
    if (last) in.unsupported(path, "\"" + type + "\" last", "a ByteLevel pre-tokenizer last");
    if (type == "Split") {
        in.expect_member(pre, path, "behavior", {"Isolated"}, "\"Isolated\"");
        in.expect_member(pre, path, "invert", {false}, "false");
        const json& pattern = in.member(pre, path, "pattern");
        const std::string pattern_path = path_of(path, "pattern");
        if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string() ||
            pattern.size() != 1) {
            in.unsupported(pattern_path, shown(pattern), "{\"Regex\": \"...\"}");
        }
        model.splits.push_back(
            std::make_unique<Regex>(pattern["Regex"].get<std::string>(), in.source() + ": " + pattern_path));
        return;
    }
    in.unsupported(path_of(path, "type"), "\"" + type + "\"", "ByteLevel, Split, and a Sequence of them");
}

}  // namespace

BpeTokenizer BpeTokenizer::from_json(std::string_view json_text, const std::string& source,
                                     const BpeSpecialNames& names) {
    const JsonFields in(source, "BPE");
    const json root = in.parse_top_level(json_text);
    auto model = std::make_unique<Model>();

    const json& bpe = in.member(root, "", "model");
    const std::string model_type = in.type_of(bpe, "model");
    if (model_type != "BPE") in.unsupported("model.type", "\"" + model_type + "\"", "\"BPE\"");
    in.expect_member(bpe, "model", "dropout", {}, "null (no BPE dropout)");
    in.expect_member(bpe, "model", "byte_fallback", {false}, "false");
    in.expect_member(bpe, "model", "ignore_merges", {false, true}, "true or false");
    const auto ignore_merges = bpe.find("ignore_merges");
    model->ignore_merges = ignore_merges != bpe.end() && *ignore_merges == true;
    in.expect_member(bpe, "model", "continuing_subword_prefix", {""}, "\"\" or null");
    in.expect_member(bpe, "model", "end_of_word_suffix", {""}, "\"\" or null");
    std::string model_unk;
    if (bpe.contains("unk_token") && !bpe["unk_token"].is_null()) {
        if (!bpe["unk_token"].is_string())
            in.unsupported("model.unk_token", shown(bpe["unk_token"]), "a string or null");
        model_unk = bpe["unk_token"].get<std::string>();
    }
    const json& vocab = in.member(bpe, "model", "vocab");
    if (!vocab.is_object()) in.unsupported("model.vocab", shown(vocab), "an object {token: id}");
    for (const auto& [text, id] : vocab.items()) {
        if (!id.is_number_integer()) in.unsupported("model.vocab[\"" + text + "\"]", shown(id), "an integer id");
        model->add_token(text, id.get<int64_t>(), false, source + ": model.vocab");
    }
    const json& merges = in.member(bpe, "model", "merges");
    if (!merges.is_array()) in.unsupported("model.merges", shown(merges), "an array");
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const json& merge = merges[rank];
        const std::string path = "model.merges[" + std::to_string(rank) + "]";
        std::string left, right;
        if (merge.is_string()) {
            const std::string text = merge.get<std::string>();
            const size_t space = text.find(' ');
            if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
                in.unsupported(path, shown(merge), "\"left right\" with one space");
            }
            left = text.substr(0, space);
            right = text.substr(space + 1);
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
            left = merge[0].get<std::string>();
            right = merge[1].get<std::string>();
        } else {
            in.unsupported(path, shown(merge), "\"left right\" or [\"left\", \"right\"]");
        }
        const auto l = model->ids.find(left), r = model->ids.find(right), m = model->ids.find(left + right);
        if (l == model->ids.end() || r == model->ids.end() || m == model->ids.end()) {
            throw std::runtime_error(source + ": " + path + " merges \"" + left + "\" and \"" + right +
                                     "\", but the vocabulary lacks one of them or their merge");
        }
        const uint64_t key = static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second);
        // The first (lowest-ranked) of a repeated merge wins, as in Hugging Face.
        model->merges.emplace(key, std::make_pair(static_cast<int32_t>(rank), static_cast<int32_t>(m->second)));
    }

    const json* normalizer = root.contains("normalizer") ? &root["normalizer"] : nullptr;
    if (normalizer && !normalizer->is_null()) {
        const std::string type = in.type_of(*normalizer, "normalizer");
        if (type != "NFC") in.unsupported("normalizer.type", "\"" + type + "\"", "\"NFC\" or a null normalizer");
        model->nfc = true;
    }

    const json& pre = in.member(root, "", "pre_tokenizer");
    if (pre.is_null())
        in.unsupported("pre_tokenizer", "null", "ByteLevel, or a Sequence of Splits ending in ByteLevel");
    if (in.type_of(pre, "pre_tokenizer") == "Sequence") {
        const json& steps = in.member(pre, "pre_tokenizer", "pretokenizers");
        if (!steps.is_array() || steps.empty())
            in.unsupported("pre_tokenizer.pretokenizers", shown(steps), "a non-empty array");
        for (size_t i = 0; i < steps.size(); ++i) {
            read_pre_tokenizer(in, steps[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]",
                               i + 1 == steps.size(), *model);
        }
    } else {
        read_pre_tokenizer(in, pre, "pre_tokenizer", true, *model);
    }

    const json& decoder = in.member(root, "", "decoder");
    if (decoder.is_null() || in.type_of(decoder, "decoder") != "ByteLevel") {
        in.unsupported("decoder", shown(decoder), "{\"type\": \"ByteLevel\"}");
    }
    // The ByteLevel post-processor only trims offsets, which Rudder does not report; templates would add tokens.
    if (root.contains("post_processor") && !root["post_processor"].is_null() &&
        in.type_of(root["post_processor"], "post_processor") != "ByteLevel") {
        in.unsupported("post_processor.type", shown(root["post_processor"]["type"]),
                       "\"ByteLevel\" or a null post-processor (no added BOS/EOS templates)");
    }

    // A normalized added token is matched in normalised text; without a normaliser that is the text itself.
    in.added_tokens(root, model->nfc, [&](const std::string& content, int64_t id, const std::string& path) {
        model->add_token(content, id, true, source + ": " + path);
    });
    model->finish(source, model_unk, names);
    return BpeTokenizer(std::move(model));
}

BpeTokenizer BpeTokenizer::load_json(const std::string& tokenizer_json_path, const BpeSpecialNames& names) {
    return from_json(read_file(tokenizer_json_path), tokenizer_json_path, names);
}

BpeTokenizer BpeTokenizer::load_vocab_merges(const std::string& vocab_json_path, const std::string& merges_txt_path,
                                             const std::vector<std::string>& special_tokens,
                                             const BpeSpecialNames& names) {
    json vocab;
    try {
        vocab = json::parse(read_file(vocab_json_path));
    } catch (const json::exception& e) {  // a syntax error, or a number out of range (406)
        throw std::runtime_error(vocab_json_path + ": not JSON: " + e.what());
    }
    std::vector<json> merges;
    std::istringstream lines(read_file(merges_txt_path));
    std::string line;
    for (int64_t number = 1; std::getline(lines, line); ++number) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (number == 1 && line.rfind("#version", 0) == 0) continue;
        if (line.empty()) continue;
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
            throw std::runtime_error(merges_txt_path + ":" + std::to_string(number) +
                                     ": expected two tokens separated by one space");
        }
        merges.emplace_back(line);
    }
    json added = json::array();
    for (const std::string& special : special_tokens) {
        if (!vocab.is_object() || !vocab.contains(special)) {
            throw std::runtime_error(vocab_json_path + ": the special token \"" + special +
                                     "\" is not in the vocabulary");
        }
        added.push_back({{"id", vocab[special]}, {"content", special}, {"special", true}});
    }
    const json root = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"added_tokens", added},
    };
    return from_json(root.dump(), vocab_json_path + " + " + merges_txt_path, names);
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Model> model) : model_(std::move(model)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

std::vector<int64_t> BpeTokenizer::encode(std::string_view raw) const {
    // Added tokens first; the text between them is normalised, pre-split and merged.
    return model_->added_tokens.encode(
        replace_invalid_utf8(raw),
        [&](std::string_view plain, std::vector<int64_t>& out) { model_->encode_plain(plain, out); });
}

std::string BpeTokenizer::token_bytes(int64_t id) const {
    const ByteAlphabet& alphabet = byte_alphabet();
    const std::string& text = token(id);
    if (model_->is_added[static_cast<size_t>(id)]) return text;
    std::string bytes;
    for (size_t i = 0; i < text.size();) {
        const size_t start = i;
        const uint32_t cp = next_code_point(text, i);
        const auto found = alphabet.byte_of.find(cp);
        // A character outside the byte alphabet (not in GPT-2's or Qwen's files) stands for itself.
        if (found != alphabet.byte_of.end()) {
            bytes += static_cast<char>(found->second);
        } else {
            bytes.append(text, start, i - start);
        }
    }
    return bytes;
}

std::string BpeTokenizer::decode(const int64_t* ids, int64_t n) const {
    std::string bytes;
    for (int64_t k = 0; k < n; ++k) {
        if (model_->pad >= 0 && ids[k] == model_->pad) break;
        bytes += token_bytes(ids[k]);
    }
    return replace_invalid_utf8(bytes);
}

std::optional<TokenPieces> BpeTokenizer::pieces() const {
    TokenPieces out;
    out.text.resize(1);
    out.text[0].reserve(static_cast<size_t>(vocab_size()));
    for (int64_t v = 0; v < vocab_size(); ++v) out.text[0].push_back(token_bytes(v));
    out.kind_after.assign(static_cast<size_t>(vocab_size()), 0);
    return out;
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(model_->tokens.size()); }

const std::string& BpeTokenizer::token(int64_t id) const { return model_->token_at(id, "BPE"); }

int64_t BpeTokenizer::pad_id() const { return model_->pad; }
int64_t BpeTokenizer::unk_id() const { return model_->unk; }
int64_t BpeTokenizer::mask_id() const { return model_->mask; }

int64_t BpeTokenizer::id(const std::string& token) const { return model_->id_of(token); }

}  // namespace rudder
