// The string formats the JSON Schema compiler asserts, as languages of the decoded string (docs/structured-output.md
// gives each grammar).
#pragma once

#include "lang.hpp"

#include <memory>
#include <string>

namespace rudder::grammar {

// The automaton of a format's strings (decoded, UTF-8), built once per process; nullptr for a format not supported.
std::shared_ptr<const Dfa> format_automaton(const std::string& name);
// The names of the supported formats, comma-separated, for messages.
std::string supported_formats();

}  // namespace rudder::grammar
