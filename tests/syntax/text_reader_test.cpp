// rudder::syntax::TextReader on the bundled models: e2e-discrete's word-level syntax classifier reading e2e-mdlm's
// byte-level BPE sequences, as `"input": "text"` has it read them. E2E dev texts, clean, read as the classifier's own
// encoding of the text; a masked token that is a whole word, or a word's first piece, reads as that word masked.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>

#include <rudder/runtime/model.hpp>
#include <rudder/syntax/classifier.hpp>
#include <rudder/text/text_files.hpp>

namespace rudder {
namespace {

namespace fs = std::filesystem;

TEST(TextReader, ReadsE2eMdlmsBpeAsTheWordClassifiersWords) {
    const fs::path models = RUDDER_TEST_MODELS_DIR;
    const Model model = load_model(models / "e2e-mdlm", std::nullopt);
    auto classifier = syntax::TextClassifier::load(models / "e2e-discrete-syntax");
    const std::optional<TokenPieces> pieces = model.tokenizer->pieces();
    ASSERT_TRUE(pieces.has_value());
    ASSERT_EQ(pieces->kinds(), 1);
    const int64_t end = model.tokenizer->pad_id(), mask = model.tokenizer->mask_id();
    syntax::TextReader reader(classifier, pieces->text, pieces->kind_after, end, mask);
    const int64_t Lc = reader.length(), word_pad = classifier->pad_id(), word_mask = classifier->mask_id();

    const auto records = read_e2e_csv(fs::path(RUDDER_TEST_DATA_DIR) / "e2e_nlg" / "devset.csv.gz");
    ASSERT_GT(records.size(), 200u);
    int64_t whole_words = 0, first_pieces = 0;
    for (size_t r = 0; r < records.size(); r += records.size() / 200) {
        const std::string& text = records[r].ref;
        SCOPED_TRACE(text);
        std::vector<int64_t> ids = model.tokenizer->encode(text);
        ids.resize(ids.size() + 3, end);
        std::vector<int64_t> words = classifier->encode(text);
        if (static_cast<int64_t>(words.size()) > Lc) continue;
        std::vector<int64_t> expected = words;
        expected.resize(static_cast<size_t>(Lc), word_pad);
        std::vector<int64_t> read(static_cast<size_t>(Lc));
        EXPECT_DOUBLE_EQ(reader.read(ids.data(), static_cast<int64_t>(ids.size()), read.data()), 1e-3);
        ASSERT_EQ(read, expected);

        // Each token that starts a word (a space first, or the text's start) and is followed by a token that starts
        // another, masked: the word it spells reads as one masked word, the rest as before.
        const auto& piece = [&](int64_t id) -> const std::string& { return pieces->text[0][static_cast<size_t>(id)]; };
        auto starts_word = [&](size_t i) {
            if (i == 0 || ids[i] == end) return true;
            const auto first = static_cast<unsigned char>(piece(ids[i]).empty() ? ' ' : piece(ids[i])[0]);
            return first == ' ';
        };
        for (size_t i = 0; i + 1 < ids.size() && ids[i] != end; ++i) {
            if (!starts_word(i)) continue;
            const std::string spelled = piece(ids[i]);
            const bool whole =
                starts_word(i + 1) && classifier->encode(spelled).size() == 1;  // one token, one word (not "food.")
            if (whole) {
                // The words before it are those of the text its tokens before it spell.
                const size_t word =
                    classifier->encode(model.tokenizer->decode(ids.data(), static_cast<int64_t>(i))).size();
                ASSERT_LT(word, words.size()) << "token " << i << " '" << spelled << "'";
                ASSERT_EQ(words[word], classifier->encode(spelled)[0]) << "token " << i << " '" << spelled << "'";
                std::vector<int64_t> masked_ids = ids;
                masked_ids[i] = mask;
                std::vector<int64_t> masked_words = expected;
                masked_words[word] = word_mask;
                EXPECT_DOUBLE_EQ(reader.read(masked_ids.data(), static_cast<int64_t>(masked_ids.size()), read.data()),
                                 1.0 / static_cast<double>(Lc));
                EXPECT_EQ(read, masked_words) << "token " << i << " '" << spelled << "' masked";
                ++whole_words;
            } else if (!starts_word(i + 1)) {
                // A word's first piece masked, the rest of the word after it: one masked word.
                size_t next = i + 1;
                std::string word_text = spelled;
                while (next < ids.size() && !starts_word(next)) word_text += piece(ids[next++]);
                if (classifier->encode(word_text).size() != 1 || !starts_word(next)) continue;
                const size_t word =
                    classifier->encode(model.tokenizer->decode(ids.data(), static_cast<int64_t>(i))).size();
                std::vector<int64_t> masked_ids = ids;
                masked_ids[i] = mask;
                std::vector<int64_t> masked_words = expected;
                masked_words[word] = word_mask;
                reader.read(masked_ids.data(), static_cast<int64_t>(masked_ids.size()), read.data());
                EXPECT_EQ(read, masked_words) << "the first piece of '" << word_text << "' masked";
                ++first_pieces;
            }
        }
    }
    EXPECT_GT(whole_words, 1000);
    EXPECT_GT(first_pieces, 20);
}

}  // namespace
}  // namespace rudder
