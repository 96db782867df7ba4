#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/text/wordpiece_tokenizer.hpp>

namespace rudder {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int64_t>;

// A small BERT-style file. Ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the pieces below in order.
const std::vector<std::string> kPieces = {
    "un", "unaff", "##aff", "##able", "##a", "a", "b",   "##b",    "hello", "world", ".",
    ",",  "'",     "s",     "!",      "$",   "+", "—",   "cafe",   "Cafe",  "i",     "i\xCC\x87",
    "一", "二",    "𠀀",    "ab",     "[",   "]", "cls", "do not", "€",
};
constexpr int64_t kFirstPiece = 5;
int64_t piece(const std::string& text) {
    for (size_t i = 0; i < kPieces.size(); ++i) {
        if (kPieces[i] == text) return kFirstPiece + static_cast<int64_t>(i);
    }
    throw std::logic_error("no piece " + text);
}

json small_file() {
    json vocab = json::object();
    const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (size_t i = 0; i < specials.size(); ++i) vocab[specials[i]] = i;
    for (size_t i = 0; i < kPieces.size(); ++i) vocab[kPieces[i]] = kFirstPiece + static_cast<int64_t>(i);
    json added = json::array();
    for (size_t i = 0; i < specials.size(); ++i) {
        added.push_back({{"id", i},
                         {"content", specials[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
    }
    return {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer",
         {{"type", "BertNormalizer"},
          {"clean_text", true},
          {"handle_chinese_chars", true},
          {"strip_accents", nullptr},
          {"lowercase", true}}},
        {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single",
           {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
            {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}}}},
        {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
        {"model",
         {{"type", "WordPiece"},
          {"unk_token", "[UNK]"},
          {"continuing_subword_prefix", "##"},
          {"max_input_chars_per_word", 100},
          {"vocab", vocab}}},
    };
}

WordPieceTokenizer load(const json& file, const WordPieceSpecialNames& names = {}) {
    return WordPieceTokenizer::from_json(file.dump(), "small.json", names);
}

std::string decode(const WordPieceTokenizer& tok, const Ids& ids) {
    return tok.decode(ids.data(), static_cast<int64_t>(ids.size()));
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

TEST(WordPieceTokenizer, GreedyLongestMatchFromTheStart) {
    const WordPieceTokenizer tok = load(small_file());
    EXPECT_EQ(tok.type(), "wordpiece");
    EXPECT_EQ(tok.vocab_size(), kFirstPiece + static_cast<int64_t>(kPieces.size()));
    // "unaff" is the longest piece from the start, so "un" + "##aff" + "##able" is never tried.
    EXPECT_EQ(tok.encode("unaffable"), (Ids{piece("unaff"), piece("##able")}));
    EXPECT_EQ(tok.encode("unable"), (Ids{piece("un"), piece("##able")}));
    EXPECT_EQ(tok.encode("abba"), (Ids{piece("ab"), piece("##b"), piece("##a")}));
    EXPECT_EQ(tok.token(piece("##able")), "##able");
    EXPECT_EQ(tok.id("##able"), piece("##able"));
    EXPECT_EQ(tok.id("[MASK]"), 4);
    EXPECT_EQ(tok.id("nope"), -1);
    EXPECT_THROW(tok.token(tok.vocab_size()), std::out_of_range);
    EXPECT_THROW(tok.token(-1), std::out_of_range);
}

TEST(WordPieceTokenizer, UnsegmentableAndOverlongWordsAreUnk) {
    json file = small_file();
    file["model"]["max_input_chars_per_word"] = 5;
    const WordPieceTokenizer tok = load(file);
    EXPECT_EQ(tok.unk_id(), 1);
    // "x" has no piece: the whole word is unk, not "un" + unk.
    EXPECT_EQ(tok.encode("unx hello"), (Ids{1, piece("hello")}));
    EXPECT_EQ(tok.encode("unaff"), (Ids{piece("unaff")}));
    EXPECT_EQ(tok.encode("unaffable unaff"), (Ids{1, piece("unaff")}));  // 9 characters > 5
    // Characters, not bytes, and counted after normalisation: "ábábá" is 5 once its accents go.
    EXPECT_EQ(tok.encode("\xC3\xA1"
                         "b"
                         "\xC3\xA1"
                         "b"
                         "\xC3\xA1"),
              (Ids{piece("ab"), piece("##a"), piece("##b"), piece("##a")}));
    EXPECT_EQ(tok.encode("ababab"), (Ids{1}));
}

TEST(WordPieceTokenizer, PunctuationIsItsOwnWord) {
    const WordPieceTokenizer tok = load(small_file());
    EXPECT_EQ(tok.encode("hello,world."), (Ids{piece("hello"), piece(","), piece("world"), piece(".")}));
    // ASCII symbols count as punctuation, as in BERT; so do Unicode's P* ("—" is Pd); "€" (Sc) does not.
    EXPECT_EQ(tok.encode("a$b+a"), (Ids{piece("a"), piece("$"), piece("b"), piece("+"), piece("a")}));
    EXPECT_EQ(tok.encode("a\xE2\x80\x94"
                         "b"),
              (Ids{piece("a"), piece("—"), piece("b")}));
    EXPECT_EQ(tok.encode("a\xE2\x82\xAC"
                         "b \xE2\x82\xAC"),
              (Ids{1, piece("€")}));
    EXPECT_EQ(tok.encode("!!"), (Ids{piece("!"), piece("!")}));
    EXPECT_EQ(tok.encode("  \t\n "), Ids{});
}

TEST(WordPieceTokenizer, LowercasesAndStripsAccents) {
    const WordPieceTokenizer tok = load(small_file());
    EXPECT_EQ(tok.encode("Caf\xC3\xA9 CAF\xC3\x89 Cafe\xCC\x81"), (Ids{piece("cafe"), piece("cafe"), piece("cafe")}));
    // U+0130 lowercases to "i" + U+0307, whose mark goes with the accents.
    EXPECT_EQ(tok.encode("\xC4\xB0"), (Ids{piece("i")}));
    EXPECT_EQ(tok.encode("HELLO World"), (Ids{piece("hello"), piece("world")}));

    json file = small_file();
    file["normalizer"]["lowercase"] = false;  // strip_accents null follows lowercase: accents stay too
    EXPECT_EQ(load(file).encode("Caf\xC3\xA9 Cafe"), (Ids{1, piece("Cafe")}));
    file["normalizer"]["strip_accents"] = true;
    EXPECT_EQ(load(file).encode("Caf\xC3\xA9 cafe"), (Ids{piece("Cafe"), piece("cafe")}));
    file["normalizer"]["lowercase"] = true;
    file["normalizer"]["strip_accents"] = false;
    EXPECT_EQ(load(file).encode("CAFE CAF\xC3\x89"), (Ids{piece("cafe"), 1}));
    // Without stripping, U+0130 lowercases to two characters, as Rust's char::to_lowercase writes it.
    EXPECT_EQ(load(file).encode("\xC4\xB0"), (Ids{piece("i\xCC\x87")}));
}

TEST(WordPieceTokenizer, ChineseCharactersAreWords) {
    const WordPieceTokenizer tok = load(small_file());
    EXPECT_EQ(tok.encode("\xE4\xB8\x80\xE4\xBA\x8C"), (Ids{piece("一"), piece("二")}));
    // Beyond the BMP too (U+20000).
    EXPECT_EQ(tok.encode("a\xF0\xA0\x80\x80"
                         "b"),
              (Ids{piece("a"), piece("𠀀"), piece("b")}));
    json file = small_file();
    file["normalizer"]["handle_chinese_chars"] = false;
    EXPECT_EQ(load(file).encode("\xE4\xB8\x80\xE4\xBA\x8C \xE4\xB8\x80"), (Ids{1, piece("一")}));
}

TEST(WordPieceTokenizer, CleanTextDropsControlsAndMakesWhitespaceSpaces) {
    const WordPieceTokenizer tok = load(small_file());
    // U+200B (Cf), NUL, U+FFFD, a control character and invalid UTF-8 (read as U+FFFD) go; "ab" is one word.
    EXPECT_EQ(tok.encode("a\xE2\x80\x8B"
                         "b"),
              (Ids{piece("ab")}));
    EXPECT_EQ(tok.encode(std::string("a\0b", 3)), (Ids{piece("ab")}));
    EXPECT_EQ(tok.encode("a\xEF\xBF\xBD"
                         "b a\x07"
                         "b a\xFF"
                         "b"),
              (Ids{piece("ab"), piece("ab"), piece("ab")}));
    EXPECT_EQ(tok.encode("a\xC2\xA0"
                         "b\xE3\x80\x80"
                         "a"),
              (Ids{piece("a"), piece("b"), piece("a")}));  // NBSP, U+3000
    json file = small_file();
    file["normalizer"]["clean_text"] = false;
    EXPECT_EQ(load(file).encode("a\xE2\x80\x8B"
                                "b a\xC2\xA0"
                                "b"),
              (Ids{1, piece("a"), piece("b")}));
    file["normalizer"] = nullptr;  // no normaliser: case and accents stay, whitespace still splits
    EXPECT_EQ(load(file).encode("Cafe cafe\tHELLO"), (Ids{piece("Cafe"), piece("cafe"), 1}));
}

TEST(WordPieceTokenizer, AddedTokensMatchTheRawTextFirst) {
    const WordPieceTokenizer tok = load(small_file(), {"[PAD]", "", "[MASK]"});
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.mask_id(), 4);
    EXPECT_EQ(tok.encode("[CLS]hello [MASK][SEP]"), (Ids{2, piece("hello"), 4, 3}));
    // Written in lower case it is no added token, and lowercasing the rest does not make one.
    EXPECT_EQ(tok.encode("[cls] [CLS"), (Ids{piece("["), piece("cls"), piece("]"), piece("["), piece("cls")}));
    EXPECT_EQ(tok.encode("un[MASK]able"), (Ids{piece("un"), 4, 1}));
}

TEST(WordPieceTokenizer, DecodeGluesContinuationsAndCleansUp) {
    const WordPieceTokenizer tok = load(small_file(), {"[PAD]", "", "[MASK]"});
    EXPECT_EQ(decode(tok, {piece("un"), piece("##aff"), piece("##able")}), "unaffable");
    EXPECT_EQ(decode(tok, {piece("##aff"), piece("hello")}), "##aff hello");  // the first token as it is
    // The clean-up works on each token, so " ' s" stays apart; " ," and " ." lose their space.
    EXPECT_EQ(decode(tok, {piece("hello"), piece(","), piece("world"), piece("."), piece("'"), piece("s"), piece("!")}),
              "hello, world. ' s!");
    EXPECT_EQ(decode(tok, {2, piece("hello"), 4, 3}), "[CLS] hello [MASK] [SEP]");
    EXPECT_EQ(decode(tok, {piece("hello"), 0, piece("world")}), "hello");  // stops at pad
    // Hugging Face's Rust clean-up also writes " do not" as " don't" (the JavaScript one does not).
    EXPECT_EQ(decode(tok, {piece("hello"), piece("do not")}), "hello don't");
    EXPECT_EQ(decode(tok, {}), "");

    json file = small_file();
    file["decoder"]["cleanup"] = false;
    EXPECT_EQ(decode(load(file), {piece("hello"), piece(","), piece("un"), piece("##able"), piece(".")}),
              "hello , unable .");
    file["decoder"] = nullptr;  // tokens joined by spaces, as they are
    EXPECT_EQ(decode(load(file), {piece("un"), piece("##able"), piece(".")}), "un ##able .");
}

TEST(WordPieceTokenizer, SpecialNames) {
    const WordPieceTokenizer plain = load(small_file());
    EXPECT_EQ(plain.pad_id(), -1);
    EXPECT_EQ(plain.unk_id(), 1);  // model.unk_token
    EXPECT_EQ(plain.mask_id(), -1);
    EXPECT_EQ(load(small_file(), {"", "[PAD]", ""}).unk_id(), 0);
    try {
        load(small_file(), {"", "", "<mask>"});
        ADD_FAILURE() << "loaded with a mask that is not a token";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("mask token \"<mask>\""), std::string::npos) << e.what();
    }
}

TEST(WordPieceTokenizer, VocabTxtHasBertsSettings) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("rudder_wordpiece_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "vocab.txt").string();
    std::ofstream(path) << "[PAD]\n[UNK]\r\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\nHello\ncafe\n,";
    const WordPieceTokenizer tok = WordPieceTokenizer::load_vocab_txt(path, true, {"[PAD]", "", "[MASK]"});
    EXPECT_EQ(tok.vocab_size(), 10);
    EXPECT_EQ(tok.unk_id(), 1);
    EXPECT_EQ(tok.encode("[CLS] Hellos, CAF\xC3\x89 world[SEP]"), (Ids{2, 5, 6, 9, 8, 1, 3}));
    const Ids ids{5, 6, 9, 4, 0, 5};
    EXPECT_EQ(tok.decode(ids.data(), 6), "hellos, [MASK]");
    EXPECT_EQ(WordPieceTokenizer::load_vocab_txt(path, false).encode("Hello hello Caf\xC3\xA9"), (Ids{7, 5, 1}));

    std::ofstream(path) << "[UNK]\nhello\n\nworld\n";
    try {
        WordPieceTokenizer::load_vocab_txt(path);
        ADD_FAILURE() << "loaded a vocab.txt with an empty line";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(path + ":3"), std::string::npos) << e.what();
    }
    std::ofstream(path) << "[UNK]\nhello\nhello\n";
    try {
        WordPieceTokenizer::load_vocab_txt(path);
        ADD_FAILURE() << "loaded a vocab.txt with a token twice";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(path + ":3: token \"hello\" is already id 1"), std::string::npos)
            << e.what();
    }
    std::ofstream(path) << "hello\n";
    try {
        WordPieceTokenizer::load_vocab_txt(path);
        ADD_FAILURE() << "loaded a vocab.txt without [UNK]";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("model.unk_token \"[UNK]\""), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
}

TEST(WordPieceTokenizer, RefusesWhatItDoesNotImplementNamingThePath) {
    json file = small_file();
    file["model"]["type"] = "BPE";
    expect_refused(file, {"small.json", "model.type", "BPE", "WordPiece"});

    file = small_file();
    file["model"]["vocab"] = json::array();
    expect_refused(file, {"model.vocab", "an object"});

    file = small_file();
    file["model"]["vocab"]["x"] = "7";
    expect_refused(file, {"model.vocab[\"x\"]", "an integer id"});

    file = small_file();
    file["model"].erase("unk_token");
    expect_refused(file, {"model.unk_token is missing"});

    file = small_file();
    file["model"]["unk_token"] = "<unk>";
    expect_refused(file, {"model.unk_token \"<unk>\"", "not in model.vocab"});

    file = small_file();
    file["model"]["continuing_subword_prefix"] = nullptr;
    expect_refused(file, {"model.continuing_subword_prefix", "null", "a string"});

    file = small_file();
    file["model"]["max_input_chars_per_word"] = -1;
    expect_refused(file, {"model.max_input_chars_per_word", "-1"});

    file = small_file();
    file["normalizer"] = {{"type", "Lowercase"}};
    expect_refused(file, {"normalizer.type", "Lowercase", "BertNormalizer"});

    file = small_file();
    file["normalizer"]["lowercase"] = "yes";
    expect_refused(file, {"normalizer.lowercase", "\"yes\"", "true or false"});

    file = small_file();
    file["normalizer"].erase("clean_text");
    expect_refused(file, {"normalizer.clean_text is missing"});

    file = small_file();
    file["normalizer"]["strip_accents"] = "no";
    expect_refused(file, {"normalizer.strip_accents", "true, false or null"});

    file = small_file();
    file["pre_tokenizer"] = nullptr;
    expect_refused(file, {"pre_tokenizer is null", "BertPreTokenizer"});

    file = small_file();
    file["pre_tokenizer"] = {{"type", "Whitespace"}};
    expect_refused(file, {"pre_tokenizer.type", "Whitespace", "BertPreTokenizer"});

    file = small_file();
    file["post_processor"] = {{"type", "RobertaProcessing"}};
    expect_refused(file, {"post_processor.type", "RobertaProcessing", "TemplateProcessing"});

    file = small_file();
    file["decoder"] = {{"type", "ByteLevel"}};
    expect_refused(file, {"decoder.type", "ByteLevel", "WordPiece"});

    file = small_file();
    file["decoder"]["prefix"] = "";
    expect_refused(file, {"decoder.prefix", "non-empty"});

    file = small_file();
    file["decoder"].erase("cleanup");
    expect_refused(file, {"decoder.cleanup is missing"});

    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) {
        file = small_file();
        file["added_tokens"][1][flag] = true;
        expect_refused(file, {std::string("added_tokens[1].") + flag, "true"});
    }

    file = small_file();
    file["added_tokens"][0]["id"] = 7;
    expect_refused(file, {"added_tokens[0]", "\"[PAD]\" has id 7 but already id 0"});

    file = small_file();
    file["added_tokens"][0].erase("content");
    expect_refused(file, {"added_tokens[0].content is missing"});

    file = small_file();
    file["truncation"] = {{"max_length", 8}};
    expect_refused(file, {"truncation", "null"});

    file = small_file();
    file["padding"] = {{"strategy", "BatchLongest"}};
    expect_refused(file, {"padding", "null"});

    try {
        WordPieceTokenizer::from_json("{", "broken.json");
        ADD_FAILURE() << "loaded text that is not JSON";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("broken.json: not JSON"), std::string::npos) << e.what();
    }
    EXPECT_THROW(WordPieceTokenizer::load_json("/nonexistent/tokenizer.json"), std::runtime_error);
}

}  // namespace
}  // namespace rudder
