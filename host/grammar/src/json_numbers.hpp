// JSON numbers: the canonical text of a number, and the languages of numbers within bounds (exact digit-range
// automata: the value of every accepted text lies within the bounds, and every canonical text that does is accepted).
#pragma once

#include "lang.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace rudder::grammar {

// A number in plain decimal: no exponent, no leading zeros, no trailing zeros in the fraction, no fraction for an
// integral value, no negative zero ("1.0" -> "1", "1e2" -> "100", "-0.0" -> "0", "1.5e-3" -> "0.0015"). A double is
// written from its shortest round-trip digits, so two doubles' texts order as the doubles do.
std::string canonical_number(const nlohmann::ordered_json& number);

struct NumberBound {
    std::string decimal;  // canonical_number of the bound
    bool exclusive = false;
};

// JSON number texts, integers only or any number. Without bounds: the whole JSON grammar (an integer as
// -?(0|[1-9][0-9]*), a number with fraction and exponent). With a bound: plain decimals (no exponent, fraction digits
// allowed, no negative zero) whose value satisfies both bounds.
LangPtr number_language(bool integer_only, const std::optional<NumberBound>& lower,
                        const std::optional<NumberBound>& upper, const CompileLimits& limits, const std::string& what);

}  // namespace rudder::grammar
