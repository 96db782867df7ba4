// well_formed: the text ends where a sentence can end, and its sentences start and end as sentences do. Hard
// constraints on neighbouring tokens (discrete family) and a judge of the finished text (both):
//   - the last token of the text (before the first pad, or at the end of the sequence) is sentence-final punctuation
//     ('.', '!', '?'), so an exact `length` asks the model for a text of that length instead of cutting one;
//   - no dangling word before a sentence's end ("near .", "and .": a function word that a phrase must follow), and
//     no two punctuation marks in a row ("city..", "area, .": no_repeats' rule, kept here so that the two never
//     leave a position nothing to take);
//   - after a sentence's end, the next word starts a sentence: a capital or a digit, not "friendly. customer" (only
//     where the vocabulary writes capitals at all; an uncased vocabulary skips this rule).
// A discrete run is steered as no_repeats is (a continuous one is judged only: see commit()): at each PREDICT step a
// row may not take what its placed neighbours rule out, and at each COMMIT the host's draws are kept in position order
// while they fit, and only if the masked position they leave between two placed tokens can still take a token (a
// dangling word two positions before a pad would leave nothing for the position between). The judge also counts
// adjacent repeated words (no_repeats' rule), so its verdict says whether the text reads as finished sentences.
#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../common/params.hpp"
#include "../common/placed_tokens.hpp"

namespace {

constexpr int64_t kNone = rudder::layout::PlacedTokens::kNone;  // outside the sequence, or not placed yet

// What a token is to the rules (bits), from its text.
enum Kind : uint8_t {
    kPad = 1,       // the run's padding token: the text has ended
    kFinal = 2,     // sentence-final punctuation
    kDangling = 4,  // a word a phrase must follow
    kLower = 8,     // starts with a lowercase letter: not the first word of a sentence
    kPunct = 16,    // punctuation only (the finals too): no two side by side, as no_repeats has it
};

class WellFormed final : public rudder::Controller {
public:
    WellFormed(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        finals_ = p->text("final").value_or(".!?");
        const auto dangling = p->array("dangling");
        if (dangling) {
            for (const auto& word : *dangling) {
                if (!word.is_string()) {
                    p->issue("dangling", "expected an array of words (strings), got " + word.dump());
                    break;
                }
                dangling_.insert(word.get<std::string>());
            }
        } else {
            // Words no English sentence ends on: articles, conjunctions, prepositions, pronouns, auxiliaries and
            // negations (a text ending "It isn't." or "near the." is cut, not finished).
            dangling_ = {"a",    "also", "an",    "and",     "are",   "as",   "at",   "be",    "been",  "both", "but",
                         "by",   "can",  "could", "did",     "do",    "does", "for",  "from",  "had",   "has",  "have",
                         "he",   "her",  "his",   "however", "if",    "in",   "is",   "isn't", "it",    "it's", "its",
                         "more", "most", "near",  "not",     "of",    "on",   "or",   "our",   "she",   "so",   "than",
                         "that", "the",  "their", "there",   "these", "they", "this", "those", "to",    "very", "was",
                         "we",   "were", "which", "while",   "whose", "will", "with", "would", "where", "your"};
        }
        capitals_ = p->boolean("capitals").value_or(true);
        p.finish();
    }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        const auto V = static_cast<size_t>(run.vocab_size);
        kinds_present_.clear();
        ids_by_kind_.clear();
        kind_.assign(V, 0);
        const std::optional<rudder::Run::TokenPieces> pieces = run_.token_pieces();
        bool any_capital = false;
        for (size_t v = 0; v < V; ++v) {
            const auto id = static_cast<int64_t>(v);
            if (id == run.mask_id) continue;
            uint8_t kind = 0;
            if (id == run.pad_id) {
                kind = kPad;
            } else if (id != run.unk_id) {
                const std::string text = trimmed(pieces ? pieces->text[0][v] : run_.token_text(id));
                if (!text.empty() && text.find_first_not_of(finals_) == std::string::npos) kind |= kFinal;
                if (!text.empty() &&
                    std::all_of(text.begin(), text.end(), [](char c) { return std::ispunct(uc(c)) != 0; }))
                    kind |= kPunct;
                std::string lower = text;
                for (char& c : lower) c = static_cast<char>(std::tolower(uc(c)));
                if (dangling_.count(lower)) kind |= kDangling;
                if (!text.empty() && std::islower(uc(text[0]))) kind |= kLower;
                any_capital = any_capital || (!text.empty() && std::isupper(uc(text[0])));
            }
            kind_[v] = kind;
            kinds_present_.insert(kind);
            ids_by_kind_[kind].push_back(id);
        }
        capitals_in_use_ = capitals_ && any_capital;
        continuous_ = run.family != RUDDER_FAMILY_DISCRETE;
        if (std::none_of(kinds_present_.begin(), kinds_present_.end(),
                         [](uint8_t kind) { return (kind & kFinal) != 0; }))
            throw rudder::Error(
                "well_formed: no token of this vocabulary is sentence-final punctuation ('" + finals_ + "')",
                RUDDER_ERR_INVALID_ARGUMENT);
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        const rudder_run_info& run = run_.info();
        const rudder::Rows rows(step, run);
        rudder::TokenMask mask(out, run, rudder::TokenMask::kForbid);
        if (continuous_ || step.tokens == nullptr) return;  // judged only (commit())
        const Placed placed(step, run);
        for (int64_t r = 0; r < rows.size(); ++r) {
            forbid_at(placed, rows.batch(r), rows.position(r), mask, r);
        }
    }

