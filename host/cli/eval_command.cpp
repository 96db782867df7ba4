#include "eval_command.hpp"

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

#include "compute_threads.hpp"
#include "generator.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "syntax/tree.hpp"
#include "syntax/treebank.hpp"
#include "text_files.hpp"
#include "train/config.hpp"
#include "train/score.hpp"

namespace rudder::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Where a task's targets come from: texts of an annotated JSON Lines file (`rudder annotate`'s output).
struct TargetSource {
    fs::path file;
    int64_t count = 200;
    uint64_t seed = 0;
    int64_t max_words = 40;
};

struct Task {
    std::string name;
    fs::path recipe;
    std::string control;  // the recipe controller (name or plugin) that receives each target; "" = none
    std::string target;   // pos | tree | span | none
    bool evaluate_only = false;
    json params = json::object();  // merged into the control's params after the target (e.g. {"gamma": 4})
    TargetSource targets;
};

struct Suite {
    std::string description;
    std::string teacher = "e2e-teacher";
    int64_t samples_per_target = 1;
    std::vector<Task> tasks;
};

const std::vector<std::string> kTargetKinds = {"pos", "tree", "span", "mr", "none"};

TargetSource read_targets(train::ObjectReader r, const fs::path& base, TargetSource fallback) {
    TargetSource t = fallback;
    if (r.has("file")) t.file = base / r.string("file", std::nullopt);
    t.count = r.integer("count", t.count, 1, 1'000'000);
    t.seed = static_cast<uint64_t>(r.integer("seed", static_cast<int64_t>(t.seed), 0, INT64_MAX));
    t.max_words = r.integer("max_words", t.max_words, 1, 4096);
    r.reject_unknown_keys();
    return t;
}

Suite read_suite(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read the suite '" + file.string() + "'");
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {
        throw train::ConfigError(file.string(), {{"", std::string("not valid JSON: ") + e.what()}});
    }
    const fs::path base = file.parent_path();
    std::vector<train::ConfigIssue> issues;
    train::ObjectReader root(j, "", issues);
    Suite s;
    s.description = root.string("description", "");
    s.teacher = root.string("teacher", s.teacher);
    s.samples_per_target = root.integer("samples_per_target", 1, 1, 1000);
    TargetSource defaults;
    if (root.has("targets")) defaults = read_targets(train::ObjectReader(root.object("targets", false), "/targets", issues), base, defaults);
    const json tasks = root.array("tasks", true);
    if (j.is_object() && j.contains("tasks") && tasks.empty()) {
        root.issue("tasks", "expected at least one task");
    } else {
        for (size_t i = 0; i < tasks.size(); ++i) {
            const std::string p = "/tasks/" + std::to_string(i);
            train::ObjectReader t(tasks[i], p, issues);
            Task task;
            task.name = t.string("name", std::nullopt);
            task.recipe = base / t.string("recipe", std::nullopt);
            task.target = t.string("target", std::string("none"), kTargetKinds);
            task.control = t.string("control", "");
            task.evaluate_only = t.boolean("evaluate_only", false);
            task.params = t.object("params", false);
            if (!task.params.empty() && task.control.empty()) t.issue("params", "needs \"control\": the controller they go to");
            if (task.target != "none" && task.control.empty()) t.issue("control", "required with a target: the recipe controller that receives it");
            task.targets = t.has("targets") ? read_targets(train::ObjectReader(t.object("targets", false), p + "/targets", issues), base, defaults)
                                            : defaults;
            if (task.targets.file.empty()) t.issue("targets", "no target file (give /targets/file here or at the top level)");
            std::error_code ec;
            if (!fs::is_regular_file(task.recipe, ec)) t.issue("recipe", "no recipe file '" + task.recipe.string() + "'");
            if (!task.targets.file.empty() && !fs::is_regular_file(task.targets.file, ec))
                t.issue("targets", "no target file '" + task.targets.file.string() + "'");
            for (const auto& other : s.tasks)
                if (other.name == task.name) t.issue("name", "another task is named '" + task.name + "'");
            t.reject_unknown_keys();
            s.tasks.push_back(std::move(task));
        }
    }
    root.reject_unknown_keys();
    if (!issues.empty()) throw train::ConfigError(file.string(), std::move(issues));
    return s;
}

// One held-out text with its annotation (annotated JSON Lines), or with its meaning representation (E2E CSV).
struct Annotated {
    std::string text;
    std::vector<std::string> pos;
    std::string tree;
    std::string mr;
    int64_t words = 0;  // the annotation's words; for CSV, the reference's space-separated words
};

std::vector<Annotated> read_annotated(const fs::path& file) {
    std::vector<Annotated> out;
    if (file.filename().string().find(".csv") != std::string::npos) {
        for (auto& r : read_e2e_csv(file)) {
            Annotated a;
            a.text = std::move(r.ref);
            a.mr = std::move(r.mr);
            // Spaces are enough here: max_words only keeps targets within the model's length.
            a.words = 1 + static_cast<int64_t>(std::count(a.text.begin(), a.text.end(), ' '));
            out.push_back(std::move(a));
        }
        return out;
    }
    for (auto& t : syntax::read_annotated_texts(file)) {
        const auto words = static_cast<int64_t>(t.pos.size());
        out.push_back({std::move(t.text), std::move(t.pos), std::move(t.tree), std::string(), words});
    }
    return out;
}

