// exclude_words: none of the given words appears in the text. A hard constraint in both families: every spelling
// of a word that is one token (as written, lowercase, capitalised; with and without a leading space, which
// byte-level BPE spells as another token) is forbidden at every position. A spelling of several tokens (BPE) is
// blocked where its other tokens are already in place (discrete family): the last one missing is forbidden there.
// Two of its tokens unmasked in the same step can still complete one, which the verdict reports.
#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "../common/params.hpp"

namespace {

std::string lowercase(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || (c & 0x80) != 0; }

// How many times `word` occurs in `text` as a whole word, ignoring ASCII case.
int64_t whole_word_count(const std::string& text, const std::string& word) {
    const std::string t = lowercase(text), w = lowercase(word);
    int64_t count = 0;
    for (size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) {
        const bool starts = at == 0 || !is_word_char(t[at - 1]);
        const bool ends = at + w.size() == t.size() || !is_word_char(t[at + w.size()]);
        count += starts && ends ? 1 : 0;
    }
    return count;
}

class ExcludeWords final : public rudder::Controller {
public:
    ExcludeWords(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        const nlohmann::json words = p->array("words", rudder::json_input::kRequired).value_or(nlohmann::json::array());
        for (size_t i = 0; i < words.size(); ++i) {
            if (!words[i].is_string() || words[i].get<std::string>().empty() ||
                words[i].get<std::string>().find_first_of(" \t\n") != std::string::npos)
                p->issues().push_back({p->pointer("words") + "/" + std::to_string(i),
                                       "expected a word (a non-empty string without spaces), got " + words[i].dump()});
            else
                words_.push_back(words[i].get<std::string>());
        }
        if (p->issues().empty() && words.empty()) p->issue("words", "give at least one word");
        p.finish();
    }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        single_.clear();
        sequences_.clear();
        std::set<std::vector<int64_t>> seen;
        for (const auto& word : words_) {
            std::string capitalised = lowercase(word);
            capitalised[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(capitalised[0])));
            for (const std::string& form : {word, lowercase(word), capitalised})
                for (const std::string& spelling : {form, " " + form}) {
                    std::vector<int64_t> ids = run_.tokenize(spelling);
                    // A word tokenizer reads an unknown word as unk: there is nothing to ban, and unk is not it.
                    if (ids.empty() || std::find(ids.begin(), ids.end(), run.unk_id) != ids.end()) continue;
                    if (!seen.insert(ids).second) continue;
                    if (ids.size() == 1)
                        single_.push_back(ids[0]);
                    else
                        sequences_.push_back(std::move(ids));
                }
        }
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        const rudder_run_info& run = run_.info();
        const rudder::Rows rows(step, run);
        rudder::TokenMask mask(out, run, rudder::TokenMask::kForbid);
        const bool placed = run.family == RUDDER_FAMILY_DISCRETE && step.tokens != nullptr && !sequences_.empty();
        rudder::View<const int64_t> tokens;
        if (placed) tokens = rudder::View<const int64_t>(step.tokens);
        for (int64_t r = 0; r < rows.size(); ++r) {
            for (int64_t id : single_) mask.forbid(r, id);
            if (!placed) continue;
            const int64_t b = rows.batch(r), i = rows.position(r);
            for (const auto& s : sequences_) {
                const int64_t n = static_cast<int64_t>(s.size());
                for (int64_t k = 0; k < n; ++k) {  // position i as the sequence's k-th token
                    const int64_t start = i - k;
                    if (start < 0 || start + n > run.seq_len) continue;
                    bool rest_in_place = true;
                    for (int64_t j = 0; j < n && rest_in_place; ++j)
                        rest_in_place = j == k || tokens(b, start + j) == s[static_cast<size_t>(j)];
                    if (rest_in_place) mask.forbid(r, s[static_cast<size_t>(k)]);
                }
            }
        }
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        const std::string text = sample.text != nullptr ? sample.text : "";
        int64_t found = 0;
        for (const auto& word : words_) found += whole_word_count(text, word);
        verdict.score = static_cast<double>(found);
        verdict.satisfied = found == 0 ? 1 : 0;
    }

private:
    std::vector<std::string> words_;
    std::vector<int64_t> single_;                  // one-token spellings, resolved at begin()
    std::vector<std::vector<int64_t>> sequences_;  // spellings of several tokens
};

}  // namespace

static const char kSchema[] = R"schema({
  "type": "object",
  "properties": {
    "words": { "type": "array", "minItems": 1, "items": { "type": "string", "minLength": 1 },
               "description": "words the text must not contain (whole words, any ASCII case)" }
  },
  "required": ["words"], "additionalProperties": false
})schema";

RUDDER_CONTROLLER(exclude_words_desc, ExcludeWords, "exclude_words", "1.0.0",
                  "the text contains none of the given words (hard constraint)", kSchema,
                  RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_IGNORES_X0 |
                      RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-exclude-words", &exclude_words_desc)
