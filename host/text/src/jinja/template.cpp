// A Jinja2 subset for chat templates (rudder/text/jinja.hpp), a small library in this folder: the scanner (lexer),
// the parser and its tree (parser, ast), the values (values), the renderer (renderer, operators) and what it calls
// by name (builtins: filters, tests, methods, globals). Here, the public face.
#include <rudder/text/jinja.hpp>

#include "parser.hpp"
#include "renderer.hpp"

#include <climits>
#include <exception>
#include <new>
#include <optional>
#include <vector>

namespace rudder {

using jinja::Data;

bool nests_deeper_than(const nlohmann::ordered_json& value, int max_depth) {
    // (container, its next child, its depth) on an explicit stack: the value may be nested a million deep.
    struct Open {
        const Data* container;
        Data::const_iterator next;
        int depth;
    };
    if (!value.is_structured()) return max_depth < 0;
    std::vector<Open> stack{{&value, value.cbegin(), 1}};
    if (max_depth < 1) return true;
    while (!stack.empty()) {
        Open& top = stack.back();
        if (top.next == top.container->cend()) {
            stack.pop_back();
            continue;
        }
        const Data& child = *top.next++;
        if (!child.is_structured()) continue;
        const int depth = top.depth + 1;
        if (depth > max_depth) return true;
        stack.push_back({&child, child.cbegin(), depth});
    }
    return false;
}

JinjaTemplate::JinjaTemplate(const std::string& source) : root_(jinja::parse(source)) {}
JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& variables, const RenderLimits& limits) const {
    if (!variables.is_object()) throw JinjaError("a template's variables must be a JSON object");
    // The object itself is one level (a caller's INT_MAX is taken as no bound, not wrapped).
    if (nests_deeper_than(variables, limits.max_value_depth < INT_MAX ? limits.max_value_depth + 1 : INT_MAX))
        throw JinjaError("a template's variables nest lists and objects more than " +
                         std::to_string(limits.max_value_depth) + " deep (RenderLimits::max_value_depth)");
    std::optional<jinja::Renderer> renderer;
    try {
        renderer.emplace(variables, limits);
        std::string out;
        renderer->render(*root_, out);
        return out;
    } catch (const JinjaError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw JinjaError("chat template line " + std::to_string(renderer ? renderer->line() : 1) +
                         ": out of memory while rendering");
    } catch (const std::exception&) {
        // Every operation checks its operands; this is the net under one that does not, so that a template's
        // problem is still a JinjaError, with where it happened.
        throw JinjaError("chat template line " + std::to_string(renderer ? renderer->line() : 1) +
                         ": an operation on values it does not take (an internal error of the renderer)");
    }
}

}  // namespace rudder
