// regex and json_schema: the sample's text matches a regular expression as a whole, or is JSON that validates
// against a JSON Schema (docs/structured-output.md). Both compile their language to a byte automaton
// (rudder_grammar), read it token by token through the run's tokenizer pieces (ABI 1.3), and hold it exactly: at
// each PREDICT step every row may take only tokens that some completion of the other free positions accepts
// (positions still masked, and the step's rows, are free), and at each COMMIT they keep, of the tokens the host drew,
// the ones that fit together, and say what the others may take instead. So no sampler, however many positions it
// unmasks in one step, commits a text that cannot end in the language. With "start" (a prompt's length in tokens) the
// language holds for the text from that position on; the positions before it are left to the other controllers.
#include <rudder/grammar/completion.hpp>
#include <rudder/grammar/dfa.hpp>
#include <rudder/grammar/json_schema.hpp>
#include <rudder/grammar/regex.hpp>
#include <rudder/grammar/token_automaton.hpp>
#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/params.hpp"

namespace {

using rudder::grammar::Completion;
using rudder::grammar::Dfa;
using rudder::grammar::TokenAutomaton;

// The vocabulary's tries, built once per vocabulary in the process and shared by every instance and run over it
// (151,936 tokens take a few hundred milliseconds to sort into tries).
std::shared_ptr<const rudder::grammar::Vocabulary> shared_vocabulary(rudder::grammar::Pieces pieces) {
    static std::mutex mutex;
    static std::vector<std::weak_ptr<const rudder::grammar::Vocabulary>> known;
    const std::lock_guard<std::mutex> lock(mutex);
    for (auto it = known.begin(); it != known.end();) {
        auto v = it->lock();
        if (v == nullptr) {
            it = known.erase(it);
            continue;
        }
        const auto& p = v->pieces();
        if (p.text == pieces.text && p.kind_after == pieces.kind_after && p.end_token == pieces.end_token &&
            p.never == pieces.never)
            return v;
        ++it;
    }
    auto made = std::make_shared<const rudder::grammar::Vocabulary>(std::move(pieces));
    known.push_back(made);
    return made;
}

// What both controllers share: the automaton, and the steps.
class Structured : public rudder::Controller {
public:
    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        rudder::grammar::Pieces pieces = run_pieces(run);
        // begin() comes once per batch: the automaton (and the transitions it found) outlives runs of one vocabulary.
        std::shared_ptr<const rudder::grammar::Vocabulary> vocabulary = shared_vocabulary(std::move(pieces));
        if (start_ >= run.seq_len)
            throw rudder::Error("/start: " + std::to_string(start_) + " leaves no position of the run's " +
                                std::to_string(run.seq_len) + " (max_length)");
        const int64_t positions = run.seq_len - start_;
        // The token-level work has the same time limit as the byte automaton's, from here (a run's begin).
        rudder::grammar::CompileLimits limits = limits_;
        limits.deadline = deadline_from_now();
        if (automaton_ == nullptr || &automaton_->vocabulary() != vocabulary.get()) {
            automaton_ = std::make_unique<TokenAutomaton>(dfa_, std::move(vocabulary));
            shortest_ = 0;
        }
        if (shortest_ == 0 || shortest_ > positions) {  // not known yet, or known only as "more than" fewer positions
            std::optional<int64_t> shortest;
            try {
                shortest = automaton_->shortest(positions, limits);
            } catch (const rudder::grammar::LimitError& e) {
                throw rudder::Error(limit_message(e));
            }
            if (!shortest) {
                const std::string example = dfa_->shortest_from(dfa_->start()).value_or("");
                throw rudder::Error(
                    "this model's tokenizer cannot spell any text " + what_ +
                        (example.empty() ? std::string(" (it matches no text at all)")
                                         : " (it matches texts such as \"" + example +
                                               "\", which no sequence of the model's tokens decodes to)"),
                    RUDDER_ERR_UNSUPPORTED);
            }
            shortest_ = *shortest;
        }
        if (shortest_ > positions)
            throw rudder::Error(
                "the shortest text " + what_ + " takes " +
                (shortest_ == positions + 1 ? "more than " + std::to_string(positions) : std::to_string(shortest_)) +
                " tokens of this model's tokenizer; the run has " + std::to_string(run.seq_len) +
                " positions (max_length)" +
                (start_ > 0 ? ", of which " + std::to_string(run.seq_len - start_) + " from /start (" +
                                  std::to_string(start_) + ") on"
                            : std::string()));
        // Every state the run's positions can reach, with its tokens, found now within the memory limit: the steps
        // then read only these (a schema whose table would take gigabytes is refused here, before it is built).
        try {
            automaton_->prepare(positions, limits);
        } catch (const rudder::grammar::LimitError& e) {
            throw rudder::Error(limit_message(e));
        }
        completion_ = std::make_unique<Completion>(*automaton_);
        all_free_.clear();
    }

