// `rudder eval SUITE`: control tasks over held-out targets, each scored for success, teacher perplexity and time
// (docs/eval.md).
#include <nlohmann/json.hpp>

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/base/paths.hpp>
#include <rudder/nn/compute_threads.hpp>
#include <rudder/nn/config_error.hpp>
#include <rudder/nn/teacher_model.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/metrics.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/tree.hpp>
#include <rudder/text/treebank.hpp>

#include "commands.hpp"
#include "progress_line.hpp"

namespace rudder::cli {
namespace {

struct EvalOptions {
    std::string suite;       // the suite's JSON file
    std::string out;         // folder for results.json, results.md and the samples; empty = <suite stem>-results
    int64_t targets = 0;     // > 0: at most this many targets per task (a quick run); 0 = the suite's count
    std::string only;        // run only the tasks whose name contains this
    std::string shard;       // "K/N": generate only targets K, K+N, ... into <out>/shard.jsonl (no scoring)
    std::vector<std::string> merge;  // shard folders to summarise instead of generating
    std::string dask;        // a Dask scheduler's address: the shards run on its workers (rudder.dask)
    bool quiet = false;
};

// Returns the exit code; throws for errors the CLI reports (bad suite, missing files, failed runs).


namespace fs = std::filesystem;
using json = nlohmann::json;

// Where a task's targets come from: held-out texts of an annotated JSON Lines file (`rudder annotate`'s output)
// or of E2E CSV, drawn by the seed.
struct TargetSource {
    fs::path file;
    int64_t count = 200;
    uint64_t seed = 0;
    int64_t max_words = 40;
    fs::path meaning;  // E2E CSV whose meaning representations the annotated texts are looked up in (by text)
    json attribute;    // sentiment targets: {"field", "classes": {class: [MR values]}}, as attribute_classifier's
};

// A recipe controller and the kind of target it receives.
struct ControlTarget {
    std::string control;  // the recipe controller's name or plugin
    std::string target;   // one of kTargetKinds
};

struct Task {
    std::string name;
    fs::path recipe;
    std::string model;  // instead of the recipe's: a bundled name, or a folder (resolved against the suite's folder)
    std::vector<ControlTarget> controls;  // empty: no controller receives a target
    bool evaluate_only = false;
    // Per control: params merged after the target's (e.g. {"gamma": 4}), and a weight instead of the recipe's.
    std::map<std::string, json> params;
    std::map<std::string, double> weights;
    json sampler = json::object(); // merged into the recipe's sampler (e.g. {"steps": 50})
    json guidance = json::object();  // merged into the recipe's guidance (e.g. {"gradient_steps": 5})
    TargetSource targets;
};

struct Suite {
    std::string description;
    std::string teacher = "e2e-teacher";
    int64_t samples_per_target = 1;
    std::vector<Task> tasks;
};

const std::vector<std::string> kTargetKinds = {"pos",   "tree",   "span",   "mr",    "fields",
                                               "sentiment", "length", "prefix", "infill", "none"};
// Kinds made from the model's tokens rather than words: they need the recipe model's tokenizer.
bool needs_tokens(const std::string& kind) { return kind == "length" || kind == "prefix" || kind == "infill"; }
constexpr size_t kPrefixTokens = 3;  // a "prefix" target: the reference's first three tokens

TargetSource read_targets(json_input::ObjectReader r, const fs::path& base,
                          TargetSource fallback) {
    TargetSource t = fallback;
    if (auto v = r.text("file")) t.file = base / *v;
    if (auto v = r.text("meaning")) t.meaning = base / *v;
    if (r.has("attribute")) t.attribute = meaning::read_attribute_classes(r, "attribute", json_input::kOptional);
    t.count = r.integer("count", 1, 1'000'000).value_or(t.count);
    t.seed = static_cast<uint64_t>(r.integer("seed", 0, INT64_MAX).value_or(static_cast<int64_t>(t.seed)));
    t.max_words = r.integer("max_words", 1, 4096).value_or(t.max_words);
    r.reject_unknown_keys();
    return t;
}

Suite read_suite(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read the suite '" + file.string() + "'");
    std::ostringstream text;
    text << in.rdbuf();
    json j;
    try {
        j = json_input::parse(text.str());
    } catch (const std::exception& e) {  // nlohmann's parse errors, and json_input::TooDeep
        throw ConfigError(file.string(), {{"", std::string("not valid JSON: ") + e.what()}});
    }
    const fs::path base = file.parent_path();
    std::vector<ConfigIssue> issues;
    json_input::ObjectReader root(j, "", issues);
    Suite s;
    s.description = root.text("description").value_or("");
    s.teacher = root.text("teacher").value_or(s.teacher);
    s.samples_per_target = root.integer("samples_per_target", 1, 1000).value_or(1);
    TargetSource defaults;
    if (root.has("targets")) defaults = read_targets(json_input::ObjectReader(root.object("targets").value_or(json::object()), "/targets", issues), base, defaults);
    const json tasks = root.array("tasks", json_input::kRequired).value_or(json::array());
    if (j.is_object() && j.contains("tasks") && tasks.empty()) {
        root.issue("tasks", "expected at least one task");
    } else {
        for (size_t i = 0; i < tasks.size(); ++i) {
            const std::string p = "/tasks/" + std::to_string(i);
            json_input::ObjectReader t(tasks[i], p, issues);
            Task task;
            task.name = t.text("name", json_input::kRequired).value_or("");
            task.recipe = base / t.text("recipe", json_input::kRequired).value_or("");
            task.model = t.text("model").value_or("");
            if (task.model.find('/') != std::string::npos) task.model = (base / task.model).lexically_normal().string();
            task.evaluate_only = t.boolean("evaluate_only").value_or(false);
            task.sampler = t.object("sampler").value_or(json::object());
            task.guidance = t.object("guidance").value_or(json::object());
            if (t.has("controls")) {
                // A composition: {"semantic": "fields", "syntax_tree": "tree"}, every target from the same text.
                if (t.has("control") || t.has("target")) {
                    t.issue("controls", "give \"controls\" or \"control\" and \"target\", not both");
                    t.text("control").value_or("");  // reported once, above, not again as unknown keys
                    t.text("target").value_or("");
                }
                const json controls = t.object("controls", json_input::kRequired).value_or(json::object());
                json_input::ObjectReader kinds(controls, p + "/controls", issues);
                for (const auto& item : controls.items())
                    task.controls.push_back({item.key(), kinds.choice(item.key(), kTargetKinds, json_input::kRequired).value_or("")});
                if (controls.size() < 2) t.issue("controls", "expected two or more controllers (use \"control\" for one)");
                // Per control, keyed as "controls" is: {"semantic": {"gamma": 2}} and {"syntax_tree": 0.5}.
                const auto per_control = [&](const std::string& key, const auto& read) {
                    const json given = t.object(key).value_or(json::object());
                    json_input::ObjectReader by_control(given, p + "/" + key, issues);
                    for (const auto& item : given.items()) {
                        if (!controls.contains(item.key())) by_control.issue(item.key(), "not one of the task's \"controls\"");
                        else read(by_control, item.key());
                    }
                };
                per_control("params", [&](json_input::ObjectReader& r, const std::string& c) {
                    if (auto o = r.object(c)) task.params[c] = *o;
                });
                per_control("weight", [&](json_input::ObjectReader& r, const std::string& c) {
                    if (auto w = r.number(c, 0.0, 1e6)) task.weights[c] = *w;
                });
            } else {
                const std::string target = t.choice("target", kTargetKinds).value_or(std::string("none"));
                const std::string control = t.text("control").value_or("");
                const json params = t.object("params").value_or(json::object());
                const std::optional<double> weight = t.number("weight", 0.0, 1e6);
                if (!params.empty() && control.empty()) t.issue("params", "needs \"control\": the controller they go to");
                if (weight && control.empty()) t.issue("weight", "needs \"control\": the controller it goes to");
                if (!params.empty()) task.params[control] = params;
                if (weight) task.weights[control] = *weight;
                if (target != "none" && control.empty()) t.issue("control", "required with a target: the recipe controller that receives it");
                if (!control.empty()) task.controls.push_back({control, target});
            }
            task.targets = t.has("targets") ? read_targets(json_input::ObjectReader(t.object("targets").value_or(json::object()), p + "/targets", issues), base, defaults)
                                            : defaults;
            bool any_target = false, mr_target = false;
            for (const auto& c : task.controls) {
                any_target = any_target || c.target != "none";
                mr_target = mr_target || c.target == "mr" || c.target == "fields" || c.target == "sentiment";
                if (c.target == "sentiment" && task.targets.attribute.is_null())
                    t.issue("targets", "a sentiment target needs /targets/attribute ({\"field\", \"classes\"}), here or at the top level");
            }
            if (task.targets.file.empty()) t.issue("targets", "no target file (give /targets/file here or at the top level)");
            const bool annotated = task.targets.file.filename().string().find(".csv") == std::string::npos;
            if (any_target && mr_target && annotated && task.targets.meaning.empty())
                t.issue("targets", "meaning-representation targets from an annotated file need /targets/meaning (the E2E CSV "
                                   "the texts come from)");
            std::error_code ec;
            if (!fs::is_regular_file(task.recipe, ec)) t.issue("recipe", "no recipe file '" + task.recipe.string() + "'");
            for (const fs::path& f : {task.targets.file, task.targets.meaning})
                if (!f.empty() && !fs::is_regular_file(f, ec)) t.issue("targets", "no target file '" + f.string() + "'");
            for (const auto& other : s.tasks)
                if (other.name == task.name) t.issue("name", "another task is named '" + task.name + "'");
            t.reject_unknown_keys();
            s.tasks.push_back(std::move(task));
        }
    }
    root.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError(file.string(), std::move(issues));
    return s;
}

// One held-out text with its annotation (annotated JSON Lines) and/or its meaning representation (E2E CSV).
struct Annotated {
    std::string text;
    std::vector<std::string> pos;
    std::string tree;
    std::string mr;
    int64_t words = 0;  // the annotation's words; for CSV, the reference's space-separated words
};

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
        out.push_back({std::move(t.text), std::move(t.pos), std::move(t.tree), mr == mr_of_text.end() ? std::string() : mr->second, words});
    }
    return out;
}

