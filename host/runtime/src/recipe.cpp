#include <rudder/runtime/recipe.hpp>

#include <rudder/rudder_json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace rudder {
namespace {

using json = nlohmann::json;
using json_input::kRequired;
using json_input::ObjectReader;

std::string join_issues(const std::vector<RecipeIssue>& issues) { return json_input::describe(issues, "(recipe)"); }

// A window of diffusion time in `window` ({"from_t", "to_t"}, from noisy to clean) read into from_t and to_t where
// given; a window that runs backwards is an issue at `key` of `parent`.
void read_time_window(ObjectReader& window, ObjectReader& parent, const char* key, double& from_t, double& to_t) {
    if (auto v = window.number("from_t", 0.0, 1.0)) from_t = *v;
    if (auto v = window.number("to_t", 0.0, 1.0)) to_t = *v;
    window.reject_unknown_keys();
    if (to_t > from_t)
        parent.issue(key, "to_t (" + std::to_string(to_t) + ") must not exceed from_t (" + std::to_string(from_t) +
                              "): the window runs from noisy to clean");
}

void parse_sampler(ObjectReader& s, const RecipeLimits& limits, SamplerSpec& out) {
    // The family decides which names are valid; the generator checks that once the model is known.
    if (auto v = s.choice("name", {"ddpm", "ddim", "euler", "analytic", "first_hitting", "confidence"})) out.name = *v;
    if (auto v = s.integer("steps", 1, limits.max_steps)) out.steps = *v;
    if (auto v = s.number("eta", 0.0, 1.0)) out.eta = *v;
    if (auto v = s.choice("x0", {"model", "interpolate", "clamp"})) out.x0 = *v;
    if (auto v = s.number("clamp_below_t", 0.0, 1.0)) out.clamp_below_t = *v;
    if (auto v = s.number("noise_scale", 0.0, 2.0)) out.noise_scale = *v;
    if (auto v = s.boolean("cache")) out.cache = *v;
    if (auto v = s.number("temperature", 0.01, 100.0)) out.temperature = *v;
    if (auto v = s.integer("top_k", 0, int64_t{1} << 31)) out.top_k = *v;
    if (auto v = s.number("top_p", 0.0, 1.0)) out.top_p = *v;
    if (auto v = s.choice("order", {"probability", "margin", "entropy"})) out.order = *v;
    if (auto v = s.integer("block_length", 1, int64_t{1} << 31)) out.block_length = *v;
    if (auto v = s.number("prompt_guidance", 0.0, 100.0)) out.prompt_guidance = *v;
    if (auto remask = s.object("remask")) {
        ObjectReader r(*remask, s.pointer("remask"), s.issues());
        if (auto v = r.choice("strategy", {"none", "cap", "rescale"}, kRequired)) out.remask.strategy = *v;
        if (auto v = r.number("eta", 0.0, 1.0)) out.remask.eta = *v;
        read_time_window(r, s, "remask", out.remask.from_t, out.remask.to_t);
        if (out.name != "analytic")
            s.issue("remask", "'remask' applies to the analytic sampler only" +
                                  (out.name.empty() ? std::string(" (name it)") : ", not '" + out.name + "'"));
    }
    s.reject_unknown_keys();
    if (s.has("top_p") && out.top_p <= 0.0) s.issue("top_p", "'top_p' must be above 0 (1 keeps every token)");
    const bool discrete_name = out.name == "euler" || out.name == "analytic" || out.name == "first_hitting" ||
                               out.name == "confidence";
    for (const char* key : {"top_k", "top_p", "prompt_guidance"})
        if (s.has(key) && !out.name.empty() && !discrete_name)
            s.issue(key, std::string("'") + key + "' applies to the discrete samplers only, not '" + out.name + "'");
    if (s.has("order") && out.name != "confidence")
        s.issue("order", "'order' applies to the confidence sampler only" +
                             (out.name.empty() ? std::string(" (name it)") : ", not '" + out.name + "'"));
    if (s.has("block_length") && out.name != "confidence" && out.name != "first_hitting")
        s.issue("block_length", "'block_length' applies to the confidence and first_hitting samplers only" +
                                    (out.name.empty() ? std::string(" (name it)") : ", not '" + out.name + "'"));
    if (s.has("eta") && out.name != "ddim" && !out.name.empty())
        s.issue("eta", "'eta' applies to the ddim sampler only, not '" + out.name + "'");
    if (s.has("noise_scale") && discrete_name)
        s.issue("noise_scale", "'noise_scale' applies to the continuous samplers (ddpm, ddim) only, not '" + out.name + "'");
    if (s.has("steps") && out.name == "first_hitting")
        s.issue("steps", "'steps' does not apply to the first_hitting sampler: it takes one step per position "
                         "(max_length), each unmasking one position per sample");
}

void parse_guidance(ObjectReader& g, GuidanceSpec& out) {
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

ControllerSpec parse_controller(ObjectReader& item) {
    ControllerSpec spec;
    spec.pointer = item.pointer();
    if (auto v = item.text("plugin", kRequired)) spec.plugin = *v;
    if (auto v = item.text("sha256")) {
        std::string digest = *v;
        for (char& ch : digest) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (digest.size() == 64 && digest.find_first_not_of("0123456789abcdef") == std::string::npos)
            spec.sha256 = digest;
        else
            item.issue("sha256", "expected the library file's SHA-256 as 64 hex digits (as `rudder plugins` or "
                                 "`sha256sum` prints it), got '" + *v + "'");
    }
    if (auto v = item.text("name")) spec.name = *v;
    if (auto v = item.number("weight", -1e6, 1e6)) spec.weight = *v;
    if (auto v = item.number("time_limit", 0.0, 86400.0)) spec.time_limit = *v;
    if (auto v = item.choice("isolation", {"in_process", "process"})) spec.isolation = *v;
    if (auto v = item.choice("on_failure", {"fail", "continue"})) spec.on_failure = *v;
    if (auto active = item.object("active")) {
        ObjectReader a(*active, item.pointer("active"), item.issues());
        read_time_window(a, item, "active", spec.active.from_t, spec.active.to_t);
    }
    if (auto v = item.boolean("evaluate_only")) spec.active.never = *v;
    if (auto v = item.object("params")) spec.params = std::move(*v);
    item.reject_unknown_keys();
    return spec;
}

void parse_controllers(ObjectReader& doc, const RecipeLimits& limits, std::vector<ControllerSpec>& out) {
    const auto list = doc.array("controllers");
    if (!list) return;
    if (static_cast<int64_t>(list->size()) > limits.max_controllers) {
        doc.issue("controllers", std::to_string(list->size()) + " controllers, over the limit of " +
                                     std::to_string(limits.max_controllers));
        return;
    }
    for (size_t i = 0; i < list->size(); ++i) {
        ObjectReader item((*list)[i], "/controllers/" + std::to_string(i), doc.issues());
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

RecipeError::RecipeError(std::vector<RecipeIssue> issues)
    : std::runtime_error(join_issues(issues)), issues_(std::move(issues)) {}

Recipe parse_recipe(const std::string& text, const std::filesystem::path& base_dir, const RecipeLimits& limits,
                    std::vector<RecipeIssue>* issues) {
    json doc;
    try {
        doc = json_input::parse(text);
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
        throw RecipeError({{"", "not valid JSON at line " + std::to_string(line) + ", column " +
                                    std::to_string(col) + ": " + what}});
    } catch (const json::exception& e) {
        // Well-formed text the parser still refuses, e.g. a number beyond double's range ("1e999").
        throw RecipeError({{"", std::string("not valid JSON: ") + e.what()}});
    }
    return parse_recipe_document(doc, base_dir, limits, issues);
}

Recipe parse_recipe_document(const json& doc, const std::filesystem::path& base_dir, const RecipeLimits& limits,
                             std::vector<RecipeIssue>* issues) {
    std::vector<RecipeIssue> found;
    Recipe r;
    r.base_dir = base_dir;
    if (!doc.is_object()) throw RecipeError({{"", "a recipe is a JSON object, got " + json_input::shown(doc)}});
    ObjectReader root(doc, "", found);
    if (auto v = root.text("model", kRequired)) r.model = *v;
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
    if (auto v = root.text("device")) {
        const std::string& d = *v;
        const bool ok = d == "cpu" || d == "cuda" ||
                        (d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
                         d.find_first_not_of("0123456789", 5) == std::string::npos && d.size() < 9);
        if (ok) r.device = d;
        else root.issue("device", "expected 'cpu', 'cuda' or 'cuda:<index>', got '" + d + "'");
    }
    if (auto v = root.choice("isolation", {"in_process", "process"})) r.isolation = *v;
    if (auto v = root.integer("candidates", 1, 4096)) r.candidates = *v;
    if (auto sampler = root.object("sampler")) {
        ObjectReader s(*sampler, "/sampler", found);
        parse_sampler(s, limits, r.sampler);
        r.sampler_given = std::move(*sampler);
    }
    if (!r.sampler_given.contains("steps") && r.sampler.steps > limits.max_steps)
        found.push_back({"/sampler/steps", "the default of " + std::to_string(r.sampler.steps) +
                                               " steps is over the limit of " + std::to_string(limits.max_steps) +
                                               "; give sampler.steps"});
    if (auto guidance = root.object("guidance")) {
        ObjectReader g(*guidance, "/guidance", found);
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
    std::ifstream in(path, std::ios::binary);
    if (!in) throw RecipeError({{"", "cannot read recipe file '" + path.string() + "'"}});
    std::ostringstream text;
    text << in.rdbuf();
    std::filesystem::path dir = path.parent_path();
    if (dir.empty()) dir = ".";
    return parse_recipe(text.str(), dir, limits, issues);
}

void parse_sampler_settings(const json& sampler, const std::string& pointer, SamplerSpec& out,
                            std::vector<RecipeIssue>& issues, const RecipeLimits& limits) {
    ObjectReader s(sampler, pointer, issues);
    if (s.is_object()) parse_sampler(s, limits, out);
}

}  // namespace rudder
