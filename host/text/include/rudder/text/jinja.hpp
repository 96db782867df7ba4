// Jinja templates as Hugging Face renders chat templates: the subset of Jinja2 that tokenizer_config.json templates
// use, parsed once and rendered with JSON variables. Written here because no C++ Jinja2 comes with Debian; checked
// against Hugging Face's own renderer (@huggingface/jinja) in tests/text.
//
//   rudder::JinjaTemplate t("{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}");
//   std::string text = t.render({{"messages", messages}});
//
// As transformers compiles chat templates: trim_blocks and lstrip_blocks on, one trailing newline of the template
// dropped. Statements: if/elif/else, for (with loop.index, index0, first, last, length, revindex, revindex0; `for a, b
// in ...`, `for x in xs if cond`, `else`), set (a name, `ns.attr`, or a block), generation (rendered as its body),
// break, continue, macro (called with positional and keyword arguments). Expressions: literals, lists, dicts, tuples,
// attribute and item access, slices, `x if c else y`, and/or/not, comparisons, in, is (tests), + - * / // % ** ~,
// filters, calls. Globals: raise_exception(message), namespace(...), range(...), strftime_now(format). Anything else is
// a JinjaError that says what and where; so is a template error at render (raise_exception's message, an operation on
// wrong types), and so is a template past a limit (below): no template, however hostile, crashes the process, runs
// without end or takes unbounded memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace rudder {

class JinjaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What a template may nest when parsed: blocks inside blocks (if, for, macro, set, generation), and an expression's
// depth (parentheses, lists, arguments, and chains of operators, filters or attributes, each a level of the tree the
// renderer walks). Real chat templates nest fewer than 10 deep; these bound the parser's and renderer's recursion.
inline constexpr int kJinjaMaxBlockNesting = 64;
inline constexpr int kJinjaMaxExpressionDepth = 64;

// What one render may spend; past any of them the render stops with a JinjaError naming the limit. The defaults hold
// when a caller passes nothing: far above any real chat template (a conversation of thousands of messages renders
// in well under a million steps and a few MB), and small enough that a hostile template ends within seconds, in tens
// of MB, on a 512 KiB thread stack under AddressSanitizer (tests/text, text.Jinja.*).
struct RenderLimits {
    // Work: a step per statement rendered and expression evaluated, plus a step per 256 bytes a value weighs where a
    // value is looked up, copied or built. 10 million steps are about a second or two of rendering.
    uint64_t max_steps = 10'000'000;
    // The rendered text, in bytes (16 times `rudder serve`'s default request body).
    size_t max_output_bytes = size_t{16} << 20;
    // Any one value built or held during the render (a string's bytes; a list or dict as 16 bytes an item plus its
    // items), the variables included; the same bound for the text a `{% set %}` block or a macro call captures.
    size_t max_value_bytes = size_t{16} << 20;
    // Lists and dicts inside each other, in the variables and in values built (tojson, comparisons and copies recurse
    // over them).
    int max_value_depth = 64;
    // Macro calls inside each other (a recursive macro; one over a JSON schema's levels recurses a few deep).
    int max_call_depth = 32;
    // The renderer's recursion as a whole: statements and expressions inside each other, across macro calls (a
    // recursive macro is about 6 levels a call). At most about 0.9 KB of stack a level under AddressSanitizer, so
    // 256 levels, and a value's 64 levels of tojson on top, take well under half of a 512 KiB stack.
    int max_render_depth = 256;
    // Polled every 1,024 steps when set: true stops the render with a JinjaError ("cancelled"), so a server can end
    // a render at its request's deadline or at a drain. It must not throw.
    std::function<bool()> cancelled;
};

// Whether `value` nests lists and objects more than `max_depth` deep (a scalar is depth 0, [] and [1] depth 1).
// Iterative, so safe on any value; copying a JSON value recurses, so a caller checks a value from outside with it
// before copying it into a template's variables.
bool nests_deeper_than(const nlohmann::ordered_json& value, int max_depth);

class JinjaTemplate {
public:
    // Parses `source`; JinjaError with the line of the first problem (a nesting limit above included).
    explicit JinjaTemplate(const std::string& source);
    ~JinjaTemplate();
    JinjaTemplate(JinjaTemplate&&) noexcept;
    JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

    // The template with `variables` (a JSON object: name -> value) as its globals. Objects keep their keys' order.
    // JinjaError for any problem of the template or its variables, a limit of `limits` passed included.
    std::string render(const nlohmann::ordered_json& variables, const RenderLimits& limits = RenderLimits()) const;

    struct Node;

private:
    std::shared_ptr<const Node> root_;
};

}  // namespace rudder
