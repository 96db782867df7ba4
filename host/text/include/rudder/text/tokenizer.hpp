// Tokenizers: text <-> token ids. A model directory records which one it uses ("tokenizer" in config.json).
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rudder {

// The decoded text of a token sequence as the concatenation of per-token pieces: token v adds `text[k][v]` after a
// token that left kind k (kind 0 at the start of the text) and leaves kind `kind_after[v]`. A word-level decoder puts
// spaces between words but not after "(" nor before punctuation: three kinds; a byte-level BPE decoder has one. For
// the structured-output controllers, which follow the text a sequence spells through an automaton.
struct TokenPieces {
    std::vector<std::vector<std::string>> text;  // [kinds][vocab_size]
    std::vector<int32_t> kind_after;             // [vocab_size]
    int32_t kinds() const { return static_cast<int32_t>(text.size()); }
    // The text `n` ids spell, up to the first `end` token (the pad; -1: none).
    std::string spell(const int64_t* ids, int64_t n, int64_t end = -1) const;
};

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    // Text to ids; words not in the vocabulary map to unk_id(). Never emits pad or mask, except that a BPE
    // tokenizer encodes an added token written in the text as its id, as Hugging Face does (bpe_tokenizer.hpp).
    virtual std::vector<int64_t> encode(std::string_view text) const = 0;
    // Ids to text; stops at the first pad_id(); mask shows as "<mask>".
    virtual std::string decode(const int64_t* ids, int64_t n) const = 0;
    virtual int64_t vocab_size() const = 0;
    // The text of one token; throws std::out_of_range for a bad id.
    virtual const std::string& token(int64_t id) const = 0;
    virtual int64_t pad_id() const = 0;
    virtual int64_t unk_id() const = 0;
    virtual int64_t mask_id() const = 0;
    // The "type" written to config.json ("word", "bpe").
    virtual std::string type() const = 0;
    // decode() as pieces (TokenPieces): for ids before the first pad, decode(ids) is the concatenation of their pieces
    // in turn, as long as it is valid UTF-8 (a byte-level BPE decode replaces invalid sequences). std::nullopt for a
    // tokenizer whose decoding is not such a concatenation.
    virtual std::optional<TokenPieces> pieces() const { return std::nullopt; }
};

// Word-level tokenizer, as Diffusion-LM used on E2E: words and punctuation marks are separate tokens, case is
// kept. Ids 0, 1, 2 are <pad>, <unk>, <mask>; then the vocabulary in file order.
class WordTokenizer final : public Tokenizer {
public:
    static constexpr const char* kPad = "<pad>";
    static constexpr const char* kUnk = "<unk>";
    static constexpr const char* kMask = "<mask>";

    // Vocabulary of every word appearing at least `min_count` times in `lines`, most frequent first (ties by
    // text, so the result is deterministic).
    static WordTokenizer build(const std::vector<std::string>& lines, int64_t min_count = 1);
    // Vocabulary of the given words, taken as they are (no splitting): every word appearing at least `min_count`
    // times, most frequent first (ties by text). Words must be non-empty and hold no whitespace. The tagger and
    // parser use it for their word tables (see rudder/text/words.hpp, word_key).
    static WordTokenizer from_words(const std::vector<std::string>& words, int64_t min_count = 1);
    // One token per line; the first three lines must be <pad>, <unk>, <mask>. Throws std::runtime_error naming
    // the file and line on a bad file.
    static WordTokenizer load(const std::string& vocab_path);
    // The same from a stream; `vocab_path` names the source in messages.
    static WordTokenizer read(std::istream& in, const std::string& vocab_path);
    void save(const std::string& vocab_path) const;

    // Splits text into words and punctuation (no lookup): "shop." -> {"shop", "."}.
    static std::vector<std::string> split(std::string_view text);

    std::vector<int64_t> encode(std::string_view text) const override;
    // The id of one word as it is (no splitting); unk_id() if it is not in the vocabulary.
    int64_t id(const std::string& word) const;
    std::string decode(const int64_t* ids, int64_t n) const override;
    int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
    const std::string& token(int64_t id) const override;
    int64_t pad_id() const override { return 0; }
    int64_t unk_id() const override { return 1; }
    int64_t mask_id() const override { return 2; }
    std::string type() const override { return "word"; }
    // Kinds: 0 at the start, 1 after a word (a space before the next, unless it attaches left: punctuation, "'s"),
    // 2 after "(" (no space).
    std::optional<TokenPieces> pieces() const override;

private:
    explicit WordTokenizer(std::vector<std::string> tokens);
    static WordTokenizer from_counts(const std::map<std::string, int64_t>& counts, int64_t min_count,
                                     const char* caller);
    std::vector<std::string> tokens_;
    std::unordered_map<std::string, int64_t> index_;
};

// A tokenizer and one token more, after its vocabulary, as the mask (id = the tokenizer's vocab_size()): for models
// whose mask is not a token of their tokenizer's files, as MDLM's and SEDD's GPT-2 checkpoints (GPT-2's 50,257
// tokens, then the mask). Encoding is the tokenizer's (it never emits the mask); decoding writes the mask as
// `mask_text` and stops at the first pad_id(), as every tokenizer does.
class WithMaskToken final : public Tokenizer {
public:
    explicit WithMaskToken(std::shared_ptr<const Tokenizer> tokenizer, std::string mask_text = "<mask>");

    std::vector<int64_t> encode(std::string_view text) const override { return tokenizer_->encode(text); }
    std::string decode(const int64_t* ids, int64_t n) const override;
    int64_t vocab_size() const override { return tokenizer_->vocab_size() + 1; }
    const std::string& token(int64_t id) const override;
    int64_t pad_id() const override { return tokenizer_->pad_id(); }
    int64_t unk_id() const override { return tokenizer_->unk_id(); }
    int64_t mask_id() const override { return tokenizer_->vocab_size(); }
    std::string type() const override { return tokenizer_->type(); }
    // The tokenizer's, and the mask as `mask_text`, after which the text goes on as at its start.
    std::optional<TokenPieces> pieces() const override;

private:
    std::shared_ptr<const Tokenizer> tokenizer_;
    std::string mask_text_;
};

}  // namespace rudder
