// What the renderer calls by name: filters (filters.cpp), tests (tests.cpp), the methods of strings and dicts
// (methods.cpp) and the globals (globals.cpp), each a table from the name to its function.
#pragma once

#include "renderer.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace rudder::jinja {

// One call of a filter, test or method: the value it applies to (a method's object), its arguments, where it is.
struct Call {
    Renderer& renderer;
    const std::string& name;
    const Value& value;
    const Arguments& args;
    int line;

    const Data& data() const { return value.data; }
    // The argument named `key`, else the positional argument at `position`.
    std::optional<Data> keyword(const std::string& key, size_t position) const;
    // The positional argument `k`; fails when there is none.
    const Data& positional(size_t k) const;
};

// The positional argument `k` of `args`; fails "`what` needs more arguments" when there is none.
const Data& positional(const Arguments& args, size_t k, const std::string& what, int line);

// `value | name(args)`; fails for a filter that is not supported.
Value apply_filter(Renderer& r, const std::string& name, const Value& value, const Arguments& args, int line);
// `value is name(args)`; fails for a test that is not supported.
bool apply_test(Renderer& r, const std::string& name, const Value& value, const Arguments& args, int line);
// `self.name(args)`, Python's methods of strings and dicts that templates call; fails for any other.
Value apply_method(Renderer& r, const Value& self, const std::string& name, const Arguments& args, int line);
// The globals: raise_exception, namespace, range, strftime_now.
Scope globals(Renderer& r);

}  // namespace rudder::jinja