    // Of the proposed tokens, in position order, those that fit their placed neighbours and leave each masked
    // neighbour between two placed tokens a token it may take.
    void commit(const rudder_step& step, rudder_contribution& out) override {
        const rudder_run_info& run = run_.info();
        // A continuous run rounds every position in one COMMIT and draws again what is refused within the COMMIT
        // controllers' masks alone, not the length's pad ban: refusing there cut texts short (147 of 200 kept their
        // exact length on e2e-continuous). It is judged only.
        if (continuous_) return;
        const rudder::Rows rows(step, run);
        const rudder::View<const int64_t> proposed(step.proposed);
        rudder::View<uint8_t> rejected(out.rejected);
        out.written |= RUDDER_WROTE_REJECTED;
        rudder::TokenMask mask(out, run, rudder::TokenMask::kForbid);
        Placed placed(step, run);
        // The proposals stand in for their positions until their turn: the right neighbour of a row is the draw
        // beside it (in the continuous family, whose rounding proposes every position, the pad a length fixes).
        for (int64_t r = 0; r < rows.size(); ++r) placed.propose(rows.batch(r), rows.position(r), proposed(r));
        for (int64_t r : rudder::layout::rows_in_position_order(rows)) {
            const int64_t b = rows.batch(r), i = rows.position(r), token = proposed(r);
            placed.propose(b, i, kNone);  // its own turn: the row is judged by its neighbours
            const bool fits = allowed_at(placed, b, i, kind_of(token));
            rejected(r) = fits ? 0 : 1;
            if (fits) placed.put(b, i, token);
            forbid_at(placed, b, i, mask, r);  // what a rejected row is drawn again within
        }
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        int64_t faults = 0;
        const int64_t n = std::min(sample.n_tokens, sample.seq_len);
        for (int64_t i = 0; i + 1 < n; ++i) {
            const int64_t a = sample.tokens[i], b = sample.tokens[i + 1];
            faults += clash(a, b) ? 1 : 0;
            faults += known(a) && known(b) && a == b && !(kind_[static_cast<size_t>(a)] & kPad) ? 1 : 0;
        }
        // The end: the last content token is sentence-final (an empty text is not a sentence).
        faults += n == 0 || !known(sample.tokens[n - 1]) || !(kind_[static_cast<size_t>(sample.tokens[n - 1])] & kFinal)
                      ? 1
                      : 0;
        verdict.score = static_cast<double>(faults);
        verdict.satisfied = faults == 0 ? 1 : 0;
    }

private:
    using Placed = rudder::layout::PlacedTokens;
    static constexpr int64_t kEnd = Placed::kEnd;

    static unsigned char uc(char c) { return static_cast<unsigned char>(c); }
    static std::string trimmed(const std::string& text) {
        const size_t begin = text.find_first_not_of(" \t\n\r");
        if (begin == std::string::npos) return "";
        return text.substr(begin, text.find_last_not_of(" \t\n\r") - begin + 1);
    }

