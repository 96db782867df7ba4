// Token-for-token comparison with Hugging Face's JavaScript tokenizers on GPT-2's and Qwen2.5's tokenizer.json. The
// reference (ids and decodes for every text) is written by bpe_reference.mjs, which the ctest fixture
// text.bpe.fetch_reference runs; see docs/tokenizers.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <rudder/text/bpe_tokenizer.hpp>

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
    bool nfc;  // the text is in NFC, so a normalising tokenizer gives it back too
};

std::string from_hex(const std::string& hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return bytes;
}

std::filesystem::path reference_dir() {
    const char* dir = std::getenv("RUDDER_BPE_REFERENCE_DIR");
    return dir ? dir : "";
}

// The reference of one tokenizer; skips the test, saying why, when the fixture could not fetch it.
std::vector<Case> read_reference(const std::string& name) {
    const std::filesystem::path file = reference_dir() / name / "reference.jsonl";
    std::vector<Case> cases;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        const json row = json::parse(line);
        cases.push_back({row["source"], from_hex(row["text"]), row["ids"].get<Ids>(), from_hex(row["decoded"]),
                         from_hex(row["tail_decoded"]), row["nfc"].get<bool>()});
    }
    return cases;
}

bool is_valid_utf8(const std::string& text) { return replace_invalid_utf8(text) == text; }

std::string show_ids(const Ids& ids, size_t at) {
    std::ostringstream out;
    const size_t from = at >= 5 ? at - 5 : 0;
    for (size_t i = from; i < ids.size() && i < at + 6; ++i) out << (i == at ? " >" : " ") << ids[i];
    return out.str();
}

// The first place `got` departs from `want`, with the ids and token texts around it.
std::string first_mismatch(const BpeTokenizer& tok, const Case& c, const Ids& got) {
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

void compare(const std::string& name, const BpeTokenizer& tok, bool normalizes) {
    const std::vector<Case> cases = read_reference(name);
    const std::optional<TokenPieces> pieces = tok.pieces();
    ASSERT_TRUE(pieces.has_value());
    ASSERT_EQ(pieces->kinds(), 1);
    if (cases.empty()) {
        GTEST_SKIP() << "no BPE reference in " << reference_dir() / name
                     << ": the fixture text.bpe.fetch_reference needs node and npm (see its output)";
    }
    size_t tokens = 0, mismatches = 0, round_trips = 0;
    for (const Case& c : cases) {
        const Ids got = tok.encode(c.text);
        tokens += c.ids.size();
        if (got != c.ids) {
            if (++mismatches <= 3) ADD_FAILURE() << name << ": " << first_mismatch(tok, c, got);
            continue;
        }
        EXPECT_EQ(tok.decode(got.data(), static_cast<int64_t>(got.size())), c.decoded) << name << ": " << c.source;
        // The structured-output controllers follow the text through the pieces: the same text wherever it is UTF-8.
        if (is_valid_utf8(c.decoded)) {
            EXPECT_EQ(pieces->spell(got.data(), static_cast<int64_t>(got.size()), tok.pad_id()), c.decoded)
                << name << ": " << c.source << " as pieces";
        }
        if (got.size() > 1) {
            EXPECT_EQ(tok.decode(got.data() + 1, static_cast<int64_t>(got.size()) - 1), c.tail_decoded)
                << name << ": " << c.source << " without its first token";
        }
        if (is_valid_utf8(c.text) && (c.nfc || !normalizes)) {
            EXPECT_EQ(c.decoded, c.text) << name << ": " << c.source << " does not round-trip";
            ++round_trips;
        }
    }
    EXPECT_EQ(mismatches, 0u) << name << ": " << mismatches << " of " << cases.size() << " texts differ";
    std::cout << name << ": " << cases.size() << " texts, " << tokens << " reference tokens, " << mismatches
              << " texts differ; " << round_trips << " valid UTF-8 texts round-trip\n";
}

TEST(BpeCompare, Gpt2TokenizerJson) {
    const auto file = reference_dir() / "gpt2" / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    compare("gpt2", BpeTokenizer::load_json(file.string()), false);
}

// MDLM's and SEDD's GPT-2 checkpoints have GPT-2's 50,257 tokens and their mask after them (mdlm-owt's vocab_size
// is 50,258): the real tokenizer file with the mask added, as the model loader joins them.
TEST(BpeCompare, Gpt2WithTheCheckpointsMaskToken) {
    const auto file = reference_dir() / "gpt2" / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    const WithMaskToken tok(std::make_shared<BpeTokenizer>(BpeTokenizer::load_json(file.string())));
    EXPECT_EQ(tok.vocab_size(), 50258);
    EXPECT_EQ(tok.mask_id(), 50257);
    EXPECT_EQ(tok.pad_id(), -1);
    EXPECT_EQ(tok.token(50256), "<|endoftext|>");
    std::vector<int64_t> ids = tok.encode("Hello world<|endoftext|>");
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids.back(), 50256);
    ids.insert(ids.begin() + 1, tok.mask_id());
    EXPECT_EQ(tok.decode(ids.data(), static_cast<int64_t>(ids.size())), "Hello<mask> world<|endoftext|>");
    // As pieces (what the structured controllers follow): the mask's text, and GPT-2's pieces around it.
    const std::optional<TokenPieces> pieces = tok.pieces();
    ASSERT_TRUE(pieces.has_value());
    EXPECT_EQ(pieces->spell(ids.data(), static_cast<int64_t>(ids.size()), tok.pad_id()),
              "Hello<mask> world<|endoftext|>");
}

