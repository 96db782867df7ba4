#include <rudder/text/meaning.hpp>

#include <cctype>
#include <set>
#include <stdexcept>
#include <utility>

namespace rudder::meaning {
using json = nlohmann::json;

std::vector<Field> parse(const std::string& mr) {
    std::vector<Field> out;
    size_t i = 0;
    while (i < mr.size()) {
        while (i < mr.size() && (mr[i] == ' ' || mr[i] == ',')) ++i;
        if (i >= mr.size()) break;
        const size_t open = mr.find('[', i), close = open == std::string::npos ? open : mr.find(']', open);
        if (open == std::string::npos || close == std::string::npos)
            throw std::invalid_argument("meaning representation \"" + mr +
                                        "\": expected attribute[value] at character " + std::to_string(i + 1));
        Field f{mr.substr(i, open - i), mr.substr(open + 1, close - open - 1)};
        while (!f.attribute.empty() && f.attribute.back() == ' ') f.attribute.pop_back();
        if (f.attribute.empty() || f.value.empty())
            throw std::invalid_argument("meaning representation \"" + mr +
                                        "\": empty attribute or value at character " + std::to_string(i + 1));
        out.push_back(std::move(f));
        i = close + 1;
    }
    if (out.empty()) throw std::invalid_argument("meaning representation \"" + mr + "\" has no attribute[value] field");
    return out;
}

namespace {

std::string normalised(std::string s) {
    for (char& c : s) c = c == '-' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

bool realised(const Field& f, const std::string& text) {
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

json read_attribute_classes(json_input::ObjectReader& parent, const std::string& key, json_input::Need need) {
    const json attribute = parent.object(key, need).value_or(json::object());
    if (!parent.has(key) || !attribute.is_object()) return attribute;
    json_input::ObjectReader r(attribute, parent.pointer(key), parent.issues());
    r.text("field", json_input::kRequired);
    const json classes = r.object("classes", json_input::kRequired).value_or(json::object());
    if (r.has("classes") && classes.size() < 2)
        r.issue("classes", "expected at least two classes, each {\"name\": [MR values]}");
    json_input::ObjectReader values(classes, r.pointer("classes"), parent.issues());
    std::set<std::string> seen;
    for (const auto& item : classes.items())
        for (const auto& v : values.texts(item.key(), json_input::kRequired).value_or(std::vector<std::string>{}))
            if (!seen.insert(v).second) values.issue(item.key(), "the value \"" + v + "\" is in two classes");
    r.reject_unknown_keys();
    return attribute;
}

std::string attribute_class(const json& attribute, const std::string& mr) {
    const std::string field = attribute.at("field").get<std::string>();
    for (const auto& f : parse(mr)) {
        if (f.attribute != field) continue;
        for (const auto& item : attribute.at("classes").items())
            for (const auto& value : item.value())
                if (value == f.value) return item.key();
    }
    return "";
}

std::string record_json(const std::string& mr) {
    std::set<std::string> seen;
    std::string text = "{";
    for (const Field& f : parse(mr)) {
        if (!seen.insert(f.attribute).second)
            throw std::invalid_argument("the attribute '" + f.attribute + "' is given twice in '" + mr + "'");
        if (text.size() > 1) text += ", ";
        text += json(f.attribute).dump() + ": " + json(f.value).dump();
    }
    return text + "}";
}

std::string data_to_text_prompt(const std::string& record) { return "Data: " + record + "\nText:\n"; }

std::string text_to_data_prompt(const std::string& text) { return "Text: " + text + "\nData:\n"; }

std::vector<PromptedText> prompted_texts(const std::string& mr, const std::string& ref) {
    const std::string record = record_json(mr);
    return {{data_to_text_prompt(record), ref}, {text_to_data_prompt(ref), record}, {"", ref}};
}

}  // namespace rudder::meaning