    bool known(int64_t id) const { return id >= 0 && id < static_cast<int64_t>(kind_.size()); }
    // Whether a token of kind `a` then one of kind `b` break a rule. kEnd (the sequence's end) reads as a pad.
    bool kinds_clash(uint8_t a, uint8_t b) const {
        if ((b & kPad) && !(a & (kPad | kFinal))) return true;              // a text ending mid-sentence
        if ((b & kFinal) && (a & kDangling)) return true;                   // "near ."
        if ((a & kPunct) && (b & kPunct)) return true;                      // "city..", "area, ."
        if (capitals_in_use_ && (a & kFinal) && (b & kLower)) return true;  // "friendly. customer"
        return false;
    }
    static constexpr uint8_t kUnplaced = 0xFF;
    uint8_t kind_of(int64_t token) const {
        if (token == kEnd) return kPad;
        return known(token) ? kind_[static_cast<size_t>(token)] : kUnplaced;
    }
    bool clash(int64_t a, int64_t b) const {
        const uint8_t x = kind_of(a), y = kind_of(b);
        if (x == kUnplaced || y == kUnplaced) return false;
        return kinds_clash(x, y);
    }
    // Whether some token may stand between tokens of kinds `x` and `y`. A pad is not counted: the masked position
    // may not be free to end the text (an exact length forbids it there).
    bool some_kind_between(uint8_t x, uint8_t y) const {
        for (const uint8_t kind : kinds_present_)
            if (!(kind & kPad) && (x == kUnplaced || !kinds_clash(x, kind)) &&
                (y == kUnplaced || !kinds_clash(kind, y)))
                return true;
        return false;
    }
    bool some_token_between(int64_t a, int64_t b) const { return some_kind_between(kind_of(a), kind_of(b)); }
    bool clash_kind_left(int64_t a, uint8_t kind) const {
        const uint8_t x = kind_of(a);
        return x != kUnplaced && kinds_clash(x, kind);
    }
    bool clash_kind_right(uint8_t kind, int64_t b) const {
        const uint8_t y = kind_of(b);
        return y != kUnplaced && kinds_clash(kind, y);
    }

    // Whether a token of `kind` may stand at masked position i: it fits its placed neighbours, and a masked neighbour
    // with a placed token beyond it keeps a token it may take.
    bool allowed_at(const Placed& placed, int64_t b, int64_t i, uint8_t kind) const {
        const int64_t left = placed.left(b, i), right = placed.right(b, i);
        if (clash_kind_left(left, kind) || clash_kind_right(kind, right)) return false;
        if (placed.masked(b, i - 1) && placed.placed(b, i - 2) && !some_kind_between(kind_of(placed(b, i - 2)), kind))
            return false;
        if (placed.masked(b, i + 1) && placed.at_or_end(b, i + 2) != kNone &&
            !some_kind_between(kind, kind_of(placed.at_or_end(b, i + 2))))
            return false;
        return true;
    }
    // The tokens of every kind not allowed at i forbidden in `row`; where no kind is, only the direct neighbours'
    // rules (forbid_between, which gives way itself).
    void forbid_at(const Placed& placed, int64_t b, int64_t i, rudder::TokenMask& mask, int64_t row) const {
        bool any = false;
        for (const uint8_t kind : kinds_present_) any = any || allowed_at(placed, b, i, kind);
        if (!any) return forbid_between(placed.left(b, i), placed.right(b, i), mask, row);
        for (const auto& [kind, ids] : ids_by_kind_)
            if (!allowed_at(placed, b, i, kind))
                for (int64_t id : ids) mask.forbid(row, id);
    }

    // What may not stand between placed `left` and `right` (kNone where not placed; kEnd past the sequence). Where
    // the two sides leave no token between them (a neighbour placed before this controller could see the other side:
    // another controller's fixed pads reach a COMMIT a step late), the side the text's end is on wins, else the
    // right: a rule is broken there, and the judge says so, rather than the run stopped.
    void forbid_between(int64_t left, int64_t right, rudder::TokenMask& mask, int64_t row) const {
        uint8_t x = kind_of(left);
        const uint8_t y = kind_of(right);
        if (x != kUnplaced && y != kUnplaced && !some_token_between(left, right)) x = kUnplaced;
        for (const auto& [kind, ids] : ids_by_kind_)
            if ((x != kUnplaced && kinds_clash(x, kind)) || (y != kUnplaced && kinds_clash(kind, y)))
                for (int64_t id : ids) mask.forbid(row, id);
    }

    std::string finals_;
    std::set<std::string> dangling_;
    bool capitals_ = true, capitals_in_use_ = true, continuous_ = false;
    std::vector<uint8_t> kind_;  // by token
    std::set<uint8_t> kinds_present_;
    std::map<uint8_t, std::vector<int64_t>> ids_by_kind_;  // the tokens of each kind
};

}  // namespace

static const char kSchema[] = R"schema({
  "type": "object",
  "properties": {
    "final": { "type": "string", "minLength": 1, "description": "the marks a sentence may end with (default \".!?\")" },
    "dangling": { "type": "array", "items": { "type": "string" }, "description": "words (lowercase) that may not stand before a sentence's end (default: English function words: a, an, and, the, of, near, with, ...)" },
    "capitals": { "type": "boolean", "description": "a word after a sentence's end starts with a capital or a digit (default true; off by itself for a vocabulary without capitals)" }
  },
  "additionalProperties": false
})schema";

RUDDER_CONTROLLER(well_formed_desc, WellFormed, "well_formed", "1.0.0",
                  "the text ends on a finished sentence: sentence-final punctuation last, no dangling word before it, "
                  "a capital after it (hard constraint and judge)",
                  kSchema,
                  RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_IGNORES_X0 |
                      RUDDER_CAP_COMMIT | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-well-formed", &well_formed_desc)
