// E2E meaning representations ("name[The Eagle], food[French], familyFriendly[yes]"): parsing them, whether a text
// realises each value, and attributes whose values fall into classes (the sentiment targets). Shared by the
// controllers that judge semantic content (cfg, semantic), the trainer (attribute classifiers) and `rudder eval`.
//
// A value is realised when the text contains it (case-insensitively, with '-' read as a space); familyFriendly and
// eatType, whose values are rarely written as such, use the phrasings E2E's references use for them. This is the
// judge's definition, written down in docs/recipes.md; it is a string match, not an understanding of the text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include <rudder/rudder_json.hpp>

namespace rudder::meaning {

struct Field {
    std::string attribute, value;
};

// Parses "attr[value], attr[value], ..."; throws std::invalid_argument naming the problem.
std::vector<Field> parse(const std::string& mr);

// Whether `text` realises the field's value (see the top of this file).
bool realised(const Field& field, const std::string& text);

// An attribute's classes as meaning representations give them (the attribute_classifier's labels, the sentiment
// targets of `rudder eval`): {"field": "customer rating", "classes": {"negative": ["low", "1 out of 5"],
// "positive": ["high", "5 out of 5"]}}, at least two classes, no value in two. Reads it from `parent`'s `key`,
// recording problems in the reader's issues; returns an empty object when it is missing (an issue if required).
nlohmann::json read_attribute_classes(json_input::ObjectReader& parent, const std::string& key, json_input::Need need);

// The class the meaning representation's field value falls in, or "" (no such field, or a value of no class).
// Throws std::invalid_argument for a malformed meaning representation.
std::string attribute_class(const nlohmann::json& attribute, const std::string& mr);

// The meaning representation as a JSON record, its fields in their order with E2E's attribute names as keys:
// {"name": "The Eagle", "eatType": "coffee shop"} (separators ", " and ": ", non-ASCII kept as UTF-8). Throws
// std::invalid_argument for a malformed representation or an attribute given twice.
std::string record_json(const std::string& mr);

// The prompt format of the E2E model in MDLM's layout (docs/models.md, "e2e-mdlm"): a prompt, then its answer, which
// the model writes after it and ends with the end-of-text token. The prompt ends in a newline, so that a byte-level
// BPE tokenizes it the same way alone as before its answer (the answer starts a new pre-token).
struct PromptedText {
    std::string prompt;  // "" for a plain description
    std::string answer;
};
// Data-to-text: "Data: <record>\nText:\n", answered by the description.
std::string data_to_text_prompt(const std::string& record);
// Text-to-data: "Text: <description>\nData:\n", answered by the record.
std::string text_to_data_prompt(const std::string& text);
// The training texts of one E2E row, in this order: data-to-text, text-to-data and the plain description.
std::vector<PromptedText> prompted_texts(const std::string& mr, const std::string& ref);

}  // namespace rudder::meaning
