#include "renderer.hpp"

#include "builtins.hpp"

#include <algorithm>
#include <optional>
#include <utility>

namespace rudder::jinja {

namespace {

Data loop_data(const LoopState& l) {
    const int64_t k = l.index0, n = l.length;
    Data loop = {{"index", k + 1}, {"index0", k},       {"first", k == 0},       {"last", k == n - 1},
                 {"length", n},    {"revindex", n - k}, {"revindex0", n - k - 1}};
    loop["previtem"] = *l.previous;
    loop["nextitem"] = *l.next;
    return loop;
}

Value loop_member(const LoopState& l, const Data& key) {
    if (!key.is_string()) return Value::undefined();
    const std::string& name = key.get_ref<const std::string&>();
    const int64_t k = l.index0, n = l.length;
    if (name == "index") return Value(Data(k + 1));
    if (name == "index0") return Value(Data(k));
    if (name == "first") return Value(Data(k == 0));
    if (name == "last") return Value(Data(k == n - 1));
    if (name == "length") return Value(Data(n));
    if (name == "revindex") return Value(Data(n - k));
    if (name == "revindex0") return Value(Data(n - k - 1));
    if (name == "previtem") return Value(*l.previous);
    if (name == "nextitem") return Value(*l.next);
    return Value::undefined();
}

}  // namespace

Renderer::Renderer(const Data& variables, const RenderLimits& limits) : limits_(limits) {
    out_limit_ = limits_.max_output_bytes;
    scopes_.push_back(globals(*this));
    scopes_.emplace_back();  // the template's own variables
    for (const auto& [name, value] : variables.items()) {
        weigh(value, 0, 0);  // before the copy, which recurses: a variable nested too deep stops here
        scopes_.back()[name] = Value(value);
    }
}

void Renderer::render(const Node& node, std::string& out) {
    const Deeper deeper(*this, node.line);
    switch (node.kind) {
        case Kind::sequence:
            for (const auto& kid : node.kids) {
                render(*kid, out);
                if (flow_ != Flow::normal) return;
            }
            return;
        case Kind::text: return write(out, node.text, node.line);
        case Kind::emit: return emit(node, out);
        case Kind::if_: return render_if(node, out);
        case Kind::for_: return render_for(node, out);
        case Kind::set: return set(node);
        case Kind::set_block: return set_block(node);
        case Kind::macro: return define(node);
        case Kind::break_: flow_ = Flow::break_loop; return;
        case Kind::continue_: flow_ = Flow::continue_loop; return;
        default: fail(node.line, "not a statement");
    }
}

void Renderer::emit(const Node& node, std::string& out) { write(out, to_text(eval(*node.kids[0])), node.line); }

void Renderer::render_if(const Node& node, std::string& out) {
    for (size_t k = 0; k + 1 < node.kids.size(); k += 2)
        if (truthy(eval(*node.kids[k]))) return render(*node.kids[k + 1], out);
}

void Renderer::set(const Node& node) { assign(node, admit(eval(*node.kids[0]), node.line)); }

void Renderer::set_block(const Node& node) { assign(node, Value(Data(capture(*node.kids[0])))); }

void Renderer::define(const Node& node) { scopes_.back()[node.text] = macro(node); }

void Renderer::too_deep(int line) const {
    fail(line, "the render nested more than " + std::to_string(limits_.max_render_depth) +
                   " deep (RenderLimits::max_render_depth: statements, expressions and macro calls inside each "
                   "other)");
}

void Renderer::checkpoint(int line) {
    if (steps_ > limits_.max_steps)
        fail(line, "the render took more than " + std::to_string(limits_.max_steps) +
                       " steps (RenderLimits::max_steps): loops or values too large for a chat template");
    next_poll_ = steps_ + kPollSteps;
    if (limits_.cancelled && limits_.cancelled()) fail(line, "the render was cancelled (RenderLimits::cancelled)");
}

void Renderer::too_large(int line) const {
    fail(line,
         "a value of more than " + std::to_string(limits_.max_value_bytes) + " bytes (RenderLimits::max_value_bytes)");
}

size_t Renderer::weigh(const Data& d, int level, size_t so_far) {
    so_far += kItemBytes;
    if (d.is_string()) {
        may_grow(so_far, d.get_ref<const std::string&>().size(), line_);
        return so_far + d.get_ref<const std::string&>().size();
    }
    if (!d.is_structured()) {
        may_grow(so_far, 0, line_);
        return so_far;
    }
    if (level + 1 > limits_.max_value_depth)
        fail(line_, "a value nests lists and dicts more than " + std::to_string(limits_.max_value_depth) +
                        " deep (RenderLimits::max_value_depth)");
    if (d.is_object()) {
        for (const auto& [k, v] : d.items()) {
            may_grow(so_far, k.size(), line_);
            so_far = weigh(v, level + 1, so_far + k.size());
        }
    } else {
        for (const auto& item : d) so_far = weigh(item, level + 1, so_far);
    }
    return so_far;
}

Value Renderer::admit(Value v, int line) {
    line_ = line;
    if (v.defined && !v.function) charge(weigh(v.data, 0, 0) / kBytesPerStep, line);
    return v;
}

void Renderer::write(std::string& out, const std::string& text, int line) {
    if (text.size() > out_limit_ || out.size() > out_limit_ - text.size()) {
        if (out_limit_ == limits_.max_output_bytes && capturing_ == 0)
            fail(line, "the rendered text passed " + std::to_string(limits_.max_output_bytes) +
                           " bytes (RenderLimits::max_output_bytes)");
        too_large(line);
    }
    charge(text.size() / kBytesPerStep, line);
    out += text;
}

std::string Renderer::capture(const Node& body) {
    const size_t outer = out_limit_;
    out_limit_ = limits_.max_value_bytes;
    ++capturing_;
    std::string captured;
    render(body, captured);
    --capturing_;
    out_limit_ = outer;
    return captured;
}

const Value* Renderer::find(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
        const auto found = it->find(name);
        if (found != it->end()) return &found->second;
    }
    return nullptr;
}

