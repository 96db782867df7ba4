// E2E meaning representations ("name[The Eagle], food[French], familyFriendly[yes]") and whether a text realises
// each value, shared by the controllers that judge semantic content. A value is realised when the text contains it
// (case-insensitively, with '-' read as a space); familyFriendly and eatType, whose values are rarely written as
// such, use the phrasings E2E's references use for them. This is the judge's definition, written down in
// docs/recipes.md; it is a string match, not an understanding of the text.
#pragma once

#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace rudder::meaning {

struct Field {
    std::string attribute, value;
};

// Parses "attr[value], attr[value], ..."; throws Error naming the problem.
inline std::vector<Field> parse(const std::string& mr) {
    std::vector<Field> out;
    size_t i = 0;
    while (i < mr.size()) {
        while (i < mr.size() && (mr[i] == ' ' || mr[i] == ',')) ++i;
        if (i >= mr.size()) break;
        const size_t open = mr.find('[', i), close = open == std::string::npos ? open : mr.find(']', open);
        if (open == std::string::npos || close == std::string::npos)
            throw Error("meaning representation \"" + mr + "\": expected attribute[value] at character " + std::to_string(i + 1));
        Field f{mr.substr(i, open - i), mr.substr(open + 1, close - open - 1)};
        while (!f.attribute.empty() && f.attribute.back() == ' ') f.attribute.pop_back();
        if (f.attribute.empty() || f.value.empty())
            throw Error("meaning representation \"" + mr + "\": empty attribute or value at character " + std::to_string(i + 1));
        out.push_back(std::move(f));
        i = close + 1;
    }
    if (out.empty()) throw Error("meaning representation \"" + mr + "\" has no attribute[value] field");
    return out;
}

inline std::string normalised(std::string s) {
    for (char& c : s) c = c == '-' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Whether `text` realises the field's value (see the top of this file).
inline bool realised(const Field& f, const std::string& text) {
    const std::string t = " " + normalised(text) + " ";
    auto has = [&](const std::string& phrase) { return t.find(phrase) != std::string::npos; };
    if (f.attribute == "familyFriendly") {
        const bool negative = has("not family friendly") || has("not kid friendly") || has("not child friendly") ||
                              has("not children friendly") || has("non family friendly") || has("no kids") ||
                              has("not a family friendly") || has("not kids friendly") || has("adults only");
        const bool positive = has("family friendly") || has("kid friendly") || has("child friendly") ||
                              has("children friendly") || has("kids friendly") || has("for families");
        return f.value == "yes" ? positive && !negative : negative;
    }
    if (f.attribute == "eatType" && normalised(f.value) == "restaurant") return has("restaurant");
    return has(normalised(f.value));
}

}  // namespace rudder::meaning
