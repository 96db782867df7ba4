// WordPiece, as BERT uses it (and so UDLM's LM1B checkpoints, with bert-base-uncased's vocabulary), matching Hugging
// Face's tokenizers token for token on such files. What a tokenizer.json may hold is in docs/tokenizers.md; anything
// else is refused with its JSON path rather than tokenized differently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rudder/text/tokenizer.hpp>

namespace rudder {

// The ids the Tokenizer interface asks for, by token text, as BpeSpecialNames: a tokenizer.json does not say which
// token pads or masks (the model's config does); an empty name means none (id -1), and a name must be a token of the
// file. unk defaults to the file's model.unk_token.
struct WordPieceSpecialNames {
    std::string pad;
    std::string unk;
    std::string mask;
};

class WordPieceTokenizer final : public Tokenizer {
public:
    // A Hugging Face tokenizer.json. Throws std::runtime_error naming the file and the JSON path of anything it
    // does not support. A post-processor (BERT's TemplateProcessing "[CLS] $A [SEP]") is read but not applied:
    // encode never adds [CLS] or [SEP]; a model that wants them puts them in itself.
    static WordPieceTokenizer load_json(const std::string& tokenizer_json_path,
                                        const WordPieceSpecialNames& names = {});
    // The same from the file's text; `source` names it in messages.
    static WordPieceTokenizer from_json(std::string_view json_text, const std::string& source,
                                        const WordPieceSpecialNames& names = {});
    // BERT's original vocab.txt: one token per line, the id its line number from 0. With BERT's settings around it:
    // BertNormalizer (lowercasing and stripping accents when `lowercase`), BertPreTokenizer, unk "[UNK]", "##" before
    // continuations, words of at most 100 characters, the WordPiece decoder with its clean-up; those of [PAD], [UNK],
    // [CLS], [SEP], [MASK] that the file has are matched whole in the text, as tokenizer.json's added tokens are.
    static WordPieceTokenizer load_vocab_txt(const std::string& vocab_txt_path, bool lowercase = true,
                                             const WordPieceSpecialNames& names = {});

    WordPieceTokenizer(WordPieceTokenizer&&) noexcept;
    WordPieceTokenizer& operator=(WordPieceTokenizer&&) noexcept;
    ~WordPieceTokenizer() override;

    // UTF-8 text to ids, as Hugging Face's tokenizers (Rust) encode: added tokens in the text ("[MASK]") become
    // their ids, so this can emit pad or mask; the rest is normalised (BertNormalizer), split into words and
    // punctuation (BertPreTokenizer) and each word into the longest vocabulary pieces from its start, or [UNK] for a
    // word with no such split or longer than max_input_chars_per_word. Invalid UTF-8 is read as BpeTokenizer::encode
    // reads it (each maximal invalid subsequence one U+FFFD), which BertNormalizer's clean_text then drops.
    std::vector<int64_t> encode(std::string_view text) const override;
    // Ids to text as the file's decoder writes them: tokens joined by spaces, a continuation ("##ing") glued to the
    // token before without its prefix, and with the decoder's cleanup the spaces before punctuation and
    // contractions dropped (" ." -> ".", " n't" -> "n't"). Special tokens show as their text ("[MASK]"), as Hugging
    // Face's decode does without skip_special_tokens. Stops at the first pad_id().
    std::string decode(const int64_t* ids, int64_t n) const override;
    // One more than the largest id of the vocabulary and the added tokens.
    int64_t vocab_size() const override;
    // The token as the file writes it ("##ing"). Throws std::out_of_range for an id outside the file's tokens.
    const std::string& token(int64_t id) const override;
    int64_t pad_id() const override;
    int64_t unk_id() const override;
    int64_t mask_id() const override;
    std::string type() const override { return "wordpiece"; }
    // Kinds: 0 at the start (the token as it is), 1 after a token (a continuation without its prefix, any other after
    // a space), each cleaned up as decode() does.
    std::optional<TokenPieces> pieces() const override;

    // The id of a token as the file writes it; -1 if there is none.
    int64_t id(const std::string& token) const;

    // Defined in wordpiece_tokenizer.cpp.
    struct Model;

private:
    explicit WordPieceTokenizer(std::unique_ptr<Model> model);
    // The text token `id` adds to a decoded text, first or after another token.
    std::string piece(int64_t id, bool first) const;
    std::unique_ptr<Model> model_;
};

}  // namespace rudder