Value Renderer::lookup(const std::string& name, int line) {
    const Value* found = find(name);
    if (found == nullptr) return Value::undefined();
    if (found->loop != nullptr) return admit(Value(loop_data(*found->loop)), line);
    return admit(*found, line);  // a copy: charged by its size
}

void Renderer::assign(const Node& node, Value value) {
    if (node.names.size() == 1) {
        scopes_.back()[node.names[0]] = std::move(value);
        return;
    }
    // `set ns.attr = value`: the namespace is changed where it lives, so a loop's changes outlast the loop.
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
        const auto found = it->find(node.names[0]);
        if (found == it->end()) continue;
        if (!found->second.data.is_object())
            fail(node.line, "'" + node.names[0] + "' is not a namespace; cannot set its attribute");
        found->second.data[node.names[1]] = std::move(value.data);
        // The namespace grows with each assignment (`ns.s = ns.s ~ ns.s`, `ns.me = ns`): weighed as a whole.
        charge(weigh(found->second.data, 0, 0) / kBytesPerStep, node.line);
        return;
    }
    fail(node.line, "'" + node.names[0] + "' is undefined; cannot set its attribute");
}

void Renderer::render_for(const Node& node, std::string& out) {
    const Value iterable = eval(*node.kids[0]);
    const Data& d = iterable.data;
    // The items by index, without copying a list or splitting a string into a string per character.
    std::optional<Chars> chars;
    std::vector<std::string> keys;
    size_t count = 0;
    if (!iterable.defined || d.is_null()) {
    } else if (d.is_array()) {
        count = d.size();
    } else if (d.is_object()) {
        for (const auto& [k, v] : d.items()) keys.push_back(k);
        count = keys.size();
    } else if (d.is_string()) {
        chars.emplace(d.get_ref<const std::string&>());
        count = chars->size();
    } else {
        fail(node.line, shown(d) + " is not iterable");
    }
    const auto item_at = [&](size_t k) -> Data {
        if (d.is_array()) return d[k];
        if (chars) return Data(chars->at(k));
        return Data(keys[k]);
    };
    const auto bind = [&](Scope& scope, const Data& item) {
        if (node.names.size() == 1) {
            scope[node.names[0]] = Value(item);
            return;
        }
        if (!item.is_array() || item.size() != node.names.size())
            fail(node.line,
                 "cannot unpack " + shown(item) + " into " + std::to_string(node.names.size()) + " loop variables");
        for (size_t k = 0; k < node.names.size(); ++k) scope[node.names[k]] = Value(item[k]);
    };
    std::vector<size_t> kept;  // the indices of the items that pass `for x in xs if cond`; all without one
    if (node.kids[2]) {        // loop.* counts the items that pass
        for (size_t k = 0; k < count; ++k) {
            scopes_.emplace_back();
            bind(scopes_.back(), item_at(k));
            const bool keep = truthy(eval(*node.kids[2]));
            scopes_.pop_back();
            if (keep) kept.push_back(k);
        }
        count = kept.size();
    }
    const auto nth = [&](size_t k) { return item_at(node.kids[2] ? kept[k] : k); };
    if (count == 0) {
        if (node.kids[3]) render(*node.kids[3], out);
        return;
    }
    const int64_t n = static_cast<int64_t>(count);
    Data previous;
    Data current = nth(0);
    LoopState state;
    state.length = n;
    for (int64_t k = 0; k < n; ++k) {
        charge(1, node.line);
        Data next = k + 1 < n ? nth(static_cast<size_t>(k + 1)) : Data();
        scopes_.emplace_back();
        bind(scopes_.back(), current);
        state.index0 = k;
        state.previous = &previous;
        state.next = &next;
        Value loop;
        loop.loop = &state;
        scopes_.back()["loop"] = std::move(loop);
        render(*node.kids[1], out);
        scopes_.pop_back();
        if (flow_ == Flow::break_loop) {
            flow_ = Flow::normal;
            break;
        }
        flow_ = Flow::normal;
        previous = std::move(current);
        current = std::move(next);
    }
}

