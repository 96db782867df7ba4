// libFuzzer target: the WordPiece tokenizer on any bytes. A small BERT-style file built here (lowercasing, accents
// stripped, CJK spaced, added tokens): encoding never throws and yields ids inside the vocabulary; decoding the ids,
// and the input read as ids (any in range), gives valid UTF-8. The input is also read as a tokenizer.json, which
// must load or be refused with std::runtime_error, and a file that loads must encode the input within its vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rudder/text/bpe_tokenizer.hpp>
#include <rudder/text/wordpiece_tokenizer.hpp>

namespace {

nlohmann::json small_file() {
    nlohmann::json vocab = nlohmann::json::object();
    const std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",    "cat",
                                             "##s",   "ca",    "##t",   "un",    "##aff",  "##able", ".",
                                             ",",     "'",     "s",     "t",     "a",      "c",      "e",
                                             "##e",   "##a",   "##c",   "一",    "二",     "é",      "##é"};
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
    nlohmann::json added = nlohmann::json::array();
    for (int i = 0; i < 5; ++i)
        added.push_back({{"id", i},
                         {"content", tokens[static_cast<size_t>(i)]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
    return {{"version", "1.0"},
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
            {"post_processor", nullptr},
            {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
            {"model",
             {{"type", "WordPiece"},
              {"unk_token", "[UNK]"},
              {"continuing_subword_prefix", "##"},
              {"max_input_chars_per_word", 12},
              {"vocab", vocab}}}};
}

void check(const rudder::WordPieceTokenizer& tok, const std::string& text, const uint8_t* data, size_t size) {
    const std::vector<int64_t> ids = tok.encode(text);
    for (const int64_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) std::abort();
    const std::string decoded = tok.decode(ids.data(), static_cast<int64_t>(ids.size()));
    if (rudder::replace_invalid_utf8(decoded) != decoded) std::abort();
    std::vector<int64_t> any_ids;
    for (size_t i = 0; i < size; ++i) any_ids.push_back(data[i] % tok.vocab_size());
    const std::string any = tok.decode(any_ids.data(), static_cast<int64_t>(any_ids.size()));
    if (rudder::replace_invalid_utf8(any) != any) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const rudder::WordPieceTokenizer bert_style =
        rudder::WordPieceTokenizer::from_json(small_file().dump(), "bert-style");
    const std::string text(reinterpret_cast<const char*>(data), size);
    check(bert_style, text, data, size);
    try {
        const rudder::WordPieceTokenizer read = rudder::WordPieceTokenizer::from_json(text, "fuzz-tokenizer.json");
        const std::vector<int64_t> ids = read.encode("The cats, un-affable.");
        for (const int64_t id : ids)
            if (id < 0 || id >= read.vocab_size()) std::abort();
    } catch (const std::runtime_error&) {
    }
    return 0;
}