TEST(BpeCompare, Gpt2VocabAndMerges) {
    const auto dir = reference_dir() / "gpt2";
    if (!std::filesystem::exists(dir / "vocab.json"))
        GTEST_SKIP() << "no " << dir / "vocab.json"
                     << ": the fixture text.bpe.fetch_reference needs node and npm";
    compare("gpt2", BpeTokenizer::load_vocab_merges((dir / "vocab.json").string(), (dir / "merges.txt").string()),
            false);
}

TEST(BpeCompare, Qwen25TokenizerJson) {
    const auto file = reference_dir() / "qwen2_5" / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    const BpeTokenizer tok = BpeTokenizer::load_json(file.string(), {"<|endoftext|>", "", ""});
    EXPECT_EQ(tok.vocab_size(), 151665);
    EXPECT_EQ(tok.pad_id(), 151643);
    // decode stops at pad, which these texts hold; the comparison reads without one.
    compare("qwen2_5", BpeTokenizer::load_json(file.string()), true);  // NFC
}

// Llama 3's tokenizer (LLaDA's chat template is Llama 3's): model.ignore_merges, a piece that is a token is that token.
TEST(BpeCompare, Llama3TokenizerJson) {
    const auto file = reference_dir() / "llama3" / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    const BpeTokenizer tok = BpeTokenizer::load_json(file.string());
    EXPECT_EQ(tok.vocab_size(), 128256);
    compare("llama3", tok, false);
}

// encode shares its cache of pieces between threads; each thread must still get the reference's ids.
TEST(BpeCompare, Qwen25FromSeveralThreads) {
    const auto file = reference_dir() / "qwen2_5" / "tokenizer.json";
    if (!std::filesystem::exists(file))
        GTEST_SKIP() << "no " << file << ": the fixture text.bpe.fetch_reference needs node and npm";
    const BpeTokenizer tok = BpeTokenizer::load_json(file.string());
    const std::vector<Case> cases = read_reference("qwen2_5");
    std::vector<size_t> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < mismatches.size(); ++t) {
        threads.emplace_back([&, t] {
            // Each thread starts at a different text, so they fill the cache in different orders.
            for (size_t k = 0; k < cases.size(); ++k) {
                const Case& c = cases[(k + t * cases.size() / 4) % cases.size()];
                if (tok.encode(c.text) != c.ids) ++mismatches[t];
            }
        });
    }
    for (auto& thread : threads) thread.join();
    for (size_t t = 0; t < mismatches.size(); ++t) EXPECT_EQ(mismatches[t], 0u) << "thread " << t;
}

}  // namespace
}  // namespace rudder
