// Sets of Unicode scalar values as sorted, disjoint, non-adjacent ranges, and the Unicode general categories.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rudder::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

class CodePointSet {
public:
    CodePointSet() = default;
    static CodePointSet single(uint32_t cp) { return range(cp, cp); }
    static CodePointSet range(uint32_t lo, uint32_t hi);
    // Every scalar value (U+0000..U+10FFFF without the surrogates U+D800..U+DFFF).
    static CodePointSet all();

    void add(uint32_t lo, uint32_t hi);
    void add(const CodePointSet& other);
    CodePointSet complement() const;  // within all()
    CodePointSet intersect(const CodePointSet& other) const;
    CodePointSet without_surrogates() const;
    bool empty() const { return ranges_.empty(); }
    bool contains(uint32_t cp) const;
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

private:
    void normalise();
    std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// The code points of a general category by its name: one letter (L, M, N, P, S, Z, C), two letters (Lu, Nd, ...), or
// L& (Lu, Ll, Lt). Surrogates (Cs) are never included. std::nullopt for a name that is none of them.
std::optional<CodePointSet> general_category(std::string_view name);

// One UTF-8 sequence as byte ranges: a code point range whose encodings are exactly the byte strings with byte i in
// [lo_i, hi_i] for every i.
using ByteRangeSequence = std::vector<std::pair<uint8_t, uint8_t>>;
// The UTF-8 encodings of a set as byte-range sequences (disjoint; at most a few per range of the set).
std::vector<ByteRangeSequence> utf8_sequences(const CodePointSet& set);

// Appends the UTF-8 encoding of a scalar value.
void append_utf8(std::string& out, uint32_t cp);
// Decodes one scalar value at `pos` of a valid-UTF-8 check: returns the code point and advances pos, or std::nullopt
// for an invalid sequence (overlong, surrogate, out of range, truncated).
std::optional<uint32_t> decode_utf8(std::string_view text, size_t& pos);

}  // namespace rudder::grammar