    void step(const rudder_step& step, rudder_contribution& out) override {
        if (step.phase == RUDDER_PHASE_PREDICT) predict(step, out);
    }

    // Of the tokens the host drew, the ones that fit together in position order are kept; every row gets what it may
    // take given the kept ones.
    void commit(const rudder_step& step, rudder_contribution& out) override {
        const rudder_run_info& run = run_.info();
        const rudder::Rows rows(step, run);
        const rudder::View<const int64_t> proposed(step.proposed);
        rudder::View<uint8_t> rejected(out.rejected);
        rudder::RowView<uint32_t> bits(out.token_bits);
        out.written |= RUDDER_WROTE_REJECTED | RUDDER_WROTE_ALLOWED_BITS;
        for (const auto& [b, group] : by_sequence(rows)) {
            const auto& [indices, positions] = group;
            std::vector<int64_t> tokens(indices.size());
            for (size_t k = 0; k < indices.size(); ++k) tokens[k] = proposed(indices[k]);
            const std::vector<bool> refused = completion_->accept(holes(step, b, positions), positions, tokens);
            fail_if_impossible(b);
            for (size_t k = 0; k < indices.size(); ++k) {
                rejected(indices[k]) = refused[k] ? 1 : 0;
                completion_->allowed(positions[k], bits[indices[k]]);
            }
        }
        allow_before_start(rows, bits);
    }

    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        verdict.satisfied = dfa_->matches(text_of(sample)) ? 1 : 0;
    }

protected:
    const Dfa& dfa() const { return *dfa_; }
    // "start", read with the controller's other params.
    template <class AnyParams>  // rudder::Params or rudder::DocumentParams
    void read_start(AnyParams& p) {
        start_ = p->integer("start", 0, int64_t{1} << 20).value_or(0);
    }
    // The compile budgets (docs/structured-output.md, "Budgets"): the byte automaton's states, the token
    // transitions' bytes, and the seconds that compiling (the automaton at create, the tokens' transitions at each
    // run's begin) may take.
    template <class AnyParams>
    void read_limits(AnyParams& p) {
        limits_.max_states = static_cast<int32_t>(p->integer("max_states", 1, 10000000).value_or(limits_.max_states));
        limits_.max_table_bytes = static_cast<uint64_t>(p->integer("max_table_bytes", 1 << 20, int64_t{1} << 40)
                                                            .value_or(static_cast<int64_t>(limits_.max_table_bytes)));
        compile_seconds_ = p->number("compile_seconds", 0.001, 86400).value_or(compile_seconds_);
    }
    // The limits for compiling now: the deadline compile_seconds from now.
    rudder::grammar::CompileLimits limits_from_now() const {
        rudder::grammar::CompileLimits limits = limits_;
        limits.deadline = deadline_from_now();
        return limits;
    }
    // A LimitError's message, with the param that sets the limit it names.
    std::string limit_message(const rudder::grammar::LimitError& e) const {
        const std::string what = e.what();
        if (dynamic_cast<const rudder::grammar::CompileStopped*>(&e) != nullptr)
            return what + ": its compile_seconds (" + seconds_text() + ") passed";
        if (what.find("CompileLimits::max_table_bytes") != std::string::npos)
            return what +
                   "; lower max_length or the language's bounds (a string's maxLength, a number's range), or "
                   "raise the param max_table_bytes";
        if (what.find("CompileLimits::max_states") != std::string::npos) return what + " (the param max_states)";
        return what;
    }
    // The text the language holds for: the sample's, or, from "start" on, its tokens' pieces from there.
    std::string text_of(const rudder_sample& sample) const {
        if (start_ == 0 || automaton_ == nullptr) return sample.text != nullptr ? sample.text : "";
        const rudder::grammar::Pieces& pieces = automaton_->vocabulary().pieces();
        std::string text;
        int32_t kind = 0;
        for (int64_t i = start_; i < sample.n_tokens && i < sample.seq_len; ++i) {
            const int64_t id = sample.tokens[i];
            if (id < 0 || id >= static_cast<int64_t>(pieces.kind_after.size())) break;
            text += pieces.text[static_cast<size_t>(kind)][static_cast<size_t>(id)];
            kind = pieces.kind_after[static_cast<size_t>(id)];
        }
        return text;
    }
    // `what`: how messages name the language ("matching the pattern ...").
    void set_language(std::shared_ptr<const Dfa> dfa, std::string what) {
        dfa_ = std::move(dfa);
        what_ = std::move(what);
    }

