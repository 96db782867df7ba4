// libFuzzer target: the word tokenizer. The input is a vocabulary file and a text, separated by the first NUL
// byte. Reading the vocabulary must succeed or throw std::runtime_error; splitting never yields an empty word or
// one with whitespace; encoding yields ids inside the vocabulary; decoding any ids in range never fails.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

#include <rudder/text/tokenizer.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string vocab = input.substr(0, nul);
    const std::string text = nul == std::string::npos ? input : input.substr(nul + 1);

    for (const auto& word : rudder::WordTokenizer::split(text)) {
        if (word.empty()) std::abort();
        for (const char c : word)
            if (c == ' ' || c == '\n' || c == '\t' || c == '\r') std::abort();
    }
    std::istringstream in(vocab);
    try {
        const rudder::WordTokenizer tok = rudder::WordTokenizer::read(in, "fuzz-vocab.txt");
        const std::vector<int64_t> ids = tok.encode(text);
        for (const int64_t id : ids)
            if (id < 0 || id >= tok.vocab_size()) std::abort();
        (void)tok.decode(ids.data(), static_cast<int64_t>(ids.size()));
    } catch (const std::runtime_error&) {
    }
    return 0;
}
