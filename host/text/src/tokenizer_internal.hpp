// What the BPE and WordPiece tokenizers share inside rudder_text (not installed): the table of tokens by id, the
// split on added tokens, and reading a tokenizer.json whose refusals name the file and the JSON path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

namespace rudder::tokenizer_internal {

using json = nlohmann::json;

// The whole file, bytes as they are (a regular file of at most kMaxTokenizerFileBytes); throws std::runtime_error
// naming it when it cannot be read.
std::string read_file(const std::string& path);

// Tokens by id and ids by token, as a tokenizer file lists them.
struct TokenTable {
    std::vector<std::string> tokens;  // by id; empty where the file has no token
    std::unordered_map<std::string, int64_t> ids;

    // Throws std::runtime_error starting with `where` for an id out of range, an empty token, or a token or an id
    // that the file gives twice with different partners.
    void add_token(const std::string& text, int64_t id, const std::string& where);
    // The id of `name`, the token that plays `role` ("pad"); -1 for an empty name. A name that is no token is refused,
    // naming `source`.
    int64_t special_id(const std::string& source, const std::string& name, const char* role) const;
    // The token of `id`; std::out_of_range naming the `kind` of vocabulary ("BPE") for an id that is no token.
    const std::string& token_at(int64_t id, const char* kind) const;
    // The id of `token`; -1 if there is none.
    int64_t id_of(const std::string& token) const;
};

// Added tokens, matched in the raw text leftmost and longest first, as Hugging Face's added vocabulary splits.
class AddedTokenSplitter {
public:
    void add(const std::string& content, int64_t id);

    // Calls plain(text) for the text before, between and after the tokens (possibly empty) and token(id) for each
    // token, in order.
    template <class Plain, class Token>
    void split(std::string_view text, Plain&& plain, Token&& token) const {
        size_t plain_begin = 0;
        size_t i = 0;
        while (i < text.size()) {
            const Entry* hit = nullptr;
            for (const Entry& entry : by_first_byte_[static_cast<unsigned char>(text[i])]) {
                if (text.compare(i, entry.content.size(), entry.content) == 0) {
                    hit = &entry;
                    break;
                }
            }
            if (!hit) {
                ++i;
                continue;
            }
            plain(text.substr(plain_begin, i - plain_begin));
            token(hit->id);
            i += hit->content.size();
            plain_begin = i;
        }
        plain(text.substr(plain_begin));
    }

    // The ids of `text`: each added token's, and between them what encode_plain(plain_text, out) appends.
    template <class EncodePlain>
    std::vector<int64_t> encode(std::string_view text, EncodePlain&& encode_plain) const {
        std::vector<int64_t> out;
        split(
            text, [&](std::string_view plain) { encode_plain(plain, out); }, [&](int64_t id) { out.push_back(id); });
        return out;
    }

private:
    struct Entry {
        std::string content;
        int64_t id = -1;
    };
    std::vector<Entry> by_first_byte_[256];  // longest first within a bucket
};

// The JSON path of a member, for messages: "pre_tokenizer.pretokenizers[1].type".
std::string path_of(const std::string& parent, const std::string& key);

// Reads the parts of one tokenizer.json; every refusal names the file (`source`), the JSON path and what Rudder's
// `model` ("BPE", "WordPiece") supports instead.
class JsonFields {
public:
    JsonFields(std::string source, std::string model) : source_(std::move(source)), model_(std::move(model)) {}

    const std::string& source() const { return source_; }
    [[noreturn]] void unsupported(const std::string& path, const std::string& found,
                                  const std::string& supported) const;
    // A member that must be absent, null, or equal to one of `allowed`.
    void expect_member(const json& object, const std::string& parent, const std::string& key,
                       const std::vector<json>& allowed, const std::string& supported) const;
    const json& member(const json& object, const std::string& parent, const std::string& key) const;
    std::string type_of(const json& object, const std::string& path) const;

    // The file's text as a JSON object, with `truncation` and `padding` null (Rudder pads and cuts sequences itself).
    json parse_top_level(std::string_view json_text) const;
    // Each of the file's `added_tokens` (absent or null: none) as (content, id, its JSON path), after checking that it
    // is matched as Rudder matches added tokens: not single_word, lstrip or rstrip, and not normalized when the file
    // has a normaliser (Rudder matches the raw text).
    template <class Add>
    void added_tokens(const json& root, bool has_normalizer, Add&& add) const {
        if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
        const json& added = root["added_tokens"];
        if (!added.is_array()) unsupported("added_tokens", json_input::shown(added), "an array");
        for (size_t i = 0; i < added.size(); ++i) {
            const std::string path = "added_tokens[" + std::to_string(i) + "]";
            const json& token = added[i];
            if (!token.is_object()) unsupported(path, json_input::shown(token), "an object");
            const json& content = member(token, path, "content");
            const json& id = member(token, path, "id");
            if (!content.is_string()) unsupported(path_of(path, "content"), json_input::shown(content), "a string");
            if (!id.is_number_integer()) unsupported(path_of(path, "id"), json_input::shown(id), "an integer");
            expect_member(token, path, "single_word", {false}, "false");
            expect_member(token, path, "lstrip", {false}, "false");
            expect_member(token, path, "rstrip", {false}, "false");
            if (has_normalizer) expect_member(token, path, "normalized", {false}, "false when there is a normalizer");
            add(content.get<std::string>(), id.get<int64_t>(), path);
        }
    }

private:
    std::string source_;
    std::string model_;
};

}  // namespace rudder::tokenizer_internal
