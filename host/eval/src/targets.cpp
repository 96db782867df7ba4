// The targets of a task: which texts, and the params each kind of target gives a control.
#include "targets.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>

#include <rudder/runtime/model.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/tree.hpp>
#include <rudder/text/treebank.hpp>

namespace rudder::eval {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Kinds made from the model's tokens rather than words: they need the recipe model's tokenizer.
bool needs_tokens(const std::string& kind) {
    return kind == "length" || kind == "prefix" || kind == "infill" || kind == "text_to_data_start";
}
// Prompted kinds (meaning::PromptedText): the model answers a prompt, given as the span controller's prefix.
bool prompted(const std::string& kind) {
    return kind == "data_to_text" || kind == "text_to_data" || kind == "text_to_data_start";
}
constexpr size_t kPrefixTokens = 3;  // a "prefix" target: the reference's first three tokens

std::vector<Annotated> read_annotated(const TargetSource& source) {
    std::vector<Annotated> out;
    if (source.file.filename().string().find(".csv") != std::string::npos) {
        for (auto& r : read_e2e_csv(source.file)) {
            Annotated a;
            a.text = std::move(r.ref);
            a.mr = std::move(r.mr);
            // Spaces are enough here: max_words only keeps targets within the model's length.
            a.words = 1 + static_cast<int64_t>(std::count(a.text.begin(), a.text.end(), ' '));
            out.push_back(std::move(a));
        }
        return out;
    }
    std::map<std::string, std::string> mr_of_text;
    if (!source.meaning.empty())
        for (auto& r : read_e2e_csv(source.meaning)) mr_of_text.emplace(std::move(r.ref), std::move(r.mr));
    for (auto& t : syntax::read_annotated_texts(source.file)) {
        const auto words = static_cast<int64_t>(t.pos.size());
        const auto mr = mr_of_text.find(t.text);
        out.push_back({std::move(t.text), std::move(t.pos), std::move(t.tree),
                       mr == mr_of_text.end() ? std::string() : mr->second, words});
    }
    return out;
}

// A "span" target: a constituent of two or more words, short of the whole text, drawn by the same generator.
std::optional<json> span_params(const Annotated& a, std::mt19937_64& rng) {
    if (a.tree.empty()) return std::nullopt;
    std::vector<syntax::Span> spans;
    for (const auto& s : syntax::labelled_spans(syntax::read_tree(a.tree)))
        if (s.end - s.start >= 2 && !(s.start == 0 && s.end == a.words)) spans.push_back(s);
    if (spans.empty()) return std::nullopt;
    const auto& s = spans[rng() % spans.size()];
    return json{{"span", {s.start, s.end, s.label}}};
}

// The "mr", "fields" and "sentiment" targets, from the text's meaning representation.
std::optional<json> meaning_params(const std::string& kind, const Annotated& a, const TargetSource& source,
                                   std::mt19937_64& rng) {
    if (a.mr.empty()) return std::nullopt;
    if (kind == "mr") return json{{"condition", a.mr}};
    if (kind == "fields") {
        // One field other than the name, as Diffusion-LM's semantic-content targets.
        std::vector<meaning::Field> content;
        try {
            for (auto& f : meaning::parse(a.mr))
                if (f.attribute != "name") content.push_back(std::move(f));
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error("a meaning representation of '" + source.file.string() + "': " + e.what());
        }
        if (content.empty()) return std::nullopt;
        const auto& f = content[rng() % content.size()];
        return json{{"fields", {f.attribute + "[" + f.value + "]"}}};
    }
    const std::string polarity = meaning::attribute_class(source.attribute, a.mr);
    if (polarity.empty()) return std::nullopt;
    return json{{"polarity", polarity}};
}

// The "length", "prefix" and "infill" targets, from the text's tokens.
std::optional<json> token_params(const std::string& kind, const Annotated& a, const Tokenizer* tokenizer,
                                 Target& target) {
    const std::vector<int64_t> ids = tokenizer->encode(a.text);
    const auto n = static_cast<int64_t>(ids.size());
    if (kind == "length") return json{{"tokens", n}};
    // Fixed tokens are written as a word tokenizer's words joined by spaces, or as another tokenizer's decoding of
    // them (a BPE's tokens are pieces of words), each of which encodes back to the same ids; a part that does not (a
    // BPE cut inside a word may merge otherwise on its own) leaves the text out.
    auto joined = [&](int64_t from, int64_t to) -> std::optional<std::string> {
        const std::vector<int64_t> part(ids.begin() + from, ids.begin() + to);
        if (std::count(part.begin(), part.end(), tokenizer->unk_id()) > 0)
            return std::nullopt;  // the span controller refuses unknown words
        if (tokenizer->type() == "word") {
            std::string words;
            for (int64_t id : part) words += (words.empty() ? "" : " ") + tokenizer->token(id);
            return words;
        }
        std::string text = tokenizer->decode(part.data(), static_cast<int64_t>(part.size()));
        if (tokenizer->encode(text) != part) return std::nullopt;
        return text;
    };
    if (kind == "prefix") {
        if (n <= static_cast<int64_t>(kPrefixTokens)) return std::nullopt;
        const auto prefix = joined(0, static_cast<int64_t>(kPrefixTokens));
        if (!prefix) return std::nullopt;
        return json{{"prefix", *prefix}};
    }
    // infill: the first and last thirds given, the middle (at least two tokens) generated.
    const int64_t side = n / 3;
    if (side < 1 || n - 2 * side < 2) return std::nullopt;
    const auto prefix = joined(0, side), suffix = joined(n - side, n);
    std::vector<std::string> middle;
    for (int64_t i = side; i < n - side; ++i) middle.push_back(tokenizer->token(ids[static_cast<size_t>(i)]));
    if (!prefix || !suffix) return std::nullopt;
    target.middle = std::move(middle);
    target.record["middle"] = {side, n - side};
    return json{{"prefix", *prefix}, {"suffix", *suffix}, {"length", n}};
}

// The prompted targets: the prompt as a prefix ("data_to_text": the meaning representation's record; "text_to_data":
// the reference text) or, "text_to_data_start", the prompt's length in tokens (where the structured controllers'
// language starts). The record keeps the prompt, so the answer is told apart from it when the samples are scored.
std::optional<json> prompt_params(const std::string& kind, const Annotated& a, const Tokenizer* tokenizer,
                                  Target& target) {
    if (a.mr.empty()) return std::nullopt;
    std::string record;
    try {
        record = meaning::record_json(a.mr);
    } catch (const std::invalid_argument&) {
        return std::nullopt;  // a representation with a repeated attribute has no record
    }
    const std::string prompt =
        kind == "data_to_text" ? meaning::data_to_text_prompt(record) : meaning::text_to_data_prompt(a.text);
    target.record["prompt"] = prompt;
    target.record["task"] = kind == "data_to_text" ? "data_to_text" : "text_to_data";
    target.record["mr"] = a.mr;
    if (kind == "text_to_data_start") return json{{"start", static_cast<int64_t>(tokenizer->encode(prompt).size())}};
    return json{{"prefix", prompt}};
}

// The params a control of `kind` receives for text `a`, or nothing if this text cannot give that target.
std::optional<json> target_params(const std::string& kind, const Annotated& a, const TargetSource& source,
                                  std::mt19937_64& rng, const Tokenizer* tokenizer, Target& target) {
    if (kind == "pos") {
        if (a.pos.empty()) return std::nullopt;
        return json{{"tags", a.pos}};
    }
    if (kind == "tree") {
        if (a.tree.empty()) return std::nullopt;
        return json{{"tree", a.tree}};
    }
    if (kind == "span") return span_params(a, rng);
    if (kind == "mr" || kind == "fields" || kind == "sentiment") return meaning_params(kind, a, source, rng);
    if (prompted(kind)) return prompt_params(kind, a, tokenizer, target);
    if (needs_tokens(kind)) return token_params(kind, a, tokenizer, target);
    return json::object();  // "none"
}

// The task's targets: `count` texts of at most max_words words that give every control its target, drawn without
// replacement by the seed.
std::vector<Target> make_targets(const Task& task, AnnotatedCache& cache, const Tokenizer* tokenizer,
                                 const std::function<void(const std::string&)>& warn) {
    auto& texts = cache[task.targets.file];
    if (texts.empty()) texts = read_annotated(task.targets);
    std::vector<size_t> order(texts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(task.targets.seed);
    std::shuffle(order.begin(), order.end(), rng);
    // A data-to-text target is a meaning representation, once, with every reference the file has for it (BLEU is
    // scored against all of them, as E2E scores it).
    bool per_meaning = false;
    for (const auto& c : task.controls) per_meaning = per_meaning || c.target == "data_to_text";
    std::map<std::string, std::vector<std::string>> references_of;
    if (per_meaning)
        for (const auto& a : texts)
            if (!a.mr.empty()) references_of[a.mr].push_back(a.text);
    std::set<std::string> meanings_used;
    std::vector<Target> out;
    for (size_t i : order) {
        if (static_cast<int64_t>(out.size()) >= task.targets.count) break;
        const Annotated& a = texts[i];
        if (a.words < 1 || a.words > task.targets.max_words) continue;
        if (per_meaning && !meanings_used.insert(a.mr).second) continue;
        Target target;
        target.record = {{"reference", a.text}};
        if (per_meaning) target.record["references"] = references_of[a.mr];
        bool complete = true;
        for (const auto& c : task.controls) {
            auto params = target_params(c.target, a, task.targets, rng, tokenizer, target);
            if (!params) {
                complete = false;
                break;
            }
            target.params[c.control].update(*params);
        }
        if (complete) out.push_back(std::move(target));
    }
    if (static_cast<int64_t>(out.size()) < task.targets.count && warn)
        warn("task '" + task.name + "': only " + std::to_string(out.size()) + " targets of at most " +
             std::to_string(task.targets.max_words) + " words in '" + task.targets.file.string() + "'");
    return out;
}

}  // namespace

std::vector<Target> task_targets(const Task& task, const JsonDocument& base, AnnotatedCache& annotated, int64_t most,
                                 const std::function<void(const std::string&)>& warn) {
    // Targets made of the model's tokens (length, prefix, infill) need the recipe model's tokenizer.
    std::shared_ptr<const Tokenizer> tokenizer;
    for (const auto& c : task.controls) {
        if (!needs_tokens(c.target) || tokenizer) continue;
        if (!base.contains("model") || !base.at("model").is_string())
            throw std::runtime_error("task '" + task.name + "': '" + c.target +
                                     "' targets need the recipe's \"model\" (its tokenizer)");
        const fs::path dir =
            resolve_model(base.at("model").get<std::string>(), task.recipe.parent_path(), default_model_path());
        tokenizer = load_model(dir, std::nullopt).tokenizer;
    }
    bool any_target = false;
    for (const auto& c : task.controls) any_target = any_target || c.target != "none";
    std::vector<Target> targets;
    if (any_target) {
        targets = make_targets(task, annotated, tokenizer.get(), warn);
    } else {
        targets.resize(static_cast<size_t>(task.targets.count));
        for (auto& t : targets)
            for (const auto& c : task.controls) t.params[c.control] = json::object();
    }
    if (most > 0 && static_cast<int64_t>(targets.size()) > most) targets.resize(static_cast<size_t>(most));
    return targets;
}

}  // namespace rudder::eval
