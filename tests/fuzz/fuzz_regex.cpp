// libFuzzer target: the regex compiler. The input is a pattern and a text, separated by the first NUL byte (a
// pattern without NUL is also tried on the empty text). compile_regex returns an automaton within the (small) limits
// or throws RegexError (with an offset inside the pattern) or LimitError; the automaton is trimmed, its byte classes
// are consistent, it accepts only valid UTF-8, and matches() agrees with stepping through next().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <rudder/grammar/regex.hpp>

namespace {

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<uint8_t>(s[i]);
        size_t n = b < 0x80                   ? 1
                   : (b >= 0xC2 && b <= 0xDF) ? 2
                   : (b >= 0xE0 && b <= 0xEF) ? 3
                   : (b >= 0xF0 && b <= 0xF4) ? 4
                                              : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
        for (size_t k = 1; k < n; ++k) {
            const auto c = static_cast<uint8_t>(s[i + k]);
            if ((c & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (c & 0x3Fu);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += n;
    }
    return true;
}

void check(const rudder::grammar::Dfa& dfa, const std::string& text) {
    using rudder::grammar::Dfa;
    for (int32_t s = 0; s < dfa.size(); ++s) {
        if (!dfa.live(s) && !(dfa.empty() && dfa.size() == 1)) std::abort();
        for (int b = 0; b < 256; ++b) {
            const int32_t t = dfa.next(s, static_cast<uint8_t>(b));
            if (t != dfa.next_by_class(s, dfa.class_of(static_cast<uint8_t>(b)))) std::abort();
            if (t < Dfa::kDead || t >= dfa.size()) std::abort();
        }
    }
    int32_t state = dfa.start();
    for (char c : text) state = dfa.next(state, static_cast<uint8_t>(c));
    const bool stepped = dfa.accepting(state);
    if (stepped != dfa.matches(text)) std::abort();
    if (stepped && !valid_utf8(text)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string pattern = input.substr(0, nul);
    const std::string text = nul == std::string::npos ? std::string() : input.substr(nul + 1);
    rudder::grammar::CompileLimits limits;
    limits.max_states = 2000;
    limits.max_nfa_states = 50000;
    limits.max_work = 2000000;
    for (auto dialect : {rudder::grammar::RegexDialect::pcre2, rudder::grammar::RegexDialect::ecma}) {
        try {
            check(rudder::grammar::compile_regex(pattern, limits, dialect), text);
        } catch (const rudder::grammar::RegexError& e) {
            if (e.offset > pattern.size()) std::abort();
        } catch (const rudder::grammar::LimitError&) {
        }
    }
    return 0;
}