private:
    static rudder::grammar::Pieces run_pieces(const rudder_run_info& run) {
        std::optional<rudder::Run::TokenPieces> given = rudder::Run(&run).token_pieces();
        if (!given)
            throw rudder::Error(
                "this model's tokenizer does not decode a text as the concatenation of its tokens' "
                "texts, which structured output follows",
                RUDDER_ERR_UNSUPPORTED);
        rudder::grammar::Pieces pieces;
        pieces.text = std::move(given->text);
        pieces.kind_after = std::move(given->kind_after);
        pieces.end_token = run.pad_id;
        if (run.family == RUDDER_FAMILY_DISCRETE && run.mask_id >= 0) pieces.never.push_back(run.mask_id);
        return pieces;
    }

    // The sequence of batch row b as the completion reads it: the masked positions and the step's rows are free. A
    // continuous PREDICT step's tokens are only the current argmax (nothing is placed): every position is free there;
    // in its COMMIT rounds the tokens committed before are placed and the others masked.
    // Positions from "start" on, counted from it (position start_ + i is the completion's i).
    std::vector<int64_t> holes(const rudder_step& step, int64_t b, const std::vector<int64_t>& free_positions) const {
        const rudder_run_info& run = run_.info();
        std::vector<int64_t> seq(static_cast<size_t>(run.seq_len - start_), Completion::kFree);
        const bool placed =
            run.family == RUDDER_FAMILY_DISCRETE || (step.phase == RUDDER_PHASE_COMMIT && step.masked != nullptr);
        if (placed && step.tokens != nullptr) {
            const rudder::View<const int64_t> tokens(step.tokens);
            for (int64_t i = start_; i < run.seq_len; ++i) seq[static_cast<size_t>(i - start_)] = tokens(b, i);
            if (step.masked != nullptr) {
                const rudder::View<const uint8_t> masked(step.masked);
                for (int64_t i = start_; i < run.seq_len; ++i)
                    if (masked(b, i) != 0) seq[static_cast<size_t>(i - start_)] = Completion::kFree;
            }
        }
        for (int64_t i : free_positions) seq[static_cast<size_t>(i)] = Completion::kFree;
        return seq;
    }

    // Every token at the rows before "start", which the language does not reach.
    void allow_before_start(const rudder::Rows& rows, rudder::RowView<uint32_t>& bits) const {
        if (start_ == 0) return;
        const int64_t vocab = run_.info().vocab_size;
        for (int64_t r = 0; r < rows.size(); ++r) {
            if (rows.position(r) >= start_) continue;
            uint32_t* words = bits[r];
            for (int64_t v = 0; v < vocab; ++v) words[v / 32] |= uint32_t{1} << (v % 32);
        }
    }

    // The rows from "start" on grouped by their sequence: b -> (row indices, positions counted from start).
    std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> by_sequence(
        const rudder::Rows& rows) const {
        std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
        for (int64_t r = 0; r < rows.size(); ++r) {
            if (rows.position(r) < start_) continue;
            auto& [indices, positions] = out[rows.batch(r)];
            indices.push_back(r);
            positions.push_back(rows.position(r) - start_);
        }
        return out;
    }

    void fail_if_impossible(int64_t b) const {
        if (!completion_->possible())
            throw rudder::Error("the tokens in place in sample " + std::to_string(b) +
                                " of the batch (other controllers' fixed tokens, or tokens placed before) leave no "
                                "completion " +
                                what_);
    }

    void predict(const rudder_step& step, rudder_contribution& out) {
        const rudder_run_info& run = run_.info();
        const rudder::Rows rows(step, run);
        rudder::RowView<uint32_t> bits(out.token_bits);
        out.written |= RUDDER_WROTE_ALLOWED_BITS;
        const bool all_free = run.family != RUDDER_FAMILY_DISCRETE;  // the continuous family places nothing
        for (const auto& [b, group] : by_sequence(rows)) {
            const auto& [indices, positions] = group;
            if (all_free) {
                allowed_when_all_free(indices, positions, bits);
                continue;
            }
            completion_->set(holes(step, b, positions));
            fail_if_impossible(b);
            for (size_t k = 0; k < indices.size(); ++k) completion_->allowed(positions[k], bits[indices[k]]);
        }
        allow_before_start(rows, bits);
    }

    // With every position free, each position's allowed tokens are the same at every step: computed once per run.
    void allowed_when_all_free(const std::vector<int64_t>& indices, const std::vector<int64_t>& positions,
                               rudder::RowView<uint32_t>& bits) {
        const size_t words = rudder::grammar::token_words(run_.info().vocab_size);
        const int64_t length = run_.info().seq_len - start_;
        if (all_free_.empty()) {
            completion_->set(std::vector<int64_t>(static_cast<size_t>(length), Completion::kFree));
            all_free_.assign(static_cast<size_t>(length) * words, 0);
            for (int64_t i = 0; i < length; ++i)
                completion_->allowed(i, all_free_.data() + static_cast<size_t>(i) * words);
        }
        for (size_t k = 0; k < indices.size(); ++k)
            std::copy_n(all_free_.data() + static_cast<size_t>(positions[k]) * words, words, bits[indices[k]]);
    }

    std::chrono::steady_clock::time_point deadline_from_now() const {
        return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                      std::chrono::duration<double>(compile_seconds_));
    }
    std::string seconds_text() const {
        std::ostringstream text;
        text << compile_seconds_ << " s";
        return text.str();
    }

    rudder::grammar::CompileLimits limits_;
    double compile_seconds_ = 60;
    std::shared_ptr<const Dfa> dfa_;
    std::string what_;
    std::unique_ptr<TokenAutomaton> automaton_;
    int64_t shortest_ = 0;
    std::unique_ptr<Completion> completion_;
    std::vector<uint32_t> all_free_;  // [L - start, W]: every position free (the continuous family)
    int64_t start_ = 0;               // the first position the language holds for
};

