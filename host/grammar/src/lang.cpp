#include "lang.hpp"

#include <cstdio>
#include <utility>

namespace rudder::grammar {

namespace {

LangPtr make(Lang&& lang) { return std::make_shared<const Lang>(std::move(lang)); }

}  // namespace

LangPtr nothing() {
    static const LangPtr node = make(Lang{});
    return node;
}

LangPtr empty_word() {
    Lang lang;
    lang.kind = Lang::Kind::sequence;
    return make(std::move(lang));
}

bool is_nothing(const LangPtr& lang) { return lang->kind == Lang::Kind::nothing; }

LangPtr byte_range(uint8_t lo, uint8_t hi) {
    Lang lang;
    lang.kind = Lang::Kind::bytes;
    lang.byte_ranges = {{lo, hi}};
    return make(std::move(lang));
}

LangPtr literal(const std::string& bytes) {
    std::vector<LangPtr> parts;
    for (char c : bytes) parts.push_back(byte_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c)));
    return sequence(std::move(parts));
}

LangPtr code_points(const CodePointSet& set) {
    if (set.without_surrogates().empty()) return nothing();
    Lang lang;
    lang.kind = Lang::Kind::code_points;
    lang.set = set.without_surrogates();
    return make(std::move(lang));
}

LangPtr sequence(std::vector<LangPtr> parts) {
    Lang lang;
    lang.kind = Lang::Kind::sequence;
    for (auto& part : parts) {
        if (is_nothing(part)) return nothing();
        if (part->kind == Lang::Kind::sequence) {
            lang.children.insert(lang.children.end(), part->children.begin(), part->children.end());
        } else {
            lang.children.push_back(std::move(part));
        }
    }
    if (lang.children.size() == 1) return lang.children[0];
    return make(std::move(lang));
}

LangPtr choice(std::vector<LangPtr> options) {
    Lang lang;
    lang.kind = Lang::Kind::choice;
    for (auto& option : options) {
        if (!is_nothing(option)) lang.children.push_back(std::move(option));
    }
    if (lang.children.empty()) return nothing();
    if (lang.children.size() == 1) return lang.children[0];
    return make(std::move(lang));
}

LangPtr repeat(LangPtr child, int min, int max) {
    if (max >= 0 && max < min) return nothing();
    if (is_nothing(child)) return min == 0 ? empty_word() : nothing();
    if (min == 1 && max == 1) return child;
    if (max == 0) return empty_word();
    Lang lang;
    lang.kind = Lang::Kind::repeat;
    lang.children = {std::move(child)};
    lang.min = min;
    lang.max = max;
    return make(std::move(lang));
}

LangPtr optional(LangPtr child) { return repeat(std::move(child), 0, 1); }

LangPtr graph(int nodes, std::vector<Lang::Edge> edges, std::vector<int> accepting) {
    Lang lang;
    lang.kind = Lang::Kind::graph;
    lang.nodes = nodes;
    for (auto& edge : edges) {
        if (edge.label == nullptr || !is_nothing(edge.label)) lang.edges.push_back(std::move(edge));
    }
    lang.accepting = std::move(accepting);
    return make(std::move(lang));
}

LangPtr automaton(std::shared_ptr<const Dfa> dfa) {
    if (dfa->empty()) return nothing();
    Lang lang;
    lang.kind = Lang::Kind::automaton;
    lang.dfa = std::move(dfa);
    return make(std::move(lang));
}

LangPtr json_string_contents(std::shared_ptr<const Dfa> decoded) {
    if (decoded->empty()) return nothing();
    Lang lang;
    lang.kind = Lang::Kind::json_string;
    lang.dfa = std::move(decoded);
    return make(std::move(lang));
}

namespace {

std::string escape_of(uint8_t byte) {
    switch (byte) {
        case '"': return "\\\"";
        case '\\': return "\\\\";
        case '\b': return "\\b";
        case '\f': return "\\f";
        case '\n': return "\\n";
        case '\r': return "\\r";
        case '\t': return "\\t";
        default: break;
    }
    if (byte >= 0x20) return "";
    char buffer[8];
    std::snprintf(buffer, sizeof buffer, "\\u%04x", byte);
    return buffer;
}

}  // namespace

const std::string& json_escape(uint8_t byte) {
    static const std::vector<std::string> table = [] {
        std::vector<std::string> escapes(256);
        for (int b = 0; b < 256; ++b) escapes[static_cast<size_t>(b)] = escape_of(static_cast<uint8_t>(b));
        return escapes;
    }();
    return table[byte];
}

}  // namespace rudder::grammar