// The task's targets: `count` texts of at most max_words words, drawn without replacement by the seed; each as
// the params its control takes.
std::vector<json> make_targets(const Task& task, std::map<fs::path, std::vector<Annotated>>& cache) {
    auto& texts = cache[task.targets.file];
    if (texts.empty()) texts = read_annotated(task.targets.file);
    std::vector<size_t> order(texts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(task.targets.seed);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<json> out;
    for (size_t i : order) {
        if (static_cast<int64_t>(out.size()) >= task.targets.count) break;
        const Annotated& a = texts[i];
        const int64_t words = a.words;
        if (words < 1 || words > task.targets.max_words) continue;
        json params = {{"reference", a.text}};
        if (task.target == "mr") {
            if (a.mr.empty()) continue;
            params["condition"] = a.mr;
        } else if (task.target == "pos") {
            params["tags"] = a.pos;
        } else if (task.target == "tree") {
            if (a.tree.empty()) continue;
            params["tree"] = a.tree;
        } else if (task.target == "span") {
            if (a.tree.empty()) continue;
            // A constituent of two or more words, short of the whole text, drawn by the same generator.
            std::vector<syntax::Span> spans;
            for (const auto& s : syntax::labelled_spans(syntax::read_tree(a.tree)))
                if (s.end - s.start >= 2 && !(s.start == 0 && s.end == words)) spans.push_back(s);
            if (spans.empty()) continue;
            const auto& s = spans[rng() % spans.size()];
            params["span"] = {s.start, s.end, s.label};
        }
        out.push_back(std::move(params));
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
    double perplexity = 0.0;
    double seconds = 0.0;  // generation only (model and plugin loading excluded)
    double seconds_per_sample() const { return samples ? seconds / static_cast<double>(samples) : 0.0; }
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
            {"teacher_perplexity", r.perplexity},
            {"seconds_per_sample", r.seconds_per_sample()}};
}

std::string markdown(const std::vector<TaskResult>& results) {
    std::ostringstream md;
    md << "| task | family | targets | control: success (satisfied) / mean score | teacher ppl | s/sample |\n"
       << "| --- | --- | ---: | --- | ---: | ---: |\n";
    char buf[160];
    for (const auto& r : results) {
        std::string controls;
        for (const auto& label : r.order) {
            const ControlTally& t = r.controls.at(label);
            std::snprintf(buf, sizeof buf, "%s%s: %.1f%% / %.3f", controls.empty() ? "" : "; ", label.c_str(),
                          100.0 * t.success().value_or(0.0), t.mean_score().value_or(0.0));
            controls += buf;
        }
        std::snprintf(buf, sizeof buf, " | %.2f | %.2f |", r.perplexity, r.seconds_per_sample());
        md << "| " << r.name << " | " << r.family << " | " << r.targets << " | " << (controls.empty() ? "—" : controls) << buf << "\n";
    }
    return md.str();
}

std::string slug(const std::string& name) {
    std::string out;
    for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '-';
    return out;
}

}  // namespace

int run_eval(const EvalOptions& o) {
    if (o.threads > 0) set_compute_threads(o.threads);
    const fs::path suite_file = o.suite;
    const Suite suite = read_suite(suite_file);
    const fs::path out_dir = o.out.empty() ? fs::path(suite_file.stem().string() + "-results") : fs::path(o.out);
    fs::create_directories(out_dir / "samples");
    const train::TeacherModel teacher =
        train::load_teacher(resolve_model(suite.teacher, suite_file.parent_path(), default_model_path()));
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
            std::ifstream in(task.recipe);
            base = json::parse(in);
        } catch (const json::exception& e) {
            throw std::runtime_error("task '" + task.name + "': the recipe '" + task.recipe.string() + "' is not valid JSON (" +
                                     e.what() + ")");
        }
        std::vector<json> targets;
        if (task.target == "none") {
            targets.assign(static_cast<size_t>(task.targets.count), json::object());
        } else {
            targets = make_targets(task, annotated);
        }
        if (o.targets > 0 && static_cast<int64_t>(targets.size()) > o.targets) targets.resize(static_cast<size_t>(o.targets));

        TaskResult result;
        result.name = task.name;
        result.targets = static_cast<int64_t>(targets.size());
        std::vector<std::string> texts;
        std::ofstream samples_out(out_dir / "samples" / (slug(task.name) + ".jsonl"));
        const auto task_start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < targets.size(); ++i) {
            json recipe = base;
            recipe["samples"] = suite.samples_per_target;
            recipe["batch_size"] = suite.samples_per_target;
            recipe["seed"] = base.value("seed", int64_t{0}) + static_cast<int64_t>(i);
            bool found = task.control.empty();
            json target_params = targets[i];
            target_params.erase("reference");  // the annotated text the target came from: kept in the samples file
            if (recipe.contains("controllers") && recipe.at("controllers").is_array()) {
                for (auto& c : recipe["controllers"]) {
                    const std::string label = c.value("name", c.value("plugin", ""));
                    if (task.control.empty() || label != task.control) continue;
                    found = true;
                    if (!c.contains("params")) c["params"] = json::object();
                    c["params"].update(target_params);
                    c["params"].update(task.params);
                    if (task.evaluate_only) c["evaluate_only"] = true;
                }
            }
            if (!found)
                throw std::runtime_error("task '" + task.name + "': the recipe '" + task.recipe.string() +
                                         "' has no controller named '" + task.control + "'");
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
            for (const auto& s : samples) {
                ++result.samples;
                texts.push_back(s.text);
                json line = sample_json(s);
                line["target"] = targets[i];
                samples_out << line.dump() << "\n";
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
        result.perplexity = train::score_texts(teacher, texts).perplexity();
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

}  // namespace rudder::cli
