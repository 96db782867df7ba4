#include <rudder/runtime/recipe.hpp>

#include <rudder/rudder_json.hpp>
#include <rudder/text/text_files.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace rudder {
namespace {

using json = nlohmann::json;
using json_input::DocumentReader;
using json_input::kRequired;
using json_input::ObjectReader;

std::string join_issues(const std::vector<RecipeIssue>& issues) { return json_input::describe(issues, "(recipe)"); }

// What a checked "sampler" object names and asks for, where the values are valid (their problems were reported).
SamplerChoice choice_of(json settings, const RecipeLimits& limits) {
    std::vector<RecipeIssue> reported;
    ObjectReader s(settings, "/sampler", reported);
    SamplerChoice out;
    out.name = s.text("name").value_or("");
    out.steps = s.integer("steps", 1, limits.max_steps).value_or(out.steps);
    out.settings = std::move(settings);
    return out;
}

void parse_guidance(DocumentReader& g, GuidanceSpec& out) {
    if (auto v = g.integer("gradient_steps", 0, 1000)) out.gradient_steps = *v;
    if (auto v = g.number("step_size", 0.0, 1e6)) out.step_size = *v;
    if (auto v = g.number("fluency_weight", 0.0, 1e6)) out.fluency_weight = *v;
    if (auto v = g.number("until_t", 0.0, 1.0)) out.until_t = *v;
    if (auto v = g.integer("particles", 1, 256)) out.particles = *v;
    if (auto v = g.integer("resample_every", 0, 100000)) out.resample_every = *v;
    if (auto v = g.number("resample_scale", 0.0, 1e6)) out.resample_scale = *v;
    if ((g.has("resample_every") || g.has("resample_scale")) && out.particles == 1)
        g.issue(g.has("resample_every") ? "resample_every" : "resample_scale",
                "resampling needs more than one particle per sample; give 'particles'");
    g.reject_unknown_keys();
}

// A name or path the host looks up (a model, a plugin) or shows (a controller's name): at most kMaxNameBytes.
std::optional<std::string> name_text(DocumentReader& object, const std::string& key, json_input::Need need) {
    std::optional<std::string> v = object.text(key, need);
    if (v && v->size() > json_input::kMaxNameBytes) {
        object.issue(key, std::to_string(v->size()) + " bytes long, over the limit of " +
                              std::to_string(json_input::kMaxNameBytes) + " for a name or path");
        return std::nullopt;
    }
    return v;
}

ControllerSpec parse_controller(DocumentReader& item) {
    ControllerSpec spec;
    spec.pointer = item.pointer();
    if (auto v = name_text(item, "plugin", kRequired)) spec.plugin = *v;
    if (auto v = item.text("sha256")) {
        std::string digest = *v;
        for (char& ch : digest) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (digest.size() == 64 && digest.find_first_not_of("0123456789abcdef") == std::string::npos)
            spec.sha256 = digest;
        else
            item.issue("sha256",
                       "expected the library file's SHA-256 as 64 hex digits (as `rudder plugins` or "
                       "`sha256sum` prints it), got '" +
                           *v + "'");
    }
    if (auto v = name_text(item, "name", json_input::kOptional)) spec.name = *v;
    if (auto v = item.number("weight", -1e6, 1e6)) spec.weight = *v;
    if (auto v = item.number("time_limit", 0.0, 86400.0)) spec.time_limit = *v;
    if (auto v = item.choice("isolation", {"in_process", "process"})) spec.isolation = *v;
    if (auto v = item.choice("on_failure", {"fail", "continue"})) spec.on_failure = *v;
    if (auto active = item.object("active")) {
        DocumentReader a(*active, item.pointer("active"), item.issues());
        read_time_window(a, item, "active", spec.active.from_t, spec.active.to_t);
    }
    if (auto v = item.boolean("evaluate_only")) spec.active.never = *v;
    if (auto v = item.object("params")) spec.params = std::move(*v);
    item.reject_unknown_keys();
    return spec;
}

void parse_controllers(DocumentReader& doc, const RecipeLimits& limits, std::vector<ControllerSpec>& out) {
    const auto list = doc.array("controllers");
    if (!list) return;
    if (static_cast<int64_t>(list->size()) > limits.max_controllers) {
        doc.issue("controllers", std::to_string(list->size()) + " controllers, over the limit of " +
                                     std::to_string(limits.max_controllers));
        return;
    }
    for (size_t i = 0; i < list->size(); ++i) {
        DocumentReader item((*list)[i], "/controllers/" + std::to_string(i), doc.issues());
        if (item.is_object()) out.push_back(parse_controller(item));
    }
    // Labels must be unique: explicit names are checked, default ones (the plugin value) get a suffix.
    std::set<std::string> explicit_names;
    for (const auto& spec : out) {
        if (spec.name.empty()) continue;
        if (!explicit_names.insert(spec.name).second)
            doc.issues().push_back({spec.pointer + "/name", "name '" + spec.name + "' is used by another controller"});
    }
    // Each base label's next suffix to try, kept across controllers: labelling n controllers of one plugin costs
    // n lookups, not n^2 / 2.
    std::map<std::string, int> next_suffix;
    for (auto& spec : out) {
        if (!spec.name.empty() || spec.plugin.empty()) continue;
        std::string base = std::filesystem::path(spec.plugin).stem().string();
        if (base.rfind("rudder_", 0) == 0) base = base.substr(7);
        std::string label = base;
        auto [suffix, fresh] = next_suffix.emplace(base, 2);
        (void)fresh;
        while (explicit_names.count(label) > 0) label = base + "_" + std::to_string(suffix->second++);
        explicit_names.insert(label);
        spec.name = label;
    }
}

}  // namespace

