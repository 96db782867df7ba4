// span: fixed words at given positions, a prefix, a suffix; with prefix + suffix + length it is infilling (the
// middle is generated between a left and a right context). Hard constraints, so it works in both families.
#include <rudder/rudder_controller.hpp>

#include <map>
#include <string>
#include <vector>

#include "../common/layout.hpp"
#include "../common/params.hpp"

namespace {

struct Piece {
    std::string where;  // JSON pointer inside params, for messages
    std::string text;
    int64_t position = 0;  // -1: the suffix, placed once the length is known
};

class Span final : public rudder::Controller {
public:
    Span(const rudder_host&, std::string_view params_json) {
        namespace ji = rudder::json_input;
        rudder::Params p(params_json);
        length_ = p->integer("length", 1, 1 << 20).value_or(0);
        if (auto prefix = p->text("prefix")) pieces_.push_back({"/prefix", *prefix, 0});
        const nlohmann::json words = p->array("words").value_or(nlohmann::json::array());
        for (size_t i = 0; i < words.size(); ++i) {
            ji::ObjectReader word(words[i], "/words/" + std::to_string(i), p->issues());
            const auto pos = word.integer("position", 0, 1 << 20, ji::kRequired);
            const auto text = word.text("text", ji::kRequired);
            word.reject_unknown_keys();
            if (pos && text) pieces_.push_back({word.pointer(), *text, *pos});
        }
        if (auto suffix = p->text("suffix")) {
            if (length_ == 0)
                p->issue("suffix", "needs \"length\" (the total token count) so the suffix has a position");
            pieces_.push_back({"/suffix", *suffix, -1});
        }
        p.finish();
        if (pieces_.empty()) throw rudder::Error("give at least one of \"prefix\", \"suffix\", \"words\"");
    }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        fixed_.clear();
        std::map<int64_t, std::string> owner;  // position -> piece that fixed it, to report overlaps
        for (const auto& piece : pieces_) {
            const std::vector<int64_t> ids = run_.tokenize(piece.text);
            if (ids.empty()) throw rudder::Error(piece.where + ": \"" + piece.text + "\" has no tokens");
            const int64_t start = piece.position >= 0 ? piece.position : length_ - static_cast<int64_t>(ids.size());
            if (start < 0)
                throw rudder::Error(piece.where + ": \"" + piece.text + "\" is longer than length " +
                                    std::to_string(length_));
            const int64_t end = start + static_cast<int64_t>(ids.size());
            rudder::layout::check_fits(end, run, piece.where.substr(1));
            if (length_ > 0 && end > length_)
                throw rudder::Error(piece.where + ": ends at position " + std::to_string(end) + ", past length " +
                                    std::to_string(length_));
            for (size_t k = 0; k < ids.size(); ++k) {
                const int64_t pos = start + static_cast<int64_t>(k);
                if (ids[k] == run.unk_id)
                    throw rudder::Error(piece.where + ": \"" + run_.token_text(ids[k]) + "\" in \"" + piece.text +
                                        "\" is not in the model's vocabulary");
                auto [it, fresh] = owner.emplace(pos, piece.where);
                if (!fresh && fixed_[pos] != ids[k])
                    throw rudder::Error(piece.where + " and " + it->second + " put different words at position " +
                                        std::to_string(pos));
                fixed_[pos] = ids[k];
            }
        }
        if (length_ > 0) rudder::layout::check_length(length_, run, "length " + std::to_string(length_));
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase != RUDDER_PHASE_PREDICT) return;
        if (length_ > 0) rudder::layout::write_length(step, out, run_.info(), length_);
        rudder::View<int64_t> fixed(out.fixed_tokens);
        for (int64_t b = 0; b < fixed.size(0); ++b)
            for (const auto& [pos, id] : fixed_) fixed(b, pos) = id;
        out.written |= RUDDER_WROTE_FIXED_TOKENS;
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        int64_t hits = 0;
        for (const auto& [pos, id] : fixed_) hits += (pos < sample.seq_len && sample.tokens[pos] == id) ? 1 : 0;
        const bool length_ok = length_ == 0 || sample.n_tokens == length_;
        verdict.score = fixed_.empty() ? 1.0 : static_cast<double>(hits) / static_cast<double>(fixed_.size());
        verdict.satisfied = (hits == static_cast<int64_t>(fixed_.size()) && length_ok) ? 1 : 0;
    }

private:
    int64_t length_ = 0;  // 0: not constrained
    std::vector<Piece> pieces_;
    std::map<int64_t, int64_t> fixed_;  // position -> token id, resolved at begin()
};

}  // namespace

static const char kSchema[] = R"schema({
  "type": "object",
  "properties": {
    "prefix": { "type": "string", "description": "text the output starts with" },
    "suffix": { "type": "string", "description": "text the output ends with (needs length)" },
    "length": { "type": "integer", "minimum": 1, "description": "total token count" },
    "words":  { "type": "array", "items": { "type": "object",
                "properties": { "position": { "type": "integer", "minimum": 0 }, "text": { "type": "string" } },
                "required": ["position", "text"] } }
  },
  "additionalProperties": false
})schema";

RUDDER_CONTROLLER(span_desc, Span, "span", "1.0.0",
                  "fixed words at positions, prefix, suffix, infilling (hard constraint)", kSchema,
                  rudder::layout::kHardConstraintForms | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-span", &span_desc)
