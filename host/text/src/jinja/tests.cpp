// The tests chat templates use (`x is defined`, `x is not none`, `n is divisibleby 3`), as Jinja2 defines them: a
// table from the name to its function.
#include "builtins.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace rudder::jinja {

namespace {

using Test = bool (*)(const Call&);

bool is_defined(const Call& c) { return c.value.defined; }
bool is_undefined(const Call& c) { return !c.value.defined; }
bool is_none(const Call& c) { return c.value.defined && c.data().is_null(); }
bool is_string(const Call& c) { return c.value.defined && c.data().is_string(); }
bool is_number(const Call& c) { return c.value.defined && c.data().is_number() && !c.data().is_boolean(); }
bool is_integer(const Call& c) { return c.value.defined && c.data().is_number_integer(); }
bool is_float(const Call& c) { return c.value.defined && c.data().is_number_float(); }
bool is_boolean(const Call& c) { return c.value.defined && c.data().is_boolean(); }
bool is_true(const Call& c) { return is_boolean(c) && c.data().get<bool>(); }
bool is_false(const Call& c) { return is_boolean(c) && !c.data().get<bool>(); }
bool is_mapping(const Call& c) { return c.value.defined && c.data().is_object(); }
bool is_sequence(const Call& c) {  // sequence and iterable
    return c.value.defined && (c.data().is_array() || c.data().is_string() || c.data().is_object());
}
bool is_callable(const Call& c) { return c.value.function != nullptr; }

// odd and even, of an integer.
bool has_parity(const Call& c) {
    const Data& d = c.data();
    if (!d.is_number_integer()) fail(c.line, c.name + " of a non-integer");
    const bool odd = d.is_number_unsigned() ? d.get<uint64_t>() % 2 != 0 : d.get<int64_t>() % 2 != 0;
    return odd == (c.name == "odd");
}

bool is_divisible(const Call& c) {
    const int64_t n = as_integer(c.positional(0), "divisibleby's divisor", c.line);
    if (n == 0 || !c.data().is_number_integer()) return false;
    if (n == -1) return true;  // INT64_MIN % -1 traps
    return as_integer(c.data(), "divisibleby", c.line) % n == 0;
}

// lower and upper: a string that the method of that name leaves as it is.
bool has_case(const Call& c) {
    if (!c.data().is_string()) return false;
    static const Arguments none;
    return apply_method(c.renderer, c.value, c.name, none, c.line).data.get_ref<const std::string&>() ==
           c.data().get_ref<const std::string&>();
}

Value first_argument(const Call& c) { return c.args.empty() ? Value::undefined() : c.args[0].second; }
bool is_equal(const Call& c) { return equal(c.value, first_argument(c)); }  // equalto, eq, ==, sameas
bool is_unequal(const Call& c) { return !equal(c.value, first_argument(c)); }

bool is_in(const Call& c) {
    const Data& d = c.data();
    const Data& within = c.positional(0);
    if (within.is_array()) {
        c.renderer.charge(within.size(), c.line);
        return std::find(within.begin(), within.end(), d) != within.end();
    }
    if (within.is_object()) return d.is_string() && within.contains(d.get<std::string>());
    if (within.is_string() && d.is_string())
        return within.get_ref<const std::string&>().find(d.get_ref<const std::string&>()) != std::string::npos;
    return false;
}

const std::unordered_map<std::string, Test>& tests() {
    static const std::unordered_map<std::string, Test> table = {
        {"defined", is_defined},
        {"undefined", is_undefined},
        {"none", is_none},
        {"string", is_string},
        {"number", is_number},
        {"integer", is_integer},
        {"float", is_float},
        {"boolean", is_boolean},
        {"true", is_true},
        {"false", is_false},
        {"mapping", is_mapping},
        {"sequence", is_sequence},
        {"iterable", is_sequence},
        {"callable", is_callable},
        {"odd", has_parity},
        {"even", has_parity},
        {"divisibleby", is_divisible},
        {"lower", has_case},
        {"upper", has_case},
        {"equalto", is_equal},
        {"eq", is_equal},
        {"==", is_equal},
        {"sameas", is_equal},
        {"ne", is_unequal},
        {"!=", is_unequal},
        {"in", is_in},
    };
    return table;
}

}  // namespace

bool apply_test(Renderer& r, const std::string& name, const Value& value, const Arguments& args, int line) {
    const auto found = tests().find(name);
    if (found == tests().end()) fail(line, "the test '" + name + "' is not supported");
    return found->second(Call{r, name, value, args, line});
}

}  // namespace rudder::jinja