class Regex final : public Structured {
public:
    Regex(const rudder_host&, std::string_view params_json) {
        rudder::Params p(params_json);
        const std::string pattern = p->text("pattern", rudder::json_input::kRequired).value_or("");
        read_start(p);
        read_limits(p);
        p.finish();
        try {
            set_language(std::make_shared<const Dfa>(rudder::grammar::compile_regex(pattern, limits_from_now())),
                         "matching the pattern");
        } catch (const rudder::grammar::RegexError& e) {
            throw rudder::Error("/pattern: at byte " + std::to_string(e.offset) + ": " + e.what());
        } catch (const rudder::grammar::LimitError& e) {
            throw rudder::Error("/pattern: " + limit_message(e));
        }
    }
};

class JsonSchema final : public Structured {
public:
    JsonSchema(const rudder_host&, std::string_view params_json) {
        rudder::DocumentParams p(params_json);  // keys in order: properties are written in the order the schema gives
        std::optional<rudder::JsonDocument> inline_schema = p->object("schema");
        const std::optional<std::string> file = p->text("schema_file");
        // How the text may be spaced: "none" ({"a":1}), "space_after_separators" ({"a": 1}, Python's json.dumps),
        // "optional_space" (either, separator by separator).
        const std::string whitespace =
            p->choice("whitespace", {"none", "space_after_separators", "optional_space"}).value_or("none");
        options_.whitespace = whitespace == "space_after_separators"
                                  ? rudder::grammar::Whitespace::space_after_separators
                              : whitespace == "optional_space" ? rudder::grammar::Whitespace::optional_space
                                                               : rudder::grammar::Whitespace::none;
        read_start(p);
        read_limits(p);
        p.finish();
        if (inline_schema.has_value() == file.has_value())
            throw rudder::Error("give the schema as \"schema\" (an object) or \"schema_file\" (a path), one of them");
        rudder::JsonDocument schema;
        std::string where = "/schema";
        if (file) {
            schema = read_schema(*file);
            where = "/schema_file ('" + *file + "')";
        } else {
            schema = std::move(*inline_schema);
        }
        options_.limits = limits_from_now();
        try {
            set_language(std::make_shared<const Dfa>(rudder::grammar::compile_json_schema(schema, options_)),
                         "that is JSON valid against the schema");
        } catch (const rudder::grammar::SchemaError& e) {
            throw rudder::Error(where + (e.pointer.empty() ? "" : " at " + e.pointer) + ": " + e.what());
        } catch (const rudder::grammar::LimitError& e) {
            throw rudder::Error(where + ": " + limit_message(e));
        }
        // canonical_json (the verdict) compiles nothing: no deadline for it to pass.
        options_.limits.deadline = std::chrono::steady_clock::time_point::max();
        schema_ = std::move(schema);
    }

