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
// wrong types).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace rudder {

class JinjaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class JinjaTemplate {
public:
    // Parses `source`; JinjaError with the line of the first problem.
    explicit JinjaTemplate(const std::string& source);
    ~JinjaTemplate();
    JinjaTemplate(JinjaTemplate&&) noexcept;
    JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

    // The template with `variables` (a JSON object: name -> value) as its globals. Objects keep their keys' order.
    std::string render(const nlohmann::ordered_json& variables) const;

    struct Node;

private:
    std::shared_ptr<const Node> root_;
};

}  // namespace rudder