// One target: the params each control receives, and what the samples file and the scores keep of the text.
struct Target {
    std::map<std::string, json> params;  // by control
    json record;                         // {"reference", ...; infill: "middle" [start, end) token positions}
    std::vector<std::string> middle;     // infill: the reference's middle tokens
};

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
    if (kind == "span") {
        if (a.tree.empty()) return std::nullopt;
        // A constituent of two or more words, short of the whole text, drawn by the same generator.
        std::vector<syntax::Span> spans;
        for (const auto& s : syntax::labelled_spans(syntax::read_tree(a.tree)))
            if (s.end - s.start >= 2 && !(s.start == 0 && s.end == a.words)) spans.push_back(s);
        if (spans.empty()) return std::nullopt;
        const auto& s = spans[rng() % spans.size()];
        return json{{"span", {s.start, s.end, s.label}}};
    }
    if (kind == "mr" || kind == "fields" || kind == "sentiment") {
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
    if (needs_tokens(kind)) {
        const std::vector<int64_t> ids = tokenizer->encode(a.text);
        const auto n = static_cast<int64_t>(ids.size());
        if (kind == "length") return json{{"tokens", n}};
        // Fixed tokens are written as the tokenizer's tokens joined by spaces, which encode back to the same ids.
        auto joined = [&](int64_t from, int64_t to) -> std::optional<std::string> {
            std::string out;
            for (int64_t i = from; i < to; ++i) {
                const auto id = ids[static_cast<size_t>(i)];
                if (id == tokenizer->unk_id()) return std::nullopt;  // the span controller refuses unknown words
                out += (out.empty() ? "" : " ") + tokenizer->token(id);
            }
            return out;
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
    return json::object();  // "none"
}

// The task's targets: `count` texts of at most max_words words that give every control its target, drawn without
// replacement by the seed.
std::vector<Target> make_targets(const Task& task, std::map<fs::path, std::vector<Annotated>>& cache, const Tokenizer* tokenizer) {
    auto& texts = cache[task.targets.file];
    if (texts.empty()) texts = read_annotated(task.targets);
    std::vector<size_t> order(texts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(task.targets.seed);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Target> out;
    for (size_t i : order) {
        if (static_cast<int64_t>(out.size()) >= task.targets.count) break;
        const Annotated& a = texts[i];
        if (a.words < 1 || a.words > task.targets.max_words) continue;
        Target target;
        target.record = {{"reference", a.text}};
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
    if (static_cast<int64_t>(out.size()) < task.targets.count)
        std::fprintf(stderr, "warning: task '%s': only %zu targets of at most %lld words in '%s'\n", task.name.c_str(),
                     out.size(), static_cast<long long>(task.targets.max_words), task.targets.file.string().c_str());
    return out;
}

struct ControlTally {
    int64_t judged = 0, satisfied = 0, scored = 0;
    double score_sum = 0.0;
    std::optional<double> success() const {
        return judged ? std::optional<double>(static_cast<double>(satisfied) / static_cast<double>(judged)) : std::nullopt;
    }
    std::optional<double> mean_score() const {
        return scored ? std::optional<double>(score_sum / static_cast<double>(scored)) : std::nullopt;
    }
};

struct TaskResult {
    std::string name, family;
    int64_t targets = 0, samples = 0;
    std::vector<std::string> order;  // control labels in recipe order
    std::map<std::string, ControlTally> controls;
    int64_t all_satisfied = 0;   // samples every judging control called satisfied (shown for compositions)
    std::optional<double> bleu;  // infill: corpus BLEU-4 of the generated middles against the references'
    double all_success() const { return samples ? static_cast<double>(all_satisfied) / static_cast<double>(samples) : 0.0; }
    double perplexity = 0.0;
    double seconds = 0.0;  // generation only (model and plugin loading excluded)
    double seconds_per_sample() const { return samples ? seconds / static_cast<double>(samples) : 0.0; }
    // The cost of control beside the time: network evaluations of one sequence, and (discrete) positions drawn,
    // each of which a candidate-scoring controller scores.
    int64_t denoised_sequences = 0, rows_drawn = 0;
    double per_sample(int64_t n) const { return samples ? static_cast<double>(n) / static_cast<double>(samples) : 0.0; }
};

json result_json(const TaskResult& r) {
    json controls = json::object();
    for (const auto& label : r.order) {
        const ControlTally& t = r.controls.at(label);
        controls[label] = {{"judged", t.judged},
                           {"satisfied", t.satisfied},
                           {"success", t.success() ? json(*t.success()) : json(nullptr)},
                           {"mean_score", t.mean_score() ? json(*t.mean_score()) : json(nullptr)}};
    }
    return {{"task", r.name},
            {"family", r.family},
            {"targets", r.targets},
            {"samples", r.samples},
            {"controls", controls},
            {"all_satisfied", r.order.size() > 1 ? json(r.all_success()) : json(nullptr)},
            {"bleu", r.bleu ? json(*r.bleu) : json(nullptr)},
            {"teacher_perplexity", r.perplexity},
            {"seconds_per_sample", r.seconds_per_sample()},
            {"network_evaluations_per_sample", r.per_sample(r.denoised_sequences)},
            {"rows_drawn_per_sample", r.family == "discrete" ? json(r.per_sample(r.rows_drawn)) : json(nullptr)}};
}

std::string markdown(const std::vector<TaskResult>& results) {
    std::ostringstream md;
    md << "| task | family | targets | control: success (satisfied) / mean score | teacher ppl | s/sample | network evals/sample |\n"
       << "| --- | --- | ---: | --- | ---: | ---: | ---: |\n";
    char buf[160];
    for (const auto& r : results) {
        std::string controls;
        for (const auto& label : r.order) {
            const ControlTally& t = r.controls.at(label);
            std::snprintf(buf, sizeof buf, "%s%s: %.1f%% / %.3f", controls.empty() ? "" : "; ", label.c_str(),
                          100.0 * t.success().value_or(0.0), t.mean_score().value_or(0.0));
            controls += buf;
        }
        if (r.order.size() > 1) {
            std::snprintf(buf, sizeof buf, "; **all: %.1f%%**", 100.0 * r.all_success());
            controls += buf;
        }
        if (r.bleu) {
            std::snprintf(buf, sizeof buf, "; BLEU-4 of the middle: %.2f", 100.0 * *r.bleu);
            controls += buf;
        }
        std::snprintf(buf, sizeof buf, " | %.2f | %.2f | %.1f |", r.perplexity, r.seconds_per_sample(),
                      r.per_sample(r.denoised_sequences));
        md << "| " << r.name << " | " << r.family << " | " << r.targets << " | " << (controls.empty() ? "—" : controls) << buf << "\n";
    }
    return md.str();
}

std::string slug(const std::string& name) {
    std::string out;
    for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '-';
    return out;
}

// One target's generation: its samples as samples/<task>.jsonl holds them, and what they cost. A shard of a run
// (--shard) writes these; a merge (--merge) reads them back and summarises them as a single run would.
struct TargetOutcome {
    int64_t index = 0;                // the target's place in the task's targets
    std::string family;
    std::vector<std::string> labels;  // the controls' labels, in recipe order
    std::vector<json> samples;        // sample_json, "target", and for infill the generated "middle"
    double seconds = 0.0;             // generation only
    int64_t denoised_sequences = 0, rows_drawn = 0;
};

json outcome_json(const std::string& task, int64_t targets, const std::string& shard, const TargetOutcome& o) {
    return {{"task", task},         {"targets", targets},   {"shard", shard},
            {"index", o.index},     {"family", o.family},   {"labels", o.labels},
            {"samples", o.samples}, {"seconds", o.seconds}, {"denoised_sequences", o.denoised_sequences},
            {"rows_drawn", o.rows_drawn}};
}

TargetOutcome outcome_from_json(const json& j) {
    TargetOutcome o;
    o.index = j.at("index").get<int64_t>();
    o.family = j.at("family").get<std::string>();
    o.labels = j.at("labels").get<std::vector<std::string>>();
    o.samples = j.at("samples").get<std::vector<json>>();
    o.seconds = j.at("seconds").get<double>();
    o.denoised_sequences = j.at("denoised_sequences").get<int64_t>();
    o.rows_drawn = j.at("rows_drawn").get<int64_t>();
    return o;
}

// A task's targets: drawn from its source (or, with no control that takes one, `count` empty ones), at most
// o.targets of them.
std::vector<Target> task_targets(const Task& task, const json& base, std::map<fs::path, std::vector<Annotated>>& annotated,
                                 const EvalOptions& o) {
    // Targets made of the model's tokens (length, prefix, infill) need the recipe model's tokenizer.
    std::shared_ptr<const Tokenizer> tokenizer;
    for (const auto& c : task.controls) {
        if (!needs_tokens(c.target) || tokenizer) continue;
        if (!base.contains("model") || !base.at("model").is_string())
            throw std::runtime_error("task '" + task.name + "': '" + c.target + "' targets need the recipe's \"model\" (its tokenizer)");
        const fs::path dir = resolve_model(base.at("model").get<std::string>(), task.recipe.parent_path(), default_model_path());
        tokenizer = load_model(dir, std::nullopt).tokenizer;
    }
    bool any_target = false;
    for (const auto& c : task.controls) any_target = any_target || c.target != "none";
    std::vector<Target> targets;
    if (any_target) {
        targets = make_targets(task, annotated, tokenizer.get());
    } else {
        targets.resize(static_cast<size_t>(task.targets.count));
        for (auto& t : targets)
            for (const auto& c : task.controls) t.params[c.control] = json::object();
    }
    if (o.targets > 0 && static_cast<int64_t>(targets.size()) > o.targets) targets.resize(static_cast<size_t>(o.targets));
    return targets;
}

// Target `i` of a task: its recipe (the task's, with the target's params, the task's overrides and seed + i),
// generated by a generator of its own.
TargetOutcome run_target(const Suite& suite, const Task& task, const json& base, const Target& target, size_t i,
                         plugins::Registry& registry) {
    json recipe = base;
    recipe["samples"] = suite.samples_per_target;
    recipe["batch_size"] = suite.samples_per_target;
    recipe["seed"] = base.value("seed", int64_t{0}) + static_cast<int64_t>(i);
    for (const auto& [control, params] : target.params) {
        bool found = false;
        if (recipe.contains("controllers") && recipe.at("controllers").is_array()) {
            for (auto& c : recipe["controllers"]) {
                if (c.value("name", c.value("plugin", "")) != control) continue;
                found = true;
                if (!c.contains("params")) c["params"] = json::object();
                c["params"].update(params);
                if (const auto p = task.params.find(control); p != task.params.end()) c["params"].update(p->second);
                if (const auto w = task.weights.find(control); w != task.weights.end()) c["weight"] = w->second;
            }
        }
        if (!found)
            throw std::runtime_error("task '" + task.name + "': the recipe '" + task.recipe.string() +
                                     "' has no controller named '" + control + "'");
    }
    for (const auto& [key, settings] : {std::pair<const char*, const json*>{"sampler", &task.sampler}, {"guidance", &task.guidance}}) {
        if (settings->empty()) continue;
        if (!recipe.contains(key) || !recipe[key].is_object()) recipe[key] = json::object();
        recipe[key].update(*settings);
    }
    if (task.evaluate_only && recipe.contains("controllers") && recipe.at("controllers").is_array())
        for (auto& c : recipe["controllers"]) c["evaluate_only"] = true;
    Recipe parsed;
    try {
        parsed = parse_recipe(recipe.dump(), task.recipe.parent_path());
    } catch (const RecipeError& e) {
        throw std::runtime_error("task '" + task.name + "', target " + std::to_string(i + 1) + ": " + e.what());
    }
    Generator generator(parsed, registry);
    TargetOutcome out;
    out.index = static_cast<int64_t>(i);
    out.family = family_name(generator.model().family);
    const auto start = std::chrono::steady_clock::now();
    const auto samples = generator.generate();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.denoised_sequences = generator.stats().denoised_sequences;
    out.rows_drawn = generator.stats().rows_drawn;
    for (const auto& c : samples.empty() ? std::vector<SampleResult::Control>{} : samples[0].controls) out.labels.push_back(c.label);
    for (const auto& s : samples) {
        json line = sample_json(s);
        line["target"] = target.record;
        for (const auto& [control, params] : target.params) line["target"]["params"][control] = params;
        if (target.record.contains("middle")) {
            const int64_t from = target.record["middle"][0], to = target.record["middle"][1];
            std::vector<std::string> middle;
            for (int64_t k = from; k < to && k < static_cast<int64_t>(s.tokens.size()); ++k)
                middle.push_back(generator.model().tokenizer->token(s.tokens[static_cast<size_t>(k)]));
            line["middle"] = middle;
            line["target"]["middle_tokens"] = target.middle;
        }
        out.samples.push_back(std::move(line));
    }
    return out;
}

// A task's result from its targets' outcomes, in target order: the controls' verdicts and scores, the teacher's
// perplexity of every text, BLEU of infilled middles, and the cost.
TaskResult summarize(const std::string& name, const std::vector<TargetOutcome>& outcomes, const TeacherModel& teacher) {
    TaskResult result;
    result.name = name;
    result.targets = static_cast<int64_t>(outcomes.size());
    std::vector<std::string> texts;
    std::vector<std::vector<std::string>> middles, reference_middles;  // infill
    for (const auto& o : outcomes) {
        result.family = o.family;
        result.seconds += o.seconds;
        result.denoised_sequences += o.denoised_sequences;
        result.rows_drawn += o.rows_drawn;
        for (const auto& label : o.labels)
            if (!result.controls.count(label)) {
                result.order.push_back(label);
                result.controls[label] = {};
            }
        for (const auto& line : o.samples) {
            ++result.samples;
            texts.push_back(line.at("text").get<std::string>());
            if (line.contains("middle")) {
                middles.push_back(line.at("middle").get<std::vector<std::string>>());
                reference_middles.push_back(line.at("target").at("middle_tokens").get<std::vector<std::string>>());
            }
            bool all = !o.labels.empty();
            for (const auto& label : o.labels) {
                const json& verdict = line.at("controls").at(label);
                const json& satisfied = verdict.at("satisfied");
                all = all && satisfied.is_boolean() && satisfied.get<bool>();
                ControlTally& t = result.controls[label];
                if (satisfied.is_boolean()) {
                    ++t.judged;
                    t.satisfied += satisfied.get<bool>() ? 1 : 0;
                }
                if (verdict.contains("score")) {
                    ++t.scored;
                    t.score_sum += verdict.at("score").get<double>();
                }
            }
            result.all_satisfied += all ? 1 : 0;
        }
    }
    {
        ComputeShare share;
        result.perplexity = score_texts(teacher, texts).perplexity();
    }
    if (!middles.empty()) result.bleu = corpus_bleu(middles, reference_middles);
    return result;
}

// "K/N" of --shard: this process runs targets K, K + N, K + 2N, ...
std::pair<int64_t, int64_t> parse_shard(const std::string& text) {
    const auto slash = text.find('/');
    try {
        if (slash != std::string::npos) {
            size_t used_k = 0, used_n = 0;
            const int64_t k = std::stoll(text.substr(0, slash), &used_k), n = std::stoll(text.substr(slash + 1), &used_n);
            if (used_k == slash && used_n == text.size() - slash - 1 && n >= 1 && k >= 0 && k < n) return {k, n};
        }
    } catch (const std::exception&) {
    }
    throw std::runtime_error("--shard: expected K/N with 0 <= K < N (this process runs targets K, K+N, ...), got '" + text + "'");
}

// Every shard's outcomes, by task, checked complete: each task's shards 0..N-1 all present, every target once.
std::map<std::string, std::vector<TargetOutcome>> read_shards(const std::vector<std::string>& dirs) {
    struct Seen {
        int64_t targets = -1, shards = -1;
        std::set<int64_t> shard_ids;
        std::map<int64_t, TargetOutcome> by_index;
    };
    std::map<std::string, Seen> tasks;
    for (const auto& dir : dirs) {
        const fs::path file = fs::path(dir) / "shard.jsonl";
        std::ifstream in(file);
        if (!in) throw std::runtime_error("--merge: no '" + file.string() + "' (the output of `rudder eval --shard K/N -o " + dir + "`)");
        std::string line;
        for (int64_t number = 1; std::getline(in, line); ++number) {
            if (line.empty()) continue;
            const std::string where = file.string() + ":" + std::to_string(number);
            try {
                const json j = json::parse(line);
                Seen& seen = tasks[j.at("task").get<std::string>()];
                const auto [k, n] = parse_shard(j.at("shard").get<std::string>());
                const int64_t targets = j.at("targets").get<int64_t>();
                if ((seen.shards >= 0 && seen.shards != n) || (seen.targets >= 0 && seen.targets != targets))
                    throw std::runtime_error("task '" + j.at("task").get<std::string>() + "' was sharded differently elsewhere (" +
                                             std::to_string(n) + " shards of " + std::to_string(targets) + " targets here)");
                seen.shards = n;
                seen.targets = targets;
                seen.shard_ids.insert(k);
                TargetOutcome o = outcome_from_json(j);
                if (o.index < 0 || o.index >= targets || o.index % n != k)
                    throw std::runtime_error("target " + std::to_string(o.index) + " does not belong to shard " + j.at("shard").get<std::string>());
                if (!seen.by_index.emplace(o.index, std::move(o)).second)
                    throw std::runtime_error("target " + std::to_string(j.at("index").get<int64_t>()) + " appears twice");
            } catch (const json::exception& e) {
                throw std::runtime_error("--merge: " + where + ": not a shard record (" + e.what() + ")");
            } catch (const std::runtime_error& e) {
                throw std::runtime_error("--merge: " + where + ": " + e.what());
            }
        }
    }
    std::map<std::string, std::vector<TargetOutcome>> out;
    for (auto& [task, seen] : tasks) {
        for (int64_t k = 0; k < seen.shards; ++k)
            if (!seen.shard_ids.count(k) && k < seen.targets)
                throw std::runtime_error("--merge: task '" + task + "': shard " + std::to_string(k) + "/" +
                                         std::to_string(seen.shards) + " is missing");
        if (static_cast<int64_t>(seen.by_index.size()) != seen.targets)
            throw std::runtime_error("--merge: task '" + task + "': " + std::to_string(seen.by_index.size()) + " of " +
                                     std::to_string(seen.targets) + " targets in the shards given");
        for (auto& [index, o] : seen.by_index) out[task].push_back(std::move(o));
    }
    return out;
}

// -o, else <suite stem>-results in the current folder.
fs::path output_dir(const EvalOptions& o) {
    return o.out.empty() ? fs::path(fs::path(o.suite).stem().string() + "-results") : fs::path(o.out);
}

int run_eval(const EvalOptions& o) {
    const fs::path suite_file = o.suite;
    const Suite suite = read_suite(suite_file);
    const fs::path out_dir = output_dir(o);
    const bool sharded = !o.shard.empty(), merging = !o.merge.empty();
    const auto [shard_k, shard_n] = sharded ? parse_shard(o.shard) : std::pair<int64_t, int64_t>{0, 1};
    fs::create_directories(sharded ? out_dir : out_dir / "samples");
    std::optional<TeacherModel> teacher;  // a shard only generates: the merge scores
    if (!sharded) teacher = load_teacher(resolve_model(suite.teacher, suite_file.parent_path(), default_model_path()));
    plugins::Registry registry(plugins::Registry::default_search_path());
    std::map<fs::path, std::vector<Annotated>> annotated;
    std::map<std::string, std::vector<TargetOutcome>> merged;
    if (merging) merged = read_shards(o.merge);
    std::ofstream shard_out;
    if (sharded) shard_out.open(out_dir / "shard.jsonl");

    std::vector<TaskResult> results;
    int64_t task_index = 0, selected = 0;
    for (const auto& task : suite.tasks) selected += o.only.empty() || task.name.find(o.only) != std::string::npos;
    if (selected == 0) throw std::runtime_error("no task of '" + suite_file.string() + "' is named like '" + o.only + "'");
    for (const auto& task : suite.tasks) {
        if (!o.only.empty() && task.name.find(o.only) == std::string::npos) continue;
        ++task_index;
        std::vector<TargetOutcome> outcomes;
        // Samples are written as their targets finish, so a long run that is stopped keeps them.
        std::ofstream samples_out;
        if (!sharded) samples_out.open(out_dir / "samples" / (slug(task.name) + ".jsonl"));
        const auto write_samples = [&](const TargetOutcome& outcome) {
            for (const auto& line : outcome.samples) samples_out << line.dump() << "\n";
            samples_out.flush();
        };
        if (merging) {
            const auto found = merged.find(task.name);
            if (found == merged.end()) throw std::runtime_error("--merge: no shard holds task '" + task.name + "'");
            outcomes = std::move(found->second);
            for (const auto& outcome : outcomes) write_samples(outcome);
        } else {
            json base;
            try {
                base = read_json_file(task.recipe);
            } catch (const ModelError& e) {
                throw std::runtime_error("task '" + task.name + "': the recipe " + e.what());
            }
            if (!task.model.empty()) base["model"] = task.model;
            const std::vector<Target> targets = task_targets(task, base, annotated, o);
            const auto task_start = std::chrono::steady_clock::now();
            ProgressLine progress(o.quiet);
            double seconds = 0.0;
            int64_t samples = 0;
            for (size_t i = static_cast<size_t>(shard_k); i < targets.size(); i += static_cast<size_t>(shard_n)) {
                outcomes.push_back(run_target(suite, task, base, targets[i], i, registry));
                seconds += outcomes.back().seconds;
                samples += static_cast<int64_t>(outcomes.back().samples.size());
                if (sharded)  // a line per target as it finishes
                    shard_out << outcome_json(task.name, static_cast<int64_t>(targets.size()), o.shard, outcomes.back()).dump() << "\n" << std::flush;
                else
                    write_samples(outcomes.back());
                progress.show(static_cast<int64_t>(i + 1), static_cast<int64_t>(targets.size()), [&] {
                    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - task_start).count();
                    return fmt::format("[task {}/{}] {}: target {}/{}  {:.2f} s/sample generating, {:.0f} s in all",
                                       task_index, selected, task.name, i + 1, targets.size(),
                                       samples ? seconds / static_cast<double>(samples) : 0.0, elapsed);
                });
            }
            progress.finish();
        }
        if (sharded) continue;
        results.push_back(summarize(task.name, outcomes, *teacher));
        // Written after every task, so a long run that is stopped keeps what it measured.
        json all = json::array();
        for (const auto& r : results) all.push_back(result_json(r));
        std::ofstream(out_dir / "results.json") << json({{"suite", suite_file.string()}, {"description", suite.description}, {"tasks", all}}).dump(2) << "\n";
        std::ofstream(out_dir / "results.md") << markdown(results);
    }
    if (sharded) {
        if (!o.quiet) std::fprintf(stderr, "shard %s in %s (merge with `rudder eval SUITE --merge DIR...`)\n", o.shard.c_str(),
                                   (out_dir / "shard.jsonl").string().c_str());
        return 0;
    }
    std::cout << markdown(results);
    if (!o.quiet) std::fprintf(stderr, "results in %s (results.json, results.md, samples/)\n", out_dir.string().c_str());
    return 0;
}

// --dask: this process becomes `python3 -m rudder.dask eval ...` (the Python package beside the installed library),
// which runs `rudder eval --shard k/n` on the cluster's workers and `rudder eval --merge` with this executable.
// Dask's client is Python only, hence the hand-over rather than a C++ client.
int run_on_dask(const EvalOptions& o, int threads) {
    const fs::path package_dir = python_package_dir();
    if (!fs::exists(package_dir / "rudder" / "dask.py"))
        throw std::runtime_error("--dask: the Python package rudder is not at " + package_dir.string() +
                                 " (an installed prefix or a build tree has it)");
    const char* python_env = std::getenv("RUDDER_PYTHON");
    const std::string python = python_env != nullptr && *python_env != '\0' ? python_env : "python3";
    std::vector<std::string> args{python, "-m", "rudder.dask", "eval", fs::absolute(o.suite).string(), "--scheduler", o.dask,
                                  "-o", output_dir(o).string(), "--threads", std::to_string(threads > 0 ? threads : 1)};
    if (!o.only.empty()) args.insert(args.end(), {"--only", o.only});
    if (o.targets > 0) args.insert(args.end(), {"--targets", std::to_string(o.targets)});
    if (o.quiet) args.push_back("--quiet");
    const char* python_path = std::getenv("PYTHONPATH");
    const std::string search = package_dir.string() + (python_path != nullptr && *python_path != '\0' ? ":" + std::string(python_path) : "");
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (setenv("PYTHONPATH", search.c_str(), 1) != 0 || (!ec && setenv("RUDDER_BIN", self.c_str(), 1) != 0))
        throw std::runtime_error(std::string("--dask: cannot set the environment: ") + std::strerror(errno));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    execvp(argv[0], argv.data());
    throw std::runtime_error("--dask: cannot run " + python + " (" + std::strerror(errno) +
                             "); RUDDER_PYTHON names the Python 3 to use, one with Dask's distributed");
}

}  // namespace

void add_eval_command(CLI::App& app, Commands& commands) {
    auto o = std::make_shared<EvalOptions>();
    auto* eval = app.add_subcommand(
        "eval", "Run a suite of control tasks over held-out targets: success, teacher perplexity, s/sample");
    eval->add_option("suite", o->suite, "Suite (JSON, see docs/eval.md; suites ship in examples/eval/)")
        ->required()
        ->check(CLI::ExistingFile);
    eval->add_option("-o,--out", o->out, "Folder for results.json, results.md and samples/ (default <suite>-results)");
    eval->add_option("--targets", o->targets, "At most this many targets per task (a quick run)")
        ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
    eval->add_option("--only", o->only, "Run only the tasks whose name contains this text");
    auto* shard = eval->add_option("--shard", o->shard,
                                   "K/N: generate only targets K, K+N, K+2N, ... of each task into OUT/shard.jsonl, unscored "
                                   "(a part of a run spread over processes or machines; python3 -m rudder.dask runs them on Dask)");
    eval->add_option("--merge", o->merge, "Shard folders (--shard outputs) that together hold every target: summarise them "
                                          "into OUT exactly as one run would, without generating")
        ->excludes(shard);
    eval->add_option("--dask", o->dask, "SCHEDULER: spread the targets over a Dask cluster's workers (tcp://host:8786): "
                                        "shards run there, the merge here; --threads is each shard's (default 1); "
                                        "needs Python 3 with Dask's distributed ($RUDDER_PYTHON, default python3)")
        ->excludes(shard)
        ->excludes("--merge");
    commands.add_threads_option(eval);
    eval->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
    commands.list.push_back({eval, [o, &commands] { return o->dask.empty() ? run_eval(*o) : run_on_dask(*o, commands.threads); }});
}

}  // namespace rudder::cli
