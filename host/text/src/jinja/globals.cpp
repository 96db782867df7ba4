// The globals a template may call (raise_exception, namespace, range, strftime_now), and what every builtin's call
// reads of its arguments.
#include "builtins.hpp"

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

namespace rudder::jinja {

namespace {

// Jinja2's sandbox (transformers renders in ImmutableSandboxedEnvironment) refuses a longer range() too.
constexpr int64_t kMaxRange = 100000;

}  // namespace

std::optional<Data> Call::keyword(const std::string& key, size_t position) const {
    for (const auto& [n, v] : args)
        if (n == key) return v.data;
    size_t k = 0;
    for (const auto& [n, v] : args)
        if (n.empty() && k++ == position) return v.data;
    return std::nullopt;
}

const Data& Call::positional(size_t k) const { return jinja::positional(args, k, name, line); }

const Data& positional(const Arguments& args, size_t k, const std::string& what, int line) {
    if (k >= args.size() || !args[k].first.empty()) fail(line, what + " needs more arguments");
    return args[k].second.data;
}

Scope globals(Renderer& r) {
    Scope globals;
    globals["raise_exception"] = Value::callable([](const Arguments& args, int line) -> Value {
        fail(line, "raise_exception: " + (args.empty() ? std::string() : to_text(args[0].second)));
    });
    globals["namespace"] = Value::callable([&r](const Arguments& args, int line) -> Value {
        Data ns = Data::object();
        for (const auto& [name, value] : args) {
            if (!name.empty())
                ns[name] = value.data;
            else if (value.data.is_object())
                ns.update(value.data);
            else
                fail(line, "namespace() takes keyword arguments or a dict");
        }
        return r.admit(Value(ns), line);
    });
    globals["range"] = Value::callable([&r](const Arguments& args, int line) -> Value {
        std::vector<int64_t> a;
        for (const auto& [name, value] : args) a.push_back(as_integer(value.data, "range()'s arguments", line));
        if (a.empty() || a.size() > 3) fail(line, "range() takes 1 to 3 integers");
        const int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0];
        const int64_t step = a.size() > 2 ? a[2] : 1;
        if (step == 0) fail(line, "range() with a step of 0");
        // The count in unsigned arithmetic, which cannot overflow: stop - start of two int64s fits in a uint64.
        const bool up = step > 0;
        const uint64_t span = up ? (stop > start ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) : 0)
                                 : (start > stop ? static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) : 0);
        const uint64_t stride = up ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
        const uint64_t n = span / stride + (span % stride != 0 ? 1 : 0);
        if (n > static_cast<uint64_t>(kMaxRange))
            fail(line, "range() of more than " + std::to_string(kMaxRange) +
                           " numbers (Jinja2's sandbox, in which transformers renders templates, refuses it too)");
        r.charge(n, line);
        Data out = Data::array();
        for (uint64_t k = 0; k < n; ++k)  // start + k * step lies between start and stop
            out.push_back(static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step)));
        return Value(out);
    });
    // transformers' global: the local date and time in strftime's format (Llama 3.2's template writes today's).
    globals["strftime_now"] = Value::callable([](const Arguments& args, int line) -> Value {
        const std::string format = as_string(positional(args, 0, "strftime_now", line), "strftime_now's format", line);
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
        return Value(Data(std::string(buf, n)));
    });
    return globals;
}

}  // namespace rudder::jinja
