// The string formats the JSON Schema compiler asserts, as languages of the decoded string (docs/structured-output.md
// gives each grammar).
#pragma once

#include "lang.hpp"

#include <memory>
#include <string>

namespace rudder::grammar {

// The automaton of a format's strings (decoded, UTF-8), built once per process; nullptr for a format not supported.
// `exact_leap_seconds`: time and date-time accept second 60 at every offset that puts it at 23:59:60 UTC (about
// 10,000 states); otherwise only at 23:59:60 with Z, z, +00:00 or -00:00 (a few dozen).
std::shared_ptr<const Dfa> format_automaton(const std::string& name, bool exact_leap_seconds);
// The names of the supported formats, comma-separated, for messages.
std::string supported_formats();

}  // namespace rudder::grammar
