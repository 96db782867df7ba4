#include <rudder/text/utf8.hpp>

#include <algorithm>

#include <utf8proc.h>

namespace rudder {

std::string replace_invalid_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    static const char kReplacement[] = "\xEF\xBF\xBD";
    size_t i = 0;
    const size_t n = bytes.size();
    while (i < n) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (c < 0x80) {
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        int needed = 0;
        unsigned char lower = 0x80, upper = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            needed = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            needed = 2;
            if (c == 0xE0) lower = 0xA0;
            if (c == 0xED) upper = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            needed = 3;
            if (c == 0xF0) lower = 0x90;
            if (c == 0xF4) upper = 0x8F;
        } else {
            out += kReplacement;
            ++i;
            continue;
        }
        // The WHATWG decoder: a byte outside the allowed range ends the sequence as one U+FFFD and is read again.
        size_t j = i + 1;
        int seen = 0;
        while (seen < needed && j < n) {
            const auto d = static_cast<unsigned char>(bytes[j]);
            if (d < lower || d > upper) break;
            lower = 0x80;
            upper = 0xBF;
            ++seen;
            ++j;
        }
        if (seen == needed) {
            out.append(bytes.data() + i, j - i);
        } else {
            out += kReplacement;
        }
        i = j;
    }
    return out;
}

namespace utf8 {

size_t sequence_length(char lead) {
    const utf8proc_int8_t length = utf8proc_utf8class[static_cast<unsigned char>(lead)];
    return length > 0 ? static_cast<size_t>(length) : 1;
}

size_t count(std::string_view s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); i += sequence_length(s[i])) ++n;
    return n;
}

bool is_ascii(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t character_start(std::string_view s, size_t pos) {
    const auto continuation = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; };  // 10xxxxxx
    while (pos > 0 && pos < s.size() && continuation(s[pos])) --pos;
    return pos;
}

void append(std::string& out, uint32_t code_point) {
    utf8proc_uint8_t bytes[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(code_point), bytes);
    out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

uint32_t next_code_point(std::string_view s, size_t& i) {
    utf8proc_int32_t code_point = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                                static_cast<utf8proc_ssize_t>(s.size() - i), &code_point);
    if (n <= 0) return static_cast<unsigned char>(s[i++]);
    i += static_cast<size_t>(n);
    return static_cast<uint32_t>(code_point);
}

}  // namespace utf8
}  // namespace rudder
