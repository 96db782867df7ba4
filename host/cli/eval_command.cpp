
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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

namespace rudder::cli {
namespace {

struct EvalOptions {
    std::string suite;       // the suite's JSON file
    std::string out;         // folder for results.json, results.md and the samples; empty = <suite stem>-results
    int64_t targets = 0;     // > 0: at most this many targets per task (a quick run); 0 = the suite's count
    std::string only;        // run only the tasks whose name contains this
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
    std::vector<ControlTarget> controls;  // empty: no controller receives a target
    bool evaluate_only = false;
    json params = json::object();  // merged into the (one) control's params after the target (e.g. {"gamma": 4})
    std::optional<double> weight;  // the (one) control's weight instead of the recipe's
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
            task.evaluate_only = t.boolean("evaluate_only").value_or(false);
            task.params = t.object("params").value_or(json::object());
            task.weight = t.number("weight", 0.0, 1e6);
            task.sampler = t.object("sampler").value_or(json::object());
            task.guidance = t.object("guidance").value_or(json::object());
            if (t.has("controls")) {
                // A composition: {"semantic": "fields", "syntax_tree": "tree"}, every target from the same text.
                if (t.has("control") || t.has("target")) {
                    t.issue("controls", "give \"controls\" or \"control\" and \"target\", not both");
                    t.text("control").value_or("");  // reported once, above, not again as unknown keys
                    t.text("target").value_or("");
                }
                if (t.has("params")) t.issue("params", "applies to a task with one \"control\"; a composition's recipe holds its params");
                if (t.has("weight")) t.issue("weight", "applies to a task with one \"control\"; a composition's recipe holds its weights");
                const json controls = t.object("controls", json_input::kRequired).value_or(json::object());
                json_input::ObjectReader kinds(controls, p + "/controls", issues);
                for (const auto& item : controls.items())
                    task.controls.push_back({item.key(), kinds.choice(item.key(), kTargetKinds, json_input::kRequired).value_or("")});
                if (controls.size() < 2) t.issue("controls", "expected two or more controllers (use \"control\" for one)");
            } else {
                const std::string target = t.choice("target", kTargetKinds).value_or(std::string("none"));
                const std::string control = t.text("control").value_or("");
                if (!task.params.empty() && control.empty()) t.issue("params", "needs \"control\": the controller they go to");
                if (task.weight && control.empty()) t.issue("weight", "needs \"control\": the controller it goes to");
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

int run_eval(const EvalOptions& o) {
    const fs::path suite_file = o.suite;
    const Suite suite = read_suite(suite_file);
    const fs::path out_dir = o.out.empty() ? fs::path(suite_file.stem().string() + "-results") : fs::path(o.out);
    fs::create_directories(out_dir / "samples");
    const TeacherModel teacher =
        load_teacher(resolve_model(suite.teacher, suite_file.parent_path(), default_model_path()));
    plugins::Registry registry(plugins::Registry::default_search_path());
    std::map<fs::path, std::vector<Annotated>> annotated;

    std::vector<TaskResult> results;
    int64_t task_index = 0, selected = 0;
    for (const auto& task : suite.tasks) selected += o.only.empty() || task.name.find(o.only) != std::string::npos;
    if (selected == 0) throw std::runtime_error("no task of '" + suite_file.string() + "' is named like '" + o.only + "'");
    for (const auto& task : suite.tasks) {
        if (!o.only.empty() && task.name.find(o.only) == std::string::npos) continue;
        ++task_index;
        json base;
        try {
            base = read_json_file(task.recipe);
        } catch (const ModelError& e) {
            throw std::runtime_error("task '" + task.name + "': the recipe " + e.what());
        }
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

        TaskResult result;
        result.name = task.name;
        result.targets = static_cast<int64_t>(targets.size());
        std::vector<std::string> texts;
        std::vector<std::vector<std::string>> middles, reference_middles;  // infill
        std::ofstream samples_out(out_dir / "samples" / (slug(task.name) + ".jsonl"));
        const auto task_start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < targets.size(); ++i) {
            json recipe = base;
            recipe["samples"] = suite.samples_per_target;
            recipe["batch_size"] = suite.samples_per_target;
            recipe["seed"] = base.value("seed", int64_t{0}) + static_cast<int64_t>(i);
            for (const auto& [control, params] : targets[i].params) {
                bool found = false;
                if (recipe.contains("controllers") && recipe.at("controllers").is_array()) {
                    for (auto& c : recipe["controllers"]) {
                        if (c.value("name", c.value("plugin", "")) != control) continue;
                        found = true;
                        if (!c.contains("params")) c["params"] = json::object();
                        c["params"].update(params);
                        c["params"].update(task.params);
                        if (task.weight) c["weight"] = *task.weight;
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
            result.family = family_name(generator.model().family);
            const auto start = std::chrono::steady_clock::now();
            const auto samples = generator.generate();
            result.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            result.denoised_sequences += generator.stats().denoised_sequences;
            result.rows_drawn += generator.stats().rows_drawn;
            for (const auto& s : samples) {
                ++result.samples;
                texts.push_back(s.text);
                json line = sample_json(s);
                line["target"] = targets[i].record;
                for (const auto& [control, params] : targets[i].params) line["target"]["params"][control] = params;
                if (targets[i].record.contains("middle")) {
                    const int64_t from = targets[i].record["middle"][0], to = targets[i].record["middle"][1];
                    std::vector<std::string> middle;
                    for (int64_t k = from; k < to && k < static_cast<int64_t>(s.tokens.size()); ++k)
                        middle.push_back(generator.model().tokenizer->token(s.tokens[static_cast<size_t>(k)]));
                    middles.push_back(std::move(middle));
                    reference_middles.push_back(targets[i].middle);
                }
                samples_out << line.dump() << "\n";
                bool all = !s.controls.empty();
                for (const auto& c : s.controls) all = all && c.verdict.satisfied == 1;
                result.all_satisfied += all ? 1 : 0;
                for (const auto& c : s.controls) {
                    if (!result.controls.count(c.label)) result.order.push_back(c.label);
                    ControlTally& t = result.controls[c.label];
                    if (c.verdict.satisfied >= 0) {
                        ++t.judged;
                        t.satisfied += c.verdict.satisfied;
                    }
                    if (c.verdict.has_score) {
                        ++t.scored;
                        t.score_sum += c.verdict.score;
                    }
                }
            }
            if (!o.quiet) {
                const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - task_start).count();
                std::fprintf(stderr, "\r[task %lld/%lld] %s: target %zu/%zu  %.2f s/sample generating, %.0f s in all   ",
                             static_cast<long long>(task_index), static_cast<long long>(selected), task.name.c_str(), i + 1,
                             targets.size(), result.seconds_per_sample(), elapsed);
                std::fflush(stderr);
            }
        }
        if (!o.quiet) std::fprintf(stderr, "\n");
        {
            ComputeShare share;
            result.perplexity = score_texts(teacher, texts).perplexity();
        }
        if (!middles.empty()) result.bleu = corpus_bleu(middles, reference_middles);
        results.push_back(result);
        // Written after every task, so a long run that is stopped keeps what it measured.
        json all = json::array();
        for (const auto& r : results) all.push_back(result_json(r));
        std::ofstream(out_dir / "results.json") << json({{"suite", suite_file.string()}, {"description", suite.description}, {"tasks", all}}).dump(2) << "\n";
        std::ofstream(out_dir / "results.md") << markdown(results);
    }
    std::cout << markdown(results);
    if (!o.quiet) std::fprintf(stderr, "results in %s (results.json, results.md, samples/)\n", out_dir.string().c_str());
    return 0;
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
    commands.add_threads_option(eval);
    eval->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
    commands.list.push_back({eval, [o] { return run_eval(*o); }});
}

}  // namespace rudder::cli
