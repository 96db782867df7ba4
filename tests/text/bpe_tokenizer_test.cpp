#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/text/bpe_tokenizer.hpp>

#include "byte_level_alphabet.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int64_t>;

using testing::byte_char;

// A small GPT-2-style file: byte b is id b, then "he" 256, "ll" 257, "hell" 258, "Ġw" 259, "o" merges nothing more;
// "<|end|>" 260 and "<|end|>x" 261 are added tokens.
json small_file() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    vocab["he"] = 256;
    vocab["ll"] = 257;
    vocab["hell"] = 258;
    vocab["Ġw"] = 259;
    return {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens",
         {{{"id", 260},
           {"content", "<|end|>"},
           {"single_word", false},
           {"lstrip", false},
           {"rstrip", false},
           {"normalized", false},
           {"special", true}},
          {{"id", 261}, {"content", "<|end|>x"}, {"special", false}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"byte_fallback", false},
          {"vocab", vocab},
          // "l l" ranks before "h e", so "hell" is h e + ll, then he + ll.
          {"merges", {"l l", "h e", "he ll", "Ġ w"}}}},
    };
}

BpeTokenizer load(const json& file, const BpeSpecialNames& names = {}) {
    return BpeTokenizer::from_json(file.dump(), "small.json", names);
}