    // Valid JSON that validates, however it is spaced and ordered: the text parsed, written as the automaton's
    // language writes it (canonical_json), and matched.
    void evaluate(const rudder_sample& sample, rudder_verdict& verdict) override {
        nlohmann::ordered_json instance;
        try {
            instance = nlohmann::ordered_json::parse(text_of(sample));
        } catch (const std::exception&) {
            verdict.satisfied = 0;
            detail_ = R"({"json": false})";
            verdict.detail = detail_.c_str();
            return;
        }
        try {
            verdict.satisfied = dfa().matches(rudder::grammar::canonical_json(instance, schema_, options_)) ? 1 : 0;
        } catch (const std::invalid_argument&) {  // nested deeper than the automaton's language reaches
            verdict.satisfied = 0;
        }
    }

private:
    static nlohmann::ordered_json read_schema(const std::string& file) {
        std::ifstream in(file, std::ios::binary);
        if (!in) throw rudder::Error("/schema_file: cannot read '" + file + "'");
        std::ostringstream text;
        text << in.rdbuf();
        try {
            return rudder::json_input::parse_document(text.str());  // refuses duplicate keys and deep nesting
        } catch (const std::exception& e) {
            throw rudder::Error("/schema_file: '" + file + "' is not valid JSON: " + e.what());
        }
    }

    nlohmann::ordered_json schema_;
    rudder::grammar::SchemaOptions options_;
    std::string detail_;
};

constexpr uint64_t kCapabilities = RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK |
                                   RUDDER_CAP_IGNORES_X0 | RUDDER_CAP_COMMIT | RUDDER_CAP_EVALUATE;

}  // namespace

static const char kRegexSchema[] = R"schema({
  "type": "object",
  "properties": {
    "pattern": { "type": "string", "description": "the text must match it as a whole (docs/structured-output.md)" },
    "start": { "type": "integer", "minimum": 0, "description": "the text from this position on (after a prompt of this many tokens); default 0" },
    "max_states": { "type": "integer", "minimum": 1, "description": "states of any byte automaton built on the way; default 100000" },
    "max_table_bytes": { "type": "integer", "minimum": 1048576, "description": "bytes the token transitions of the run's positions may take, counted before they are built; default 536870912 (512 MiB)" },
    "compile_seconds": { "type": "number", "exclusiveMinimum": 0, "description": "seconds compiling may take, at create and at each run's begin; default 60" }
  },
  "required": ["pattern"], "additionalProperties": false
})schema";

static const char kJsonSchemaSchema[] = R"schema({
  "type": "object",
  "properties": {
    "schema": { "type": "object", "description": "the JSON Schema the text must validate against" },
    "schema_file": { "type": "string", "description": "or a file holding it (relative to the working directory)" },
    "start": { "type": "integer", "minimum": 0, "description": "the text from this position on (after a prompt of this many tokens); default 0" },
    "whitespace": { "enum": ["none", "space_after_separators", "optional_space"], "description": "spaces after ':' and ',': none (default), exactly one (Python's json.dumps), or at most one" },
    "max_states": { "type": "integer", "minimum": 1, "description": "states of any byte automaton built on the way; default 100000" },
    "max_table_bytes": { "type": "integer", "minimum": 1048576, "description": "bytes the token transitions of the run's positions may take, counted before they are built; default 536870912 (512 MiB)" },
    "compile_seconds": { "type": "number", "exclusiveMinimum": 0, "description": "seconds compiling may take, at create and at each run's begin; default 60" }
  },
  "additionalProperties": false
})schema";

RUDDER_CONTROLLER(regex_desc, Regex, "regex", "1.2.0",
                  "the text matches a regular expression as a whole (hard constraint, exact)", kRegexSchema,
                  kCapabilities)
RUDDER_CONTROLLER(json_schema_desc, JsonSchema, "json_schema", "1.3.0",
                  "the text is JSON valid against a JSON Schema (hard constraint, exact)", kJsonSchemaSchema,
                  kCapabilities)
RUDDER_PLUGIN("rudder-structured", &regex_desc, &json_schema_desc)