Value Renderer::macro(const Node& node) {
    return Value::callable([this, &node](const Arguments& args, int line) -> Value {
        // A recursive macro is a few levels of the renderer per call: counted on its own for a clear message, from
        // before its defaults are evaluated (`macro f(a=f())` recurses there).
        if (calls_ >= limits_.max_call_depth)
            fail(line, "macro calls nested more than " + std::to_string(limits_.max_call_depth) +
                           " deep (RenderLimits::max_call_depth), in '" + node.text + "'");
        const Deeper deeper(*this, line);  // and a call's frames count towards the render's depth
        struct Call {
            int& calls;
            explicit Call(int& c) : calls(++c) {}
            ~Call() { --calls; }
            Call(const Call&) = delete;
            Call& operator=(const Call&) = delete;
        } call(calls_);
        Scope local;
        size_t positional = 0;
        for (const auto& [name, value] : args) {
            if (name.empty()) {
                if (positional >= node.names.size())
                    fail(line, "macro '" + node.text + "' takes " + std::to_string(node.names.size()) + " arguments");
                local[node.names[positional++]] = value;
            } else if (std::find(node.names.begin(), node.names.end(), name) == node.names.end()) {
                fail(line, "macro '" + node.text + "' has no parameter '" + name + "'");
            } else {
                local[name] = value;
            }
        }
        // A macro sees the template's variables and its own, not its caller's locals.
        std::vector<Scope> callers(std::make_move_iterator(scopes_.begin() + 2),
                                   std::make_move_iterator(scopes_.end()));
        scopes_.resize(2);
        for (size_t k = 0; k < node.names.size(); ++k)
            if (!local.count(node.names[k]))
                local[node.names[k]] = node.kids[k + 1] ? eval(*node.kids[k + 1]) : Value::undefined();
        scopes_.push_back(std::move(local));
        std::string out = capture(*node.kids[0]);
        scopes_.pop_back();
        for (auto& scope : callers) scopes_.push_back(std::move(scope));
        flow_ = Flow::normal;
        return Value(Data(std::move(out)));
    });
}

Value Renderer::eval(const Node& node) {
    const Deeper deeper(*this, node.line);
    switch (node.kind) {
        case Kind::literal: return Value(node.literal);
        case Kind::name: return lookup(node.text, node.line);
        case Kind::attribute: return member_of(*node.kids[0], Data(node.text), node.line);
        case Kind::item: return item(node);
        case Kind::slice: return slice(node);
        case Kind::list:
        case Kind::tuple: return list_literal(node);
        case Kind::dict: return dict_literal(node);
        case Kind::ternary: return conditional(node);
        case Kind::unary: return unary(node);
        case Kind::binary: return binary(node);
        case Kind::call: return call(node);
        case Kind::filter: return filter(node);
        case Kind::test: return test(node);
        default: fail(node.line, "not an expression");
    }
}

Value Renderer::item(const Node& node) {
    const Value key = eval(*node.kids[1]);
    return member_of(*node.kids[0], key.data, node.line);
}

Value Renderer::list_literal(const Node& node) {
    Data out = Data::array();
    size_t bytes = kItemBytes;
    for (const auto& kid : node.kids) {
        Value item = eval(*kid);
        bytes = weigh(item.data, 1, bytes);  // the list one level up: [[[...]]] is bounded here
        out.push_back(std::move(item.data));
    }
    return Value(out);
}

Value Renderer::dict_literal(const Node& node) {
    Data out = Data::object();
    size_t bytes = kItemBytes;
    for (size_t k = 0; k + 1 < node.kids.size(); k += 2) {
        const Value key = eval(*node.kids[k]);
        if (!key.data.is_string()) fail(node.line, "dict keys must be strings here");
        Value item = eval(*node.kids[k + 1]);
        bytes = weigh(item.data, 1, bytes + key.data.get_ref<const std::string&>().size());
        out[key.data.get<std::string>()] = std::move(item.data);
    }
    return Value(out);
}

Value Renderer::conditional(const Node& node) {
    if (truthy(eval(*node.kids[0]))) return eval(*node.kids[1]);
    return node.kids[2] ? eval(*node.kids[2]) : Value::undefined();
}

