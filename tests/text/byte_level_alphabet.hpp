// GPT-2's bytes_to_unicode for the BPE tests and the fuzz target, written out again so that they do not read the code
// they check: byte b's character in a byte-level vocabulary.
#pragma once

#include <cstdint>
#include <string>

namespace rudder::testing {

// A code point below U+0800 as UTF-8 (all the byte-level alphabet needs).
inline std::string utf8(uint32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
}

// Printable bytes stand for themselves; the others, in order, for U+0100 onwards.
inline std::string byte_char(int b) {
    const auto printable = [](int c) {
        return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
    };
    int extra = 0;
    for (int c = 0; c < b; ++c)
        if (!printable(c)) ++extra;
    return utf8(printable(b) ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra));
}

}  // namespace rudder::testing
