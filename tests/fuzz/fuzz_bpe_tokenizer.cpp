// libFuzzer target: the byte-level BPE tokenizer on any bytes. Two small files built here, one with GPT-2's
// pre-split and one with Qwen2's split and NFC, both with added tokens. Encoding never throws and yields ids inside
// the vocabulary; without a normaliser decode(encode(text)) is the text with invalid UTF-8 replaced; decoding the
// input read as ids (any in range) gives valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rudder/text/bpe_tokenizer.hpp>

#include "../text/byte_level_alphabet.hpp"

namespace {

nlohmann::json small_file(bool qwen_style) {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[rudder::testing::byte_char(b)] = b;
    vocab["he"] = 256;
    vocab["ll"] = 257;
    vocab["hell"] = 258;
    vocab["Ġw"] = 259;
    vocab["ĠĠ"] = 260;
    vocab["Ã©"] = 261;  // "é"
    nlohmann::json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    if (qwen_style) {
        pre = {{"type", "Sequence"},
               {"pretokenizers",
                {{{"type", "Split"},
                  {"pattern",
                   {{"Regex",
                     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
                     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                  {"behavior", "Isolated"},
                  {"invert", false}},
                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    }
    return {
        {"added_tokens",
         {{{"id", 262}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
          {{"id", 263}, {"content", "<|end|>x"}, {"special", false}, {"normalized", false}}}},
        {"normalizer", qwen_style ? nlohmann::json{{"type", "NFC"}} : nlohmann::json()},
        {"pre_tokenizer", pre},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"l l", "h e", "he ll", "Ġ w", "Ġ Ġ", "Ã ©"}}}},
    };
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const rudder::BpeTokenizer gpt2_style =
        rudder::BpeTokenizer::from_json(small_file(false).dump(), "gpt2-style");
    static const rudder::BpeTokenizer qwen_style =
        rudder::BpeTokenizer::from_json(small_file(true).dump(), "qwen-style");
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (const rudder::BpeTokenizer* tok : {&gpt2_style, &qwen_style}) {
        const std::vector<int64_t> ids = tok->encode(text);
        for (const int64_t id : ids)
            if (id < 0 || id >= tok->vocab_size()) std::abort();
        const std::string decoded = tok->decode(ids.data(), static_cast<int64_t>(ids.size()));
        if (rudder::replace_invalid_utf8(decoded) != decoded) std::abort();
        if (tok == &gpt2_style && decoded != rudder::replace_invalid_utf8(text)) std::abort();
        std::vector<int64_t> any_ids;
        for (const uint8_t byte : text) any_ids.push_back(byte % tok->vocab_size());
        const std::string any = tok->decode(any_ids.data(), static_cast<int64_t>(any_ids.size()));
        if (rudder::replace_invalid_utf8(any) != any) std::abort();
    }
    return 0;
}
