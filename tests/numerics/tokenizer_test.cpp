#include <gtest/gtest.h>
#include <random>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/text/tokenizer.hpp>

#include "toy_corpus.hpp"

namespace rudder {
namespace {

using Tokens = std::vector<std::string>;

// A scratch file removed when the test ends; the pid keeps concurrent runs apart.
class TempFile {
public:
    explicit TempFile(const std::string& name)
        : path_(std::filesystem::temp_directory_path() /
                ("rudder_numerics_" + std::to_string(::getpid()) + "_" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name)) {}
    ~TempFile() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    std::string path() const { return path_.string(); }
    void write(const std::string& text) const { std::ofstream(path_, std::ios::binary) << text; }

private:
    std::filesystem::path path_;
};

// Expects `fn` to throw std::runtime_error whose message contains every one of `parts`.
template <typename Fn>
void expect_runtime_error(Fn fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what << " lacks " << part;
    }
}

TEST(WordTokenizer, SplitsWordsAndPunctuation) {
    EXPECT_EQ(WordTokenizer::split("The Eagle is a coffee shop."),
              (Tokens{"The", "Eagle", "is", "a", "coffee", "shop", "."}));
    EXPECT_EQ(WordTokenizer::split("  spaced\tout\n"), (Tokens{"spaced", "out"}));
    EXPECT_TRUE(WordTokenizer::split("").empty());
    EXPECT_TRUE(WordTokenizer::split(" \t ").empty());
}

TEST(WordTokenizer, ApostrophesAndHyphensInsideWordsJoin) {
    // Inside a word they join; at a word's edge they are punctuation of their own.
    EXPECT_EQ(WordTokenizer::split("don't"), (Tokens{"don't"}));
    EXPECT_EQ(WordTokenizer::split("a family-friendly pub"), (Tokens{"a", "family-friendly", "pub"}));
    EXPECT_EQ(WordTokenizer::split("'quoted' - dash"), (Tokens{"'", "quoted", "'", "-", "dash"}));
    EXPECT_EQ(WordTokenizer::split("well--done"), (Tokens{"well", "-", "-", "done"}));
    EXPECT_EQ(WordTokenizer::split("Browns' menu"), (Tokens{"Browns", "'", "menu"}));
}

TEST(WordTokenizer, NonAsciiBytesAreWordCharacters) {
    // "£" is two UTF-8 bytes >= 0x80, so it is part of the word and the hyphen between digits joins: one token.
    EXPECT_EQ(WordTokenizer::split("£20-25"), (Tokens{"£20-25"}));
    EXPECT_EQ(WordTokenizer::split("near Café Rouge."), (Tokens{"near", "Café", "Rouge", "."}));
    EXPECT_EQ(WordTokenizer::split("(£30)"), (Tokens{"(", "£30", ")"}));
}

TEST(WordTokenizer, BuildOrdersByFrequencyThenText) {
    const auto tok = WordTokenizer::build({"b a c a", "c a d"}, 1);
    ASSERT_EQ(tok.vocab_size(), 7);
    EXPECT_EQ(tok.token(0), "<pad>");
    EXPECT_EQ(tok.token(1), "<unk>");
    EXPECT_EQ(tok.token(2), "<mask>");
    EXPECT_EQ(tok.token(3), "a");  // 3 times
    EXPECT_EQ(tok.token(4), "c");  // 2 times
    EXPECT_EQ(tok.token(5), "b");  // 1 time, and "b" < "d"
    EXPECT_EQ(tok.token(6), "d");

    const auto frequent = WordTokenizer::build({"b a c a", "c a d"}, 2);
    EXPECT_EQ(frequent.vocab_size(), 5);
    EXPECT_EQ(frequent.encode("d a"), (std::vector<int64_t>{frequent.unk_id(), 3}));
    EXPECT_THROW(WordTokenizer::build({"a"}, 0), std::invalid_argument);
}

TEST(WordTokenizer, EncodeDecodeRoundTripsCorpusSentences) {
    const auto& lines = test::toy_corpus();
    std::vector<std::string> all = lines;
    all.push_back("Browns Cambridge (near the river) is family-friendly; prices £20-25! Isn't it?");
    const auto tok = WordTokenizer::build(all);
    for (const auto& line : all) {
        const auto ids = tok.encode(line);
        for (int64_t id : ids) {
            EXPECT_NE(id, tok.pad_id());
            EXPECT_NE(id, tok.mask_id());
            EXPECT_NE(id, tok.unk_id());
        }
        EXPECT_EQ(tok.decode(ids.data(), static_cast<int64_t>(ids.size())), line);
    }
}

TEST(WordTokenizer, DecodeSpacingPadMaskAndUnknown) {
    // split() never makes "'s" (an apostrophe after a space is punctuation), but a vocabulary file may hold it.
    TempFile file("vocab.txt");
    file.write("<pad>\n<unk>\n<mask>\nIt\n's\na\npub\n(\ncheap\n)\n,\nnear\nthe\nriver\n.\n");
    const auto tok = WordTokenizer::load(file.path());
    std::vector<int64_t> ids;
    for (int64_t id = 3; id < tok.vocab_size(); ++id) ids.push_back(id);
    EXPECT_EQ(tok.decode(ids.data(), static_cast<int64_t>(ids.size())), "It's a pub (cheap), near the river.");

    ids = tok.encode("a pub near Zizzi");
    EXPECT_EQ(ids.back(), tok.unk_id());
    ids.insert(ids.begin() + 1, tok.mask_id());
    ids.push_back(tok.pad_id());
    ids.push_back(tok.encode("river").front());  // after the first pad: not decoded
    EXPECT_EQ(tok.decode(ids.data(), static_cast<int64_t>(ids.size())), "a <mask> pub near <unk>");
    EXPECT_EQ(tok.decode(ids.data(), 0), "");
}

TEST(WordTokenizer, TokenThrowsOutOfRangeWithTheId) {
    const auto tok = WordTokenizer::build({"a b"});
    EXPECT_EQ(tok.token(4), "b");
    for (int64_t bad : {int64_t{-1}, tok.vocab_size(), int64_t{1234}}) {
        try {
            tok.token(bad);
            ADD_FAILURE() << "no throw for id " << bad;
        } catch (const std::out_of_range& e) {
            EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
        }
    }
    const int64_t bad_ids[] = {0 + 3, 99};
    EXPECT_THROW(tok.decode(bad_ids, 2), std::out_of_range);
}

TEST(WordTokenizer, SaveLoadRoundTrip) {
    const auto tok = WordTokenizer::build(test::toy_corpus());
    TempFile file("vocab.txt");
    tok.save(file.path());
    const auto loaded = WordTokenizer::load(file.path());
    ASSERT_EQ(loaded.vocab_size(), tok.vocab_size());
    for (int64_t id = 0; id < tok.vocab_size(); ++id) EXPECT_EQ(loaded.token(id), tok.token(id));
    for (const auto& line : test::toy_corpus()) EXPECT_EQ(loaded.encode(line), tok.encode(line));
    EXPECT_EQ(loaded.type(), "word");
}

TEST(WordTokenizer, LoadAcceptsCrlf) {
    TempFile file("crlf.txt");
    file.write("<pad>\r\n<unk>\r\n<mask>\r\npub\r\n");
    const auto tok = WordTokenizer::load(file.path());
    EXPECT_EQ(tok.vocab_size(), 4);
    EXPECT_EQ(tok.token(3), "pub");
}

TEST(WordTokenizer, LoadErrorsNameFileAndLine) {
    TempFile file("bad.txt");
    const std::string path = file.path();
    auto load = [&] { WordTokenizer::load(path); };

    expect_runtime_error([&] { WordTokenizer::load(path + ".missing"); }, {path + ".missing"});

    file.write("<pad>\n<mask>\n<unk>\n");
    expect_runtime_error(load, {path + ":2:", "<unk>", "<mask>"});

    file.write("<pad>\n<unk>\n<mask>\npub\nriver\npub\n");
    expect_runtime_error(load, {path + ":6:", "duplicate", "'pub'", "line 4"});

    file.write("<pad>\n<unk>\n<mask>\npub\n\nriver\n");
    expect_runtime_error(load, {path + ":5:", "empty line"});

    file.write("<pad>\n<unk>\n<mask>\ncoffee shop\n");
    expect_runtime_error(load, {path + ":4:", "whitespace"});

    file.write("<pad>\n<unk>\n");
    expect_runtime_error(load, {path, "special"});
}

// decode() as pieces: a word-level text is its words' pieces in turn (spaces between words, none after "(" nor before
// punctuation), for every sequence of words (WithMaskToken's pieces: text.BpeCompare.Gpt2WithTheCheckpointsMaskToken).
TEST(WordTokenizer, PiecesSpellWhatDecodeWrites) {
    const auto tok = WordTokenizer::build({"The Eagle ( a pub ) is near the river . It 's cheap , really !"}, 1);
    const std::optional<TokenPieces> pieces = tok.pieces();
    ASSERT_TRUE(pieces.has_value());
    ASSERT_EQ(pieces->kinds(), 3);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int64_t> word(3, tok.vocab_size() - 1);
    for (int trial = 0; trial < 500; ++trial) {
        std::vector<int64_t> ids(static_cast<size_t>(1 + trial % 12));
        for (auto& id : ids) id = word(rng);
        EXPECT_EQ(pieces->spell(ids.data(), static_cast<int64_t>(ids.size())),
                  tok.decode(ids.data(), static_cast<int64_t>(ids.size())));
    }
}

}  // namespace
}  // namespace rudder
