#include "json_numbers.hpp"

#include <memory>

namespace rudder::grammar {

std::string canonical_number(const nlohmann::ordered_json& number) {
    if (number.is_number_unsigned()) return std::to_string(number.get<uint64_t>());
    if (number.is_number_integer()) return std::to_string(number.get<int64_t>());
    // nlohmann writes a double's shortest round-trip digits, perhaps with an exponent: "1.5", "1e+100", "5e-324".
    const std::string text = nlohmann::ordered_json(number.get<double>()).dump();
    const bool negative = !text.empty() && text[0] == '-';
    std::string digits;
    long point = -1, exponent = 0;
    size_t i = negative ? 1 : 0;
    for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
        if (text[i] == '.') {
            point = static_cast<long>(digits.size());
        } else {
            digits += text[i];
        }
    }
    if (point < 0) point = static_cast<long>(digits.size());
    if (i < text.size()) exponent = std::stol(text.substr(i + 1));
    point += exponent;
    std::string integer, fraction;
    if (point <= 0) {
        integer = "0";
        fraction = std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
        integer = digits + std::string(static_cast<size_t>(point) - digits.size(), '0');
    } else {
        integer = digits.substr(0, static_cast<size_t>(point));
        fraction = digits.substr(static_cast<size_t>(point));
    }
    integer.erase(0, std::min(integer.find_first_not_of('0'), integer.size() - 1));
    fraction.erase(fraction.find_last_not_of('0') + 1);
    std::string out = integer;
    if (!fraction.empty()) out += "." + fraction;
    if (negative && out != "0") out = "-" + out;
    return out;
}

namespace {

LangPtr digit(char lo = '0', char hi = '9') { return byte_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)); }
LangPtr digits(int min, int max) { return repeat(digit(), min, max); }
LangPtr point() { return literal("."); }

// The fractions a text may have: none, or (numbers only) a point and digits.
LangPtr any_fraction(bool integer_only) {
    return integer_only ? empty_word() : optional(sequence({point(), digits(1, -1)}));
}

// Magnitudes (0|[1-9][0-9]*) with a fraction, as text, whose value is >= (or >) the bound's integer.fraction.
LangPtr magnitude_at_least(const std::string& integer, const std::string& fraction, bool strict, bool integer_only) {
    const int n = static_cast<int>(integer.size());
    std::vector<LangPtr> options;
    options.push_back(sequence({digit('1', '9'), digits(n, -1), any_fraction(integer_only)}));  // more digits
    for (int k = 0; k < n; ++k) {  // as many digits, greater at digit k
        if (integer[static_cast<size_t>(k)] == '9') continue;
        options.push_back(sequence({literal(integer.substr(0, static_cast<size_t>(k))),
                                    digit(static_cast<char>(integer[static_cast<size_t>(k)] + 1), '9'),
                                    digits(n - k - 1, n - k - 1), any_fraction(integer_only)}));
    }
    // the same integer digits: the fraction decides
    std::vector<LangPtr> fractions;
    if (fraction.empty()) {
        if (!strict) fractions.push_back(any_fraction(integer_only));
        if (strict && !integer_only) {
            fractions.push_back(sequence({point(), digits(0, -1), digit('1', '9'), digits(0, -1)}));
        }
    } else if (!integer_only) {
        const int m = static_cast<int>(fraction.size());
        for (int k = 0; k < m; ++k) {
            if (fraction[static_cast<size_t>(k)] == '9') continue;
            fractions.push_back(
                sequence({point(), literal(fraction.substr(0, static_cast<size_t>(k))),
                          digit(static_cast<char>(fraction[static_cast<size_t>(k)] + 1), '9'), digits(0, -1)}));
        }
        fractions.push_back(
            sequence({point(), literal(fraction),
                      strict ? sequence({digits(0, -1), digit('1', '9'), digits(0, -1)}) : digits(0, -1)}));
    }
    options.push_back(sequence({literal(integer), choice(std::move(fractions))}));
    return choice(std::move(options));
}