// Expects loading `file` to throw std::runtime_error whose message contains every one of `parts`.
void expect_refused(const json& file, const std::vector<std::string>& parts) {
    try {
        load(file);
        ADD_FAILURE() << "loaded, expected a refusal mentioning " << parts.front();
    } catch (const std::runtime_error& e) {
        for (const std::string& part : parts)
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
}

TEST(BpeTokenizer, MergesByRank) {
    const BpeTokenizer tok = load(small_file());
    EXPECT_EQ(tok.type(), "bpe");
    EXPECT_EQ(tok.vocab_size(), 262);
    EXPECT_EQ(tok.encode("hell"), (Ids{258}));
    EXPECT_EQ(tok.encode("hello"), (Ids{258, 'o'}));
    // GPT-2's regex keeps the space with the word: " w" is one piece, merged to "Ġw".
    EXPECT_EQ(tok.encode("hell wo"), (Ids{258, 259, 'o'}));
    EXPECT_EQ(tok.encode("he'll"), (Ids{256, '\'', 257}));
    EXPECT_EQ(tok.token(259), "Ġw");
    EXPECT_EQ(tok.id("hell"), 258);
    EXPECT_EQ(tok.id("nope"), -1);
    EXPECT_THROW(tok.token(262), std::out_of_range);
    EXPECT_THROW(tok.token(-1), std::out_of_range);
}

// Llama 3's model.ignore_merges: a piece that is a token is that token, though the merges would split it ("hell" is
// made h e + ll with merges; with "hel" a token of its own and no merge reaching it, only ignore_merges finds it).
TEST(BpeTokenizer, IgnoreMergesTakesAPieceThatIsAToken) {
    json file = small_file();
    file["model"]["vocab"]["hel"] = 262;
    file["model"]["vocab"]["hell"] = 258;
    EXPECT_EQ(load(file).encode("hel"), (Ids{256, 'l'})) << "merges alone never make \"hel\"";
    file["model"]["ignore_merges"] = true;
    const BpeTokenizer tok = load(file);
    EXPECT_EQ(tok.encode("hel"), (Ids{262}));
    EXPECT_EQ(tok.encode("hello"), (Ids{258, 'o'})) << "a piece that is no token is merged as before";
    EXPECT_EQ(tok.encode("<|end|>"), (Ids{260}));
}

TEST(BpeTokenizer, MergesAsPairsAreTheSame) {
    json file = small_file();
    file["model"]["merges"] = json::array(
        {json::array({"l", "l"}), json::array({"h", "e"}), json::array({"he", "ll"}), json::array({"Ġ", "w"})});
    const BpeTokenizer tok = load(file);
    EXPECT_EQ(tok.encode("hell wo"), (Ids{258, 259, 'o'}));
}

TEST(BpeTokenizer, AddedTokensLeftmostLongestBeforeTheSplit) {
    const BpeTokenizer tok = load(small_file());
    EXPECT_EQ(tok.encode("he<|end|>ll"), (Ids{256, 260, 257}));
    EXPECT_EQ(tok.encode("<|end|>xo"), (Ids{261, 'o'}));
    EXPECT_EQ(tok.encode("<|end|<|end|>"), (Ids{'<', '|', 'e', 'n', 'd', '|', 260}));
    EXPECT_EQ(tok.decode(Ids{256, 260, 257}.data(), 3), "he<|end|>ll");
}

TEST(BpeTokenizer, DecodeReplacesBrokenCharactersAndStopsAtPad) {
    const BpeTokenizer tok = load(small_file(), {"<|end|>", "", ""});
    EXPECT_EQ(tok.pad_id(), 260);
    EXPECT_EQ(tok.unk_id(), -1);
    EXPECT_EQ(tok.mask_id(), -1);
    const Ids euro = tok.encode("\xE2\x82\xAC!");  // "€!": three byte tokens and "!"
    ASSERT_EQ(euro, (Ids{0xE2, 0x82, 0xAC, '!'}));
    // Two continuation bytes without their lead: a U+FFFD each.
    EXPECT_EQ(tok.decode(euro.data() + 1, 3), "\xEF\xBF\xBD\xEF\xBF\xBD!");
    EXPECT_EQ(tok.decode(euro.data(), 2), "\xEF\xBF\xBD");  // a truncated character: one
    const Ids with_pad{256, 260, 257};
    EXPECT_EQ(tok.decode(with_pad.data(), 3), "he");
}

TEST(BpeTokenizer, InvalidUtf8IsEncodedAsReplacementCharacters) {
    const BpeTokenizer tok = load(small_file());
    EXPECT_EQ(tok.encode("a\xFF"), tok.encode("a\xEF\xBF\xBD"));
}

TEST(BpeTokenizer, ReplaceInvalidUtf8AsTheWhatwgDecoder) {
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(replace_invalid_utf8("plain \xC3\xA9 \xF0\x9F\x98\x80"), "plain \xC3\xA9 \xF0\x9F\x98\x80");
    EXPECT_EQ(replace_invalid_utf8("\x80"), r);
    EXPECT_EQ(replace_invalid_utf8("\xE2\x82x"), r + "x");       // a truncated sequence is one U+FFFD
    EXPECT_EQ(replace_invalid_utf8("\xC0\xAF"), r + r);          // overlong: each byte
    EXPECT_EQ(replace_invalid_utf8("\xED\xA0\x80"), r + r + r);  // a surrogate: each byte
    EXPECT_EQ(replace_invalid_utf8("\xF4\x90\x80\x80"), r + r + r + r);
    EXPECT_EQ(replace_invalid_utf8("\xF0\x9F\x98"), r);
    EXPECT_EQ(replace_invalid_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(BpeTokenizer, SpecialNamesMustBeTokens) {
    try {
        load(small_file(), {"", "", "<mask>"});
        ADD_FAILURE() << "loaded with a mask that is not a token";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("mask token \"<mask>\""), std::string::npos) << e.what();
    }
}

TEST(BpeTokenizer, RefusesWhatItDoesNotImplementNamingThePath) {
    json file = small_file();
    file["normalizer"] = {{"type", "Lowercase"}};
    expect_refused(file, {"small.json", "normalizer.type", "Lowercase", "NFC"});

    file = small_file();
    file["pre_tokenizer"]["add_prefix_space"] = true;
    expect_refused(file, {"pre_tokenizer.add_prefix_space", "true"});

    file = small_file();
    file["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers",
                              {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}},
                               {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    expect_refused(file, {"pre_tokenizer.pretokenizers[0].behavior", "Removed", "Isolated"});

    file["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolated";
    file["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
    expect_refused(file, {"pre_tokenizer.pretokenizers[0].pattern", "Regex"});

    file["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
    expect_refused(file, {"pre_tokenizer.pretokenizers[0].pattern", "PCRE2"});

    file = small_file();
    file["pre_tokenizer"] = {{"type", "Whitespace"}};
    expect_refused(file, {"pre_tokenizer", "Whitespace"});

    file = small_file();
    file["model"]["dropout"] = 0.1;
    expect_refused(file, {"model.dropout", "0.1"});

    file = small_file();
    file["model"]["type"] = "WordPiece";
    expect_refused(file, {"model.type", "WordPiece", "BPE"});

    file = small_file();
    file["model"]["merges"].push_back("a b c");
    expect_refused(file, {"model.merges[4]"});

    file = small_file();
    file["model"]["merges"].push_back("x zz");
    expect_refused(file, {"model.merges[4]", "lacks"});

    file = small_file();
    file["added_tokens"][1]["lstrip"] = true;
    expect_refused(file, {"added_tokens[1].lstrip", "true"});

    file = small_file();
    file["added_tokens"][0]["id"] = 5;
    expect_refused(file, {"added_tokens[0]", "id 5"});

    file = small_file();
    file["decoder"] = nullptr;
    expect_refused(file, {"decoder", "ByteLevel"});

    file = small_file();
    file["post_processor"] = {{"type", "TemplateProcessing"}};
    expect_refused(file, {"post_processor.type", "TemplateProcessing"});

    file = small_file();
    file["truncation"] = {{"max_length", 8}};
    expect_refused(file, {"truncation"});

    file = small_file();
    file["model"]["vocab"].erase(byte_char(0));
    expect_refused(file, {"no token for byte 0"});
}

}  // namespace
}  // namespace rudder
