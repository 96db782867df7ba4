#include "code_points.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>

namespace rudder::grammar {

CodePointSet CodePointSet::range(uint32_t lo, uint32_t hi) {
    CodePointSet set;
    set.add(lo, hi);
    return set;
}

CodePointSet CodePointSet::all() {
    CodePointSet set;
    set.ranges_ = {{0, 0xD7FF}, {0xE000, kMaxCodePoint}};
    return set;
}

void CodePointSet::add(uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    ranges_.emplace_back(lo, std::min(hi, kMaxCodePoint));
    normalise();
}

void CodePointSet::add(const CodePointSet& other) {
    ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
    normalise();
}

void CodePointSet::normalise() {
    std::sort(ranges_.begin(), ranges_.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges_) {
        if (!merged.empty() && r.first <= merged.back().second + 1) {
            merged.back().second = std::max(merged.back().second, r.second);
        } else {
            merged.push_back(r);
        }
    }
    ranges_ = std::move(merged);
}

CodePointSet CodePointSet::complement() const {
    CodePointSet out;
    uint32_t next = 0;
    for (const auto& r : ranges_) {
        if (r.first > next) out.ranges_.emplace_back(next, r.first - 1);
        next = r.second + 1;
    }
    if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
    return out.without_surrogates();
}

CodePointSet CodePointSet::intersect(const CodePointSet& other) const {
    CodePointSet out;
    size_t i = 0, j = 0;
    while (i < ranges_.size() && j < other.ranges_.size()) {
        const uint32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
        const uint32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
        if (lo <= hi) out.ranges_.emplace_back(lo, hi);
        if (ranges_[i].second < other.ranges_[j].second) {
            ++i;
        } else {
            ++j;
        }
    }
    return out;
}

CodePointSet CodePointSet::without_surrogates() const { return intersect(all()); }

bool CodePointSet::contains(uint32_t cp) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::make_pair(cp, kMaxCodePoint + 1));
    return it != ranges_.begin() && std::prev(it)->second >= cp;
}

namespace {

// utf8proc's categories (UTF8PROC_CATEGORY_*, 0 = Cn .. 29 = Co) in the order of their two-letter names.
constexpr std::array<const char*, 30> kCategoryNames = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                                        "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                                        "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};

// Every code point's category, once per process (about 1.1 million utf8proc look-ups, a few milliseconds).
const std::array<CodePointSet, 30>& category_table() {
    static std::once_flag once;
    static std::array<CodePointSet, 30> table;
    std::call_once(once, [] {
        std::array<std::vector<std::pair<uint32_t, uint32_t>>, 30> ranges;
        int current = -1;
        uint32_t begin = 0;
        for (uint32_t cp = 0; cp <= kMaxCodePoint + 1; ++cp) {
            const int category = cp <= kMaxCodePoint ? utf8proc_category(static_cast<utf8proc_int32_t>(cp)) : -2;
            if (category == current) continue;
            if (current >= 0 && current < 30) ranges[static_cast<size_t>(current)].emplace_back(begin, cp - 1);
            current = category;
            begin = cp;
        }
        for (size_t c = 0; c < 30; ++c) {
            for (const auto& r : ranges[c]) table[c].add(r.first, r.second);
            table[c] = table[c].without_surrogates();
        }
    });
    return table;
}

}  // namespace

std::optional<CodePointSet> general_category(std::string_view name) {
    const auto& table = category_table();
    CodePointSet set;
    bool found = false;
    for (size_t c = 0; c < kCategoryNames.size(); ++c) {
        const std::string_view two = kCategoryNames[c];
        const bool in = name == two || (name.size() == 1 && name[0] == two[0]) ||
                        (name == "L&" && (two == "Lu" || two == "Ll" || two == "Lt"));
        if (in) {
            set.add(table[c]);
            found = true;
        }
    }
    if (!found) return std::nullopt;
    return set;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::optional<uint32_t> decode_utf8(std::string_view text, size_t& pos) {
    if (pos >= text.size()) return std::nullopt;
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t lead = byte(pos);
    size_t length = 0;
    uint32_t cp = 0;
    if (lead < 0x80) {
        ++pos;
        return lead;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
        cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        cp = lead & 0x0Fu;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        cp = lead & 0x07u;
    } else {
        return std::nullopt;
    }
    if (pos + length > text.size()) return std::nullopt;
    for (size_t i = 1; i < length; ++i) {
        if ((byte(pos + i) & 0xC0) != 0x80) return std::nullopt;
        cp = (cp << 6) | (byte(pos + i) & 0x3Fu);
    }
    const uint32_t smallest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
    if (cp < smallest || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
    pos += length;
    return cp;
}

namespace {

// Splits [lo, hi] (one encoded length, no surrogates) until each piece's encodings form a product of byte ranges:
// the method of RE2 and Rust's regex-syntax (utf8 sequences).
void split_into_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRangeSequence>& out) {
    for (uint32_t end : {0x7Fu, 0x7FFu, 0xFFFFu}) {  // the last code point of each encoded length
        if (lo <= end && hi > end) {
            split_into_sequences(lo, end, out);
            split_into_sequences(end + 1, hi, out);
            return;
        }
    }
    if (hi < 0x80) {
        out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
        return;
    }
    for (int i = 1; i < 4; ++i) {
        const uint32_t mask = (1u << (6 * i)) - 1;
        if ((lo & ~mask) != (hi & ~mask)) {
            if ((lo & mask) != 0) {
                split_into_sequences(lo, lo | mask, out);
                split_into_sequences((lo | mask) + 1, hi, out);
                return;
            }
            if ((hi & mask) != mask) {
                split_into_sequences(lo, (hi & ~mask) - 1, out);
                split_into_sequences(hi & ~mask, hi, out);
                return;
            }
        }
    }
    std::string a, b;
    append_utf8(a, lo);
    append_utf8(b, hi);
    ByteRangeSequence sequence;
    for (size_t i = 0; i < a.size(); ++i) {
        sequence.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
    }
    out.push_back(std::move(sequence));
}

}  // namespace

std::vector<ByteRangeSequence> utf8_sequences(const CodePointSet& set) {
    std::vector<ByteRangeSequence> out;
    const CodePointSet scalars = set.without_surrogates();
    for (const auto& r : scalars.ranges()) split_into_sequences(r.first, r.second, out);
    return out;
}

}  // namespace rudder::grammar