Arguments Renderer::arguments(const Node& node, size_t first) {
    Arguments args;
    for (size_t k = first; k < node.kids.size(); ++k) args.emplace_back(node.names[k], eval(*node.kids[k]));
    return args;
}

// `object.key` and `object[key]`: a variable's member is read where the variable lives, so `messages[0]` in a
// loop does not copy every message each time.
Value Renderer::member_of(const Node& object, const Data& key, int line) {
    if (object.kind == Kind::name) {
        const Deeper deeper(*this, object.line);
        const Value* found = find(object.text);
        if (found == nullptr) return Value::undefined();
        if (found->loop != nullptr) return admit(loop_member(*found->loop, key), line);
        return admit(member(*found, key, line), line);
    }
    return member(eval(object), key, line);
}

Value Renderer::member(const Value& object, const Data& key, int line) {
    if (!object.defined) return Value::undefined();
    const Data& d = object.data;
    if (d.is_object() && key.is_string()) {
        const auto found = d.find(key.get<std::string>());
        return found == d.end() ? Value::undefined() : Value(*found);
    }
    if ((d.is_array() || d.is_string()) && key.is_number_integer()) {
        if (key.is_number_unsigned() && key.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
            return Value::undefined();
        std::optional<Chars> chars;
        if (d.is_string()) {
            charge(d.get_ref<const std::string&>().size() / kBytesPerStep, line);
            chars.emplace(d.get_ref<const std::string&>());
        }
        const int64_t size = static_cast<int64_t>(chars ? chars->size() : d.size());
        int64_t k = key.get<int64_t>();
        if (k < 0) k += size;
        if (k < 0 || k >= size) return Value::undefined();
        return chars ? Value(Data(chars->at(static_cast<size_t>(k)))) : Value(d[static_cast<size_t>(k)]);
    }
    return Value::undefined();
}

Value Renderer::slice(const Node& node) {
    const Value object = eval(*node.kids[0]);
    const auto bound = [&](const NodePtr& n) -> std::optional<int64_t> {
        if (!n) return std::nullopt;
        const Value v = eval(*n);
        if (v.data.is_null()) return std::nullopt;
        return as_integer(v.data, "a slice bound", node.line);
    };
    const std::optional<int64_t> a = bound(node.kids[1]), b = bound(node.kids[2]), c = bound(node.kids[3]);
    const bool text = object.data.is_string();
    std::optional<Chars> chars;
    if (text)
        chars.emplace(object.data.get_ref<const std::string&>());
    else if (!object.data.is_array())
        fail(node.line, "only lists and strings can be sliced");
    const int64_t n = static_cast<int64_t>(text ? chars->size() : object.data.size());
    const int64_t step = c.value_or(1);
    if (step == 0) fail(node.line, "a slice step of 0");
    const auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
        if (!v) return fallback;
        int64_t x = *v < 0 ? *v + n : *v;  // cannot wrap: n >= 0
        return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(a, step > 0 ? 0 : n - 1), stop = clamp(b, step > 0 ? n : -1);
    Data out = text ? Data("") : Data::array();
    // k steps from start towards stop, never past INT64_MAX (a step of 2**62 is a slice of one item).
    for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
        if (text)
            out.get_ref<std::string&>() += chars->at(static_cast<size_t>(k));
        else
            out.push_back(object.data[static_cast<size_t>(k)]);
        if (step > 0 && stop - k <= step) break;  // k + step >= stop; going down, k >= 0 keeps k + step in range
        k += step;
    }
    return admit(Value(out), node.line);
}

Value Renderer::call(const Node& node) {
    const Node& callee = *node.kids[0];
    Arguments args = arguments(node, 1);
    if (callee.kind == Kind::attribute) {
        const Value object = eval(*callee.kids[0]);
        if (object.defined && !object.function && !(object.data.is_object() && object.data.contains(callee.text)))
            return admit(apply_method(*this, object, callee.text, args, node.line), node.line);
    }
    const Value f = eval(callee);
    if (!f.function)
        fail(node.line,
             (callee.kind == Kind::name ? "'" + callee.text + "'" : std::string("it")) + " is not a function");
    return (*f.function)(args, node.line);
}

Value Renderer::filter(const Node& node) {
    const Value value = eval(*node.kids[0]);
    const Arguments args = arguments(node, 1);
    return admit(apply_filter(*this, node.text, value, args, node.line), node.line);
}

Value Renderer::test(const Node& node) {
    const Value value = eval(*node.kids[0]);
    const bool result = apply_test(*this, node.text, value, arguments(node, 1), node.line);
    return Value(Data(node.negated ? !result : result));
}

}  // namespace rudder::jinja
