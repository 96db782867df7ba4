// UTF-8, the one place that encodes and decodes it (over utf8proc): characters' lengths and boundaries for the Jinja
// renderer and the word features, code points for the tokenizers, and the WHATWG decoder's replacement of invalid
// bytes for every text a run hands out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rudder {

// Replaces each maximal invalid subsequence of `bytes` with U+FFFD (the WHATWG Encoding Standard's UTF-8 decoder,
// which the reference implementation's TextDecoder applies); valid UTF-8 comes back unchanged.
std::string replace_invalid_utf8(std::string_view bytes);

namespace utf8 {

// The bytes of the character that starts with `lead`, from its first byte alone (utf8proc's class of the byte): 1 for
// ASCII and for a byte that starts no character (a stray continuation byte, 0xF8-0xFF), which stands alone.
size_t sequence_length(char lead);
// The characters of `s`, counted as sequence_length() steps through it (a sequence cut short at the end is one).
size_t count(std::string_view s);
bool is_ascii(std::string_view s);
// The start of the character that byte `pos` of `s` is in: `pos` moved back over continuation bytes, never below 0.
// A text cut there keeps no half character.
size_t character_start(std::string_view s, size_t pos);

// Appends the UTF-8 encoding of `code_point` (utf8proc_encode_char: 1 to 4 bytes; a surrogate as its 3 bytes; nothing
// past U+10FFFF).
void append(std::string& out, uint32_t code_point);
// The code point at byte `i` of `s`, advancing `i` past it. For valid UTF-8 (utf8proc_iterate); a byte that starts no
// valid character is returned as its own value, `i` advancing by one.
uint32_t next_code_point(std::string_view s, size_t& i);

}  // namespace utf8
}  // namespace rudder