namespace {

template <class Reader>
void read_window(Reader& window, Reader& parent, const char* key, double& from_t, double& to_t) {
    if (auto v = window.number("from_t", 0.0, 1.0)) from_t = *v;
    if (auto v = window.number("to_t", 0.0, 1.0)) to_t = *v;
    window.reject_unknown_keys();
    if (to_t > from_t)
        parent.issue(key, "to_t (" + std::to_string(to_t) + ") must not exceed from_t (" + std::to_string(from_t) +
                              "): the window runs from noisy to clean");
}

}  // namespace

// The sampler object's rooms read it as nlohmann::json (remask), the recipe's controllers as a document (active).
void read_time_window(ObjectReader& window, ObjectReader& parent, const char* key, double& from_t, double& to_t) {
    read_window(window, parent, key, from_t, to_t);
}
void read_time_window(DocumentReader& window, DocumentReader& parent, const char* key, double& from_t, double& to_t) {
    read_window(window, parent, key, from_t, to_t);
}

RecipeError::RecipeError(std::vector<RecipeIssue> issues)
    : std::runtime_error(join_issues(issues)), issues_(std::move(issues)) {}

Recipe parse_recipe(const std::string& text, const std::filesystem::path& base_dir, const RecipeLimits& limits,
                    std::vector<RecipeIssue>* issues) {
    if (text.size() > kMaxConfigFileBytes)
        throw RecipeError(
            {{"", "the recipe is larger than " + byte_size_text(kMaxConfigFileBytes) + ", the most a recipe may be"}});
    JsonDocument doc;
    try {
        doc = json_input::parse_document(text);
    } catch (const json_input::Refused& e) {
        throw RecipeError({{e.pointer(), std::string("not accepted: ") + e.what()}});
    } catch (const json::parse_error& e) {
        // Turn the byte offset into line:column, which is what an editor shows.
        size_t line = 1, col = 1;
        for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
            if (text[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        std::string what = e.what();
        const auto cut = what.find("parse error");
        if (cut != std::string::npos) what = what.substr(cut);
        throw RecipeError(
            {{"", "not valid JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what}});
    } catch (const json::exception& e) {
        // Well-formed text the parser still refuses, e.g. a number beyond double's range ("1e999").
        throw RecipeError({{"", std::string("not valid JSON: ") + e.what()}});
    }
    return parse_recipe_document(doc, base_dir, limits, issues);
}

Recipe parse_recipe_document(const JsonDocument& doc, const std::filesystem::path& base_dir, const RecipeLimits& limits,
                             std::vector<RecipeIssue>* issues) {
    std::vector<RecipeIssue> found;
    Recipe r;
    r.base_dir = base_dir;
    if (!doc.is_object()) throw RecipeError({{"", "a recipe is a JSON object, got " + json_input::shown(doc)}});
    DocumentReader root(doc, "", found);
    if (auto v = name_text(root, "model", kRequired)) r.model = *v;
    if (auto v = root.choice("family", {"continuous", "discrete"})) r.family = *v;
    if (auto v = root.integer("seed", 0, std::numeric_limits<int64_t>::max())) r.seed = static_cast<uint64_t>(*v);
    if (auto v = root.integer("samples", 1, limits.max_samples)) r.samples = *v;
    // A default over a configured limit: batch_size only groups samples, so the limit itself is used; the sampler's
    // steps change the result, so a recipe that leaves them out must give them (below, after the sampler).
    r.batch_size = std::min(r.batch_size, limits.max_batch_size);
    if (auto v = root.integer("batch_size", 1, limits.max_batch_size)) r.batch_size = *v;
    if (auto v = root.integer("max_length", 1, limits.max_length)) r.max_length = *v;
    r.max_length_limit = limits.max_length;
    r.max_memory_limit = limits.max_memory_bytes;
    r.model_paths = limits.model_paths;
    if (auto v = root.text("device")) {
        const std::string& d = *v;
        const bool ok = d == "cpu" || d == "cuda" ||
                        (d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
                         d.find_first_not_of("0123456789", 5) == std::string::npos && d.size() < 9);
        if (ok)
            r.device = d;
        else
            root.issue("device", "expected 'cpu', 'cuda' or 'cuda:<index>', got '" + d + "'");
    }
    if (auto v = root.choice("isolation", {"in_process", "process"})) r.isolation = *v;
    if (auto v = root.choice("weights", {"stored", "int8"})) r.weights = *v;
    if (auto v = root.integer("candidates", 1, 4096)) r.candidates = *v;
    r.max_steps_limit = limits.max_steps;
    if (auto sampler = root.object("sampler")) {
        // The sampler's rooms (diffusion_process.cpp) read it as nlohmann::json: converted once, here.
        json settings(*sampler);
        check_sampler_settings(settings, "/sampler", found, limits);
        r.sampler = choice_of(std::move(settings), limits);
    }
    if (!r.sampler.settings.contains("steps") && r.sampler.steps > limits.max_steps)
        found.push_back({"/sampler/steps", "the default of " + std::to_string(r.sampler.steps) +
                                               " steps is over the limit of " + std::to_string(limits.max_steps) +
                                               "; give sampler.steps"});
    if (auto guidance = root.object("guidance")) {
        DocumentReader g(*guidance, "/guidance", found);
        parse_guidance(g, r.guidance);
    }
    parse_controllers(root, limits, r.controllers);
    root.reject_unknown_keys();
    if (issues != nullptr) {
        issues->insert(issues->end(), found.begin(), found.end());
    } else if (!found.empty()) {
        throw RecipeError(found);
    }
    return r;
}

Recipe load_recipe(const std::filesystem::path& path, const RecipeLimits& limits, std::vector<RecipeIssue>* issues) {
    std::string text;
    try {
        text = read_small_file(path, kMaxConfigFileBytes, "recipe file");
    } catch (const std::runtime_error& e) {
        throw RecipeError({{"", std::string(e.what())}});
    }
    std::filesystem::path dir = path.parent_path();
    if (dir.empty()) dir = ".";
    return parse_recipe(text, dir, limits, issues);
}

}  // namespace rudder
