// The tree a Jinja template parses to (parser.hpp makes it, renderer.hpp walks it): statements and expressions as
// one kind of node.
#pragma once

#include <rudder/text/jinja.hpp>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rudder {

namespace jinja {
using Data = nlohmann::ordered_json;  // a template's values are JSON, objects keeping their keys' order
}  // namespace jinja

struct JinjaTemplate::Node {
    enum class Kind {
        // statements
        sequence,
        text,
        emit,
        if_,
        for_,
        set,
        set_block,
        macro,
        break_,
        continue_,
        // expressions
        literal,
        name,
        attribute,
        item,
        slice,
        call,
        filter,
        test,
        unary,
        binary,
        ternary,
        list,
        dict,
        tuple
    };
    Kind kind;
    int line = 1;
    std::string text;                               // name, operator, filter/test/attribute name, literal text
    jinja::Data literal;                            // literal
    std::vector<std::shared_ptr<const Node>> kids;  // operands, statements, arguments
    std::vector<std::string> names;                 // keyword names per argument ("" positional); loop targets
    bool negated = false;                           // `is not`
    int height = 1;                                 // of the subtree: the renderer recurses this deep through it
};

namespace jinja {

using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<const Node>;
using Kind = Node::Kind;

}  // namespace jinja
}  // namespace rudder