// Magnitudes whose value is <= (or <) the bound's integer.fraction.
LangPtr magnitude_at_most(const std::string& integer, const std::string& fraction, bool strict, bool integer_only) {
    const int n = static_cast<int>(integer.size());
    std::vector<LangPtr> options;
    if (n >= 2) {  // fewer digits
        options.push_back(sequence(
            {choice({literal("0"), sequence({digit('1', '9'), digits(0, n - 2)})}), any_fraction(integer_only)}));
    }
    for (int k = 0; k < n; ++k) {  // as many digits, smaller at digit k
        const char lowest = k == 0 && n > 1 ? '1' : '0';
        if (integer[static_cast<size_t>(k)] <= lowest) continue;
        options.push_back(sequence({literal(integer.substr(0, static_cast<size_t>(k))),
                                    digit(lowest, static_cast<char>(integer[static_cast<size_t>(k)] - 1)),
                                    digits(n - k - 1, n - k - 1), any_fraction(integer_only)}));
    }
    std::vector<LangPtr> fractions;
    if (fraction.empty()) {
        if (!strict) fractions.push_back(empty_word());
        if (!strict && !integer_only) fractions.push_back(sequence({point(), repeat(literal("0"), 1, -1)}));
    } else {
        fractions.push_back(empty_word());
        if (!integer_only) {
            const int m = static_cast<int>(fraction.size());
            std::vector<LangPtr> after_point;
            for (int k = 0; k < m; ++k) {
                if (fraction[static_cast<size_t>(k)] > '0') {
                    after_point.push_back(
                        sequence({literal(fraction.substr(0, static_cast<size_t>(k))),
                                  digit('0', static_cast<char>(fraction[static_cast<size_t>(k)] - 1)), digits(0, -1)}));
                }
                if (k >= 1) after_point.push_back(literal(fraction.substr(0, static_cast<size_t>(k))));
            }
            if (!strict) after_point.push_back(sequence({literal(fraction), repeat(literal("0"), 0, -1)}));
            fractions.push_back(sequence({point(), choice(std::move(after_point))}));
        }
    }
    options.push_back(sequence({literal(integer), choice(std::move(fractions))}));
    return choice(std::move(options));
}

struct Decimal {
    bool negative = false;
    std::string integer;
    std::string fraction;
};

Decimal parse_decimal(const std::string& text) {
    Decimal d;
    size_t i = 0;
    if (!text.empty() && text[0] == '-') {
        d.negative = true;
        i = 1;
    }
    const size_t dot = text.find('.', i);
    d.integer = text.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    if (dot != std::string::npos) d.fraction = text.substr(dot + 1);
    return d;
}

class Bounded {
public:
    Bounded(bool integer_only, const CompileLimits& limits, const std::string& what)
        : integer_only_(integer_only), limits_(limits), what_(what) {}

    std::shared_ptr<const Dfa> dfa(const LangPtr& lang) const {
        return std::make_shared<const Dfa>(build_dfa(lang, limits_, what_));
    }
    LangPtr any_magnitude() const {
        return sequence(
            {choice({literal("0"), sequence({digit('1', '9'), digits(0, -1)})}), any_fraction(integer_only_)});
    }
    // Magnitudes with a value above zero.
    LangPtr positive() const { return magnitude_at_least("0", "", true, integer_only_); }
    LangPtr negative(const LangPtr& magnitudes) const {
        const Dfa nonzero = intersect(*dfa(magnitudes), *dfa(positive()), limits_, what_);
        return sequence({literal("-"), automaton(std::make_shared<const Dfa>(nonzero))});
    }
    LangPtr at_least(const NumberBound& bound) const {
        const Decimal d = parse_decimal(bound.decimal);
        if (!d.negative) return magnitude_at_least(d.integer, d.fraction, bound.exclusive, integer_only_);
        return choice(
            {any_magnitude(), negative(magnitude_at_most(d.integer, d.fraction, bound.exclusive, integer_only_))});
    }
    LangPtr at_most(const NumberBound& bound) const {
        const Decimal d = parse_decimal(bound.decimal);
        if (d.negative) {
            return sequence({literal("-"), magnitude_at_least(d.integer, d.fraction, bound.exclusive, integer_only_)});
        }
        return choice(
            {negative(any_magnitude()), magnitude_at_most(d.integer, d.fraction, bound.exclusive, integer_only_)});
    }

private:
    bool integer_only_;
    const CompileLimits& limits_;
    const std::string& what_;
};

}  // namespace

LangPtr number_language(bool integer_only, const std::optional<NumberBound>& lower,
                        const std::optional<NumberBound>& upper, const CompileLimits& limits, const std::string& what) {
    const LangPtr integer =
        sequence({optional(literal("-")), choice({literal("0"), sequence({digit('1', '9'), digits(0, -1)})})});
    if (!lower && !upper) {
        if (integer_only) return integer;
        const LangPtr sign = optional(choice({literal("+"), literal("-")}));
        // At most two exponent digits: "1e400" is JSON but beyond a double, and many parsers refuse it (nlohmann,
        // serde_json, Go's encoding/json). Only a mantissa of over 200 digits still overflows.
        const LangPtr exponent = sequence({choice({literal("e"), literal("E")}), sign, digits(1, 2)});
        return sequence({integer, optional(sequence({point(), digits(1, -1)})), optional(exponent)});
    }
    const Bounded bounded(integer_only, limits, what);
    if (lower && !upper) return bounded.at_least(*lower);
    if (upper && !lower) return bounded.at_most(*upper);
    return automaton(std::make_shared<const Dfa>(
        intersect(*bounded.dfa(bounded.at_least(*lower)), *bounded.dfa(bounded.at_most(*upper)), limits, what)));
}

}  // namespace rudder::grammar
