// Byte-level BPE, as GPT-2 (MDLM, SEDD) and Qwen2/2.5 (Dream) use it, matching Hugging Face's tokenizers token for
// token on the files those models ship. What a tokenizer.json may hold is in docs/tokenizers.md; anything else is
// refused with its JSON path rather than tokenized differently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <rudder/text/tokenizer.hpp>
#include <rudder/text/utf8.hpp>  // replace_invalid_utf8, which decode() applies

namespace rudder {

// The ids the Tokenizer interface asks for, by token text. A BPE file does not say which token pads or masks (the
// model's config does), so they are given here; an empty name means none (id -1). A name must be a token of the
// file. unk defaults to the file's model.unk_token when that is set.
struct BpeSpecialNames {
    std::string pad;
    std::string unk;
    std::string mask;
};

class BpeTokenizer final : public Tokenizer {
public:
    // A Hugging Face tokenizer.json. Throws std::runtime_error naming the file and the JSON path of anything it
    // does not support.
    static BpeTokenizer load_json(const std::string& tokenizer_json_path, const BpeSpecialNames& names = {});
    // The same from the file's text; `source` names it in messages.
    static BpeTokenizer from_json(std::string_view json_text, const std::string& source,
                                  const BpeSpecialNames& names = {});
    // GPT-2's original pair: vocab.json ({token: id}) and merges.txt ("a b" a line, an optional "#version" first
    // line), pre-split with GPT-2's regex, no normaliser. `special_tokens` are matched whole before the split, as
    // tokenizer.json's added tokens are; each must be in the vocabulary.
    static BpeTokenizer load_vocab_merges(const std::string& vocab_json_path, const std::string& merges_txt_path,
                                          const std::vector<std::string>& special_tokens = {"<|endoftext|>"},
                                          const BpeSpecialNames& names = {});

    BpeTokenizer(BpeTokenizer&&) noexcept;
    BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
    ~BpeTokenizer() override;

    // UTF-8 text to ids. Added tokens written in the text ("<|endoftext|>") become their ids, as in Hugging Face,
    // so this can emit pad or mask when they are added tokens. Invalid UTF-8 is read as a browser's TextDecoder
    // reads it: each maximal invalid subsequence becomes U+FFFD, then encoded like any other character.
    std::vector<int64_t> encode(std::string_view text) const override;
    // Ids to UTF-8 text: token bytes concatenated, added tokens as their text, and byte sequences that are not
    // UTF-8 (a token boundary inside a character) replaced by U+FFFD as above; stops at the first pad_id(). No
    // clean-up of spaces before punctuation, so decode(encode(text)) == text for valid UTF-8.
    std::string decode(const int64_t* ids, int64_t n) const override;
    // One more than the largest id of the vocabulary and the added tokens.
    int64_t vocab_size() const override;
    // The token as the file writes it: byte-level characters for vocabulary entries ("Ġworld"), the text for added
    // tokens. Throws std::out_of_range for an id outside the file's tokens.
    const std::string& token(int64_t id) const override;
    int64_t pad_id() const override;
    int64_t unk_id() const override;
    int64_t mask_id() const override;
    std::string type() const override { return "bpe"; }
    // One kind: each token's bytes (an added token's text as it is).
    std::optional<TokenPieces> pieces() const override;

    // The id of a token as the file writes it; -1 if there is none.
    int64_t id(const std::string& token) const;

    // Defined in bpe_tokenizer.cpp; named here so that the file's readers there can fill it.
    struct Model;

private:
    explicit BpeTokenizer(std::unique_ptr<Model> model);
    // The bytes token `id` decodes to: its characters mapped back through the byte alphabet (an added token's text
    // as it is).
    std::string token_bytes(int64_t id) const;
    std::unique_ptr<Model> model_;
};

}  // namespace rudder
