// no_repeats: no word immediately repeated ("of of", "rating rating") and no two punctuation marks in a row ("city..",
// "5,."). A hard constraint in both families, on tokens: a token may not follow or precede one that reads the same
// (case aside), nor a punctuation token another. At each PREDICT step a row may not take what its placed neighbours
// rule out; at each COMMIT (ABI 1.3) the tokens the host drew are kept in position order as long as they fit the
// tokens placed and kept before them, so neighbours unmasked in one step cannot make a pair either. A word spelt by
// several tokens (byte-level BPE) is judged by its tokens: its repetition is not caught.
#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "../common/params.hpp"
#include "../common/placed_tokens.hpp"

namespace {

constexpr int64_t kNone = -1;  // no key: a token that no rule concerns (padding, mask, spaces)

class NoRepeats final : public rudder::Controller {
public:
    NoRepeats(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        marks_ = p->text("punctuation").value_or(".,!?;:");
        words_ = p->boolean("words").value_or(true);
        p.finish();
    }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        const auto V = static_cast<size_t>(run.vocab_size);
        key_.assign(V, kNone);
        punctuation_.assign(V, false);
        punctuation_ids_.clear();
        by_key_.clear();
        std::map<std::string, int64_t> keys;
        const std::optional<rudder::Run::TokenPieces> pieces = run_.token_pieces();
        for (size_t v = 0; v < V; ++v) {
            const auto id = static_cast<int64_t>(v);
            if (id == run.pad_id || id == run.mask_id || id == run.unk_id) continue;
            std::string text;
            text = pieces ? pieces->text[0][v] : run_.token_text(id);
            const std::string key = normalised(text);
            if (key.empty()) continue;
            if (key.find_first_not_of(marks_) == std::string::npos) {
                punctuation_[v] = true;
                punctuation_ids_.push_back(id);
                continue;
            }
            if (!words_ || std::none_of(key.begin(), key.end(), [](char c) { return std::isalnum(uc(c)) != 0; }))
                continue;
            const auto [it, fresh] = keys.emplace(key, static_cast<int64_t>(keys.size()));
            if (fresh) by_key_.emplace_back();
            key_[v] = it->second;
            by_key_[static_cast<size_t>(it->second)].push_back(id);
        }
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        const rudder_run_info& run = run_.info();
        const rudder::Rows rows(step, run);
        rudder::TokenMask mask(out, run, rudder::TokenMask::kForbid);
        // The continuous family places nothing before its rounding (its COMMIT rounds): every neighbour is free.
        if (run.family != RUDDER_FAMILY_DISCRETE || step.tokens == nullptr) return;
        const Placed placed(step, run);
        for (int64_t r = 0; r < rows.size(); ++r) {
            const int64_t b = rows.batch(r), i = rows.position(r);
            for (const int64_t neighbour : {placed(b, i - 1), placed(b, i + 1)}) forbid_beside(neighbour, mask, r);
        }
    }

    // Of the proposed tokens, in position order, those that fit the placed tokens and the ones kept before them.
    void commit(const rudder_step& step, rudder_contribution& out) override {
        const rudder_run_info& run = run_.info();
        const rudder::Rows rows(step, run);
        const rudder::View<const int64_t> proposed(step.proposed);
        rudder::View<uint8_t> rejected(out.rejected);
        out.written |= RUDDER_WROTE_REJECTED;
        rudder::TokenMask mask(out, run, rudder::TokenMask::kForbid);
        Placed placed(step, run);
        for (int64_t r : rudder::layout::rows_in_position_order(rows)) {
            const int64_t b = rows.batch(r), i = rows.position(r), token = proposed(r);
            const int64_t left = placed(b, i - 1), right = placed(b, i + 1);
            const bool fits = !clash(left, token) && !clash(token, right);
            rejected(r) = fits ? 0 : 1;
            if (fits) placed.put(b, i, token);
            for (const int64_t neighbour : {left, right}) forbid_beside(neighbour, mask, r);
        }
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        int64_t pairs = 0;
        for (int64_t i = 0; i + 1 < sample.n_tokens && i + 1 < sample.seq_len; ++i)
            pairs += clash(sample.tokens[i], sample.tokens[i + 1]) ? 1 : 0;
        verdict.score = static_cast<double>(pairs);
        verdict.satisfied = pairs == 0 ? 1 : 0;
    }

private:
    static unsigned char uc(char c) { return static_cast<unsigned char>(c); }

    // A token's text without spaces, in lowercase: "The" and " the" read the same.
    static std::string normalised(const std::string& text) {
        std::string out;
        for (char c : text)
            if (std::isspace(uc(c)) == 0) out += static_cast<char>(std::tolower(uc(c)));
        return out;
    }

    bool known(int64_t id) const { return id >= 0 && id < static_cast<int64_t>(key_.size()); }
    // Whether tokens a then b (side by side) make a pair the control rules out.
    bool clash(int64_t a, int64_t b) const {
        if (!known(a) || !known(b)) return false;
        const auto x = static_cast<size_t>(a), y = static_cast<size_t>(b);
        if (punctuation_[x] && punctuation_[y]) return true;
        return key_[x] != kNone && key_[x] == key_[y];
    }

    // What may not stand beside `neighbour` (a placed token, or kNone).
    void forbid_beside(int64_t neighbour, rudder::TokenMask& mask, int64_t row) const {
        if (!known(neighbour)) return;
        const auto n = static_cast<size_t>(neighbour);
        if (punctuation_[n])
            for (int64_t id : punctuation_ids_) mask.forbid(row, id);
        if (key_[n] != kNone)
            for (int64_t id : by_key_[static_cast<size_t>(key_[n])]) mask.forbid(row, id);
    }

    using Placed = rudder::layout::PlacedTokens;

    std::string marks_;
    bool words_ = true;
    std::vector<int64_t> key_;                  // by token: its word's key, or kNone
    std::vector<bool> punctuation_;             // by token
    std::vector<int64_t> punctuation_ids_;      // the punctuation tokens
    std::vector<std::vector<int64_t>> by_key_;  // key -> the tokens that read as it
};

}  // namespace

static const char kSchema[] = R"schema({
  "type": "object",
  "properties": {
    "punctuation": { "type": "string", "minLength": 1, "description": "the marks no two of which may stand side by side (default \".,!?;:\")" },
    "words": { "type": "boolean", "description": "also no word immediately repeated, case aside (default true)" }
  },
  "additionalProperties": false
})schema";

RUDDER_CONTROLLER(no_repeats_desc, NoRepeats, "no_repeats", "1.0.0",
                  "no word immediately repeated and no two punctuation marks in a row (hard constraint)", kSchema,
                  RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_IGNORES_X0 |
                      RUDDER_CAP_COMMIT | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-no-repeats", &no_repeats_desc)
