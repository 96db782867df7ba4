// The Jinja subset's renderer: a walk of the tree (ast.hpp) over values.hpp's values, every step, byte and level
// counted against RenderLimits. Its filters, tests, methods and globals are tables (builtins.hpp) that call back the
// accounting below.
#pragma once

#include "values.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rudder::jinja {

constexpr uint64_t kPollSteps = 1024;  // how often RenderLimits::cancelled is asked
constexpr size_t kBytesPerStep = 256;  // a value's copy or build costs a step per this many bytes
constexpr size_t kItemBytes = 16;      // what a list's or dict's item weighs besides its contents

using Scope = std::map<std::string, Value>;

class Renderer {
public:
    Renderer(const Data& variables, const RenderLimits& limits);

    void render(const Node& node, std::string& out);
    int line() const { return line_; }

    // The accounting, for the builtins too.
    const RenderLimits& limits() const { return limits_; }
    void charge(uint64_t steps, int line) {
        steps_ += steps;
        if (steps_ > limits_.max_steps || steps_ >= next_poll_) checkpoint(line);
    }
    // Fails unless a value of `have` bytes may grow by `more`.
    void may_grow(size_t have, size_t more, int line) const {
        if (more > limits_.max_value_bytes || have > limits_.max_value_bytes - more) too_large(line);
    }
    [[noreturn]] [[gnu::noinline]] void too_large(int line) const;
    // What `d`, `level` containers deep, weighs (in the units of max_value_bytes) added to `so_far`; fails past the
    // value limits. Its recursion is bounded by max_value_depth, whatever `d`'s depth.
    size_t weigh(const Data& d, int level, size_t so_far);
    // A value built or copied: within the value limits, and its bytes charged as steps.
    Value admit(Value v, int line);
    // x.name and x[key]: an object's member, a list's or a string's index; undefined when there is none.
    Value member(const Value& object, const Data& key, int line);

private:
    enum class Flow { normal, break_loop, continue_loop };

    // A level of the renderer's recursion (a statement or expression), counted as a step and against the depth.
    class Deeper {
    public:
        Deeper(Renderer& r, int line) : r_(r) {
            r_.line_ = line;
            r_.charge(1, line);
            if (++r_.depth_ > r_.limits_.max_render_depth) r_.too_deep(line);
        }
        ~Deeper() { --r_.depth_; }
        Deeper(const Deeper&) = delete;
        Deeper& operator=(const Deeper&) = delete;

    private:
        Renderer& r_;
    };

    // render() and eval() are the renderer's recursion: each case's work is a function of its own, out of line, so
    // that their frames stay small (under AddressSanitizer every temporary takes its slot in the frame of the
    // function it is in: eval was 3.5 KB with its cases inlined, a recursive macro 9.7 KB a call).
    [[gnu::noinline]] void emit(const Node& node, std::string& out);
    [[gnu::noinline]] void render_if(const Node& node, std::string& out);
    [[gnu::noinline]] void set(const Node& node);
    [[gnu::noinline]] void set_block(const Node& node);
    [[gnu::noinline]] void define(const Node& node);
    [[gnu::noinline]] void render_for(const Node& node, std::string& out);
    Value macro(const Node& node);

    Value eval(const Node& node);
    [[gnu::noinline]] Value item(const Node& node);
    [[gnu::noinline]] Value list_literal(const Node& node);
    [[gnu::noinline]] Value dict_literal(const Node& node);
    [[gnu::noinline]] Value conditional(const Node& node);
    [[gnu::noinline]] Value unary(const Node& node);   // operators.cpp
    [[gnu::noinline]] Value binary(const Node& node);  // operators.cpp
    [[gnu::noinline]] Arguments arguments(const Node& node, size_t first);
    [[gnu::noinline]] Value member_of(const Node& object, const Data& key, int line);
    [[gnu::noinline]] Value slice(const Node& node);
    [[gnu::noinline]] Value call(const Node& node);
    [[gnu::noinline]] Value filter(const Node& node);
    [[gnu::noinline]] Value test(const Node& node);

    // The failures are out of line: their messages' temporaries would take room in every frame of the recursion.
    [[noreturn]] [[gnu::noinline]] void too_deep(int line) const;
    [[gnu::noinline]] void checkpoint(int line);

    // Text into the output or a capture, within its limit.
    [[gnu::noinline]] void write(std::string& out, const std::string& text, int line);
    // The text of a `{% set %}` block or a macro's body: a value, so within max_value_bytes while it is written.
    [[gnu::noinline]] std::string capture(const Node& body);

    const Value* find(const std::string& name) const;
    [[gnu::noinline]] Value lookup(const std::string& name, int line);
    void assign(const Node& node, Value value);

    const RenderLimits& limits_;
    std::vector<Scope> scopes_;
    Flow flow_ = Flow::normal;
    uint64_t steps_ = 0;
    uint64_t next_poll_ = kPollSteps;
    int depth_ = 0;         // the renderer's recursion
    int calls_ = 0;         // macro calls inside each other
    int line_ = 1;          // of the node being rendered, for a message
    size_t out_limit_ = 0;  // of the text being written: the output's, or a value's while capturing
    int capturing_ = 0;
};

}  // namespace rudder::jinja
