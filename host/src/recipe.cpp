#include "recipe.hpp"

#include <rudder/plugins/suggest.hpp>

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

std::string join_issues(const std::vector<RecipeIssue>& issues) {
    std::ostringstream out;
    for (size_t i = 0; i < issues.size(); ++i) {
        if (i > 0) out << "\n";
        out << (issues[i].pointer.empty() ? "(recipe)" : issues[i].pointer) << ": " << issues[i].message;
    }
    return out.str();
}

std::string type_name(const json& v) {
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_null()) return "null";
    if (v.is_array()) return "an array";
    return "an object";
}

std::string escape_pointer_token(const std::string& key) {
    std::string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

// Collects issues while walking the document; every check names the JSON pointer of the value it looks at.
class Checker {
public:
    explicit Checker(const RecipeLimits& limits) : limits_(limits) {}

    void issue(const std::string& pointer, const std::string& message) { issues_.push_back({pointer, message}); }
    const std::vector<RecipeIssue>& issues() const { return issues_; }
    const RecipeLimits& limits() const { return limits_; }

    // Reports keys of `obj` that are not in `allowed`, with a suggestion.
    void only_keys(const json& obj, const std::string& pointer, const std::vector<std::string>& allowed) {
        for (auto it = obj.begin(); it != obj.end(); ++it) {
            if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
            std::string msg = "unknown key '" + it.key() + "'";
            const std::string guess = plugins::closest_match(it.key(), allowed);
            if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
            else msg += " (allowed: " + list(allowed) + ")";
            issue(pointer + "/" + escape_pointer_token(it.key()), msg);
        }
    }

    bool object(const json& v, const std::string& pointer) {
        if (v.is_object()) return true;
        issue(pointer, "expected an object, got " + type_name(v));
        return false;
    }

    std::optional<std::string> string(const json& obj, const std::string& key, const std::string& pointer,
                                      bool required) {
        if (!obj.contains(key)) {
            if (required) issue(pointer + "/" + key, "required string is missing");
            return std::nullopt;
        }
        const json& v = obj.at(key);
        if (!v.is_string()) {
            issue(pointer + "/" + key, "expected a string, got " + type_name(v));
            return std::nullopt;
        }
        if (v.get<std::string>().empty()) {
            issue(pointer + "/" + key, "must not be empty");
            return std::nullopt;
        }
        return v.get<std::string>();
    }

    std::optional<std::string> choice(const json& obj, const std::string& key, const std::string& pointer,
                                      const std::vector<std::string>& options) {
        auto s = string(obj, key, pointer, false);
        if (!s) return std::nullopt;
        if (std::find(options.begin(), options.end(), *s) != options.end()) return s;
        std::string msg = "'" + *s + "' is not one of " + list(options);
        const std::string guess = plugins::closest_match(*s, options);
        if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
        issue(pointer + "/" + key, msg);
        return std::nullopt;
    }

    // An integer in [lo, hi], if present.
    std::optional<int64_t> integer(const json& obj, const std::string& key, const std::string& pointer, int64_t lo,
                                   int64_t hi) {
        if (!obj.contains(key)) return std::nullopt;
        const json& v = obj.at(key);
        const std::string where = pointer + "/" + key;
        if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                                        std::fabs(v.get<double>()) < 9e15)) {
            issue(where, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                             type_name(v));
            return std::nullopt;
        }
        const double d = v.get<double>();
        if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
            issue(where, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                             v.dump());
            return std::nullopt;
        }
        return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
    }

    // A finite number in [lo, hi], if present.
    std::optional<double> number(const json& obj, const std::string& key, const std::string& pointer, double lo,
                                 double hi) {
        if (!obj.contains(key)) return std::nullopt;
        const json& v = obj.at(key);
        const std::string where = pointer + "/" + key;
        const std::string range = "[" + format(lo) + ", " + format(hi) + "]";
        if (!v.is_number()) {
            issue(where, "expected a number in " + range + ", got " + type_name(v));
            return std::nullopt;
        }
        const double d = v.get<double>();
        if (!std::isfinite(d) || d < lo || d > hi) {
            issue(where, "expected a number in " + range + ", got " + v.dump());
            return std::nullopt;
        }
        return d;
    }

    std::optional<bool> boolean(const json& obj, const std::string& key, const std::string& pointer) {
        if (!obj.contains(key)) return std::nullopt;
        const json& v = obj.at(key);
        if (!v.is_boolean()) {
            issue(pointer + "/" + key, "expected true or false, got " + type_name(v));
            return std::nullopt;
        }
        return v.get<bool>();
    }

    static std::string list(const std::vector<std::string>& options) {
        std::string out;
        for (size_t i = 0; i < options.size(); ++i) out += (i ? ", '" : "'") + options[i] + "'";
        return out;
    }

private:
    static std::string format(double d) {
        if (d == std::numeric_limits<double>::max()) return "inf";
        std::ostringstream out;
        out << d;
        return out.str();
    }
    RecipeLimits limits_;
    std::vector<RecipeIssue> issues_;
};

void parse_sampler(Checker& c, const json& s, const std::string& p, SamplerSpec& out) {
    if (!c.object(s, p)) return;
    c.only_keys(s, p, {"name", "steps", "eta", "x0", "clamp_below_t", "noise_scale", "cache", "temperature"});
    // The family decides which names are valid; the generator checks that once the model is known.
    if (auto v = c.choice(s, "name", p, {"ddpm", "ddim", "euler", "analytic"})) out.name = *v;
    if (auto v = c.integer(s, "steps", p, 1, c.limits().max_steps)) out.steps = *v;
    if (auto v = c.number(s, "eta", p, 0.0, 1.0)) out.eta = *v;
    if (auto v = c.choice(s, "x0", p, {"model", "interpolate", "clamp"})) out.x0 = *v;
    if (auto v = c.number(s, "clamp_below_t", p, 0.0, 1.0)) out.clamp_below_t = *v;
    if (auto v = c.number(s, "noise_scale", p, 0.0, 2.0)) out.noise_scale = *v;
    if (auto v = c.boolean(s, "cache", p)) out.cache = *v;
    if (auto v = c.number(s, "temperature", p, 0.01, 100.0)) out.temperature = *v;
    if (s.contains("eta") && out.name != "ddim" && !out.name.empty())
        c.issue(p + "/eta", "'eta' applies to the ddim sampler only, not '" + out.name + "'");
    if (s.contains("noise_scale") && (out.name == "euler" || out.name == "analytic"))
        c.issue(p + "/noise_scale", "'noise_scale' applies to the continuous samplers (ddpm, ddim) only, not '" +
                                        out.name + "'");
}

void parse_guidance(Checker& c, const json& doc, GuidanceSpec& out) {
    if (!doc.contains("guidance")) return;
    const json& g = doc.at("guidance");
    const std::string p = "/guidance";
    if (!c.object(g, p)) return;
    c.only_keys(g, p, {"gradient_steps", "step_size", "fluency_weight", "until_t"});
    if (auto v = c.integer(g, "gradient_steps", p, 0, 1000)) out.gradient_steps = *v;
    if (auto v = c.number(g, "step_size", p, 0.0, 1e6)) out.step_size = *v;
    if (auto v = c.number(g, "fluency_weight", p, 0.0, 1e6)) out.fluency_weight = *v;
    if (auto v = c.number(g, "until_t", p, 0.0, 1.0)) out.until_t = *v;
}

void parse_controllers(Checker& c, const json& doc, std::vector<ControllerSpec>& out) {
    if (!doc.contains("controllers")) return;
    const json& list = doc.at("controllers");
    if (!list.is_array()) {
        c.issue("/controllers", "expected an array of controller objects, got " + type_name(list));
        return;
    }
    std::map<std::string, int> label_count;
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string p = "/controllers/" + std::to_string(i);
        const json& item = list[i];
        if (!c.object(item, p)) continue;
        c.only_keys(item, p, {"plugin", "sha256", "name", "weight", "active", "evaluate_only", "time_limit", "params"});
        ControllerSpec spec;
        spec.pointer = p;
        if (auto v = c.string(item, "plugin", p, true)) spec.plugin = *v;
        if (auto v = c.string(item, "sha256", p, false)) {
            std::string digest = *v;
            for (char& ch : digest) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            if (digest.size() == 64 && digest.find_first_not_of("0123456789abcdef") == std::string::npos)
                spec.sha256 = digest;
            else
                c.issue(p + "/sha256", "expected the library file's SHA-256 as 64 hex digits (as `rudder plugins` or "
                                       "`sha256sum` prints it), got '" + *v + "'");
        }
        if (auto v = c.string(item, "name", p, false)) spec.name = *v;
        if (auto v = c.number(item, "weight", p, -1e6, 1e6)) spec.weight = *v;
        if (auto v = c.number(item, "time_limit", p, 0.0, 86400.0)) spec.time_limit = *v;
        if (item.contains("active")) {
            const json& a = item.at("active");
            const std::string ap = p + "/active";
            if (c.object(a, ap)) {
                c.only_keys(a, ap, {"from_t", "to_t"});
                if (auto v = c.number(a, "from_t", ap, 0.0, 1.0)) spec.active.from_t = *v;
                if (auto v = c.number(a, "to_t", ap, 0.0, 1.0)) spec.active.to_t = *v;
                if (spec.active.to_t > spec.active.from_t)
                    c.issue(ap, "to_t (" + std::to_string(spec.active.to_t) + ") must not exceed from_t (" +
                                    std::to_string(spec.active.from_t) + "): the window runs from noisy to clean");
            }
        }
        if (auto v = c.boolean(item, "evaluate_only", p)) spec.active.never = *v;
        if (item.contains("params")) {
            if (c.object(item.at("params"), p + "/params")) spec.params = item.at("params");
        }
        out.push_back(std::move(spec));
    }
    // Labels must be unique: explicit names are checked, default ones (the plugin value) get a suffix.
    std::set<std::string> explicit_names;
    for (const auto& spec : out) {
        if (spec.name.empty()) continue;
        if (!explicit_names.insert(spec.name).second)
            c.issue(spec.pointer + "/name", "name '" + spec.name + "' is used by another controller");
    }
    for (auto& spec : out) {
        if (!spec.name.empty() || spec.plugin.empty()) continue;
        std::string base = std::filesystem::path(spec.plugin).stem().string();
        if (base.rfind("rudder_", 0) == 0) base = base.substr(7);
        std::string label = base;
        for (int n = 2; explicit_names.count(label) > 0; ++n) label = base + "_" + std::to_string(n);
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
        doc = json::parse(text);
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
    Checker c(limits);
    Recipe r;
    r.base_dir = base_dir;
    if (!doc.is_object()) {
        c.issue("", "a recipe is a JSON object, got " + type_name(doc));
        throw RecipeError(c.issues());
    }
    c.only_keys(doc, "", {"model", "family", "sampler", "seed", "samples", "batch_size", "max_length", "device",
                          "guidance", "controllers"});
    if (auto v = c.string(doc, "model", "", true)) r.model = *v;
    if (auto v = c.choice(doc, "family", "", {"continuous", "discrete"})) r.family = *v;
    if (doc.contains("seed")) {
        if (auto v = c.integer(doc, "seed", "", 0, std::numeric_limits<int64_t>::max()))
            r.seed = static_cast<uint64_t>(*v);
    }
    if (auto v = c.integer(doc, "samples", "", 1, limits.max_samples)) r.samples = *v;
    // A default over a configured limit: batch_size only groups samples, so the limit itself is used; the sampler's
    // steps change the result, so a recipe that leaves them out must give them (below, after the sampler).
    r.batch_size = std::min(r.batch_size, limits.max_batch_size);
    if (auto v = c.integer(doc, "batch_size", "", 1, limits.max_batch_size)) r.batch_size = *v;
    if (auto v = c.integer(doc, "max_length", "", 1, limits.max_length)) r.max_length = *v;
    r.max_length_limit = limits.max_length;
    if (auto v = c.string(doc, "device", "", false)) {
        const std::string& d = *v;
        const bool ok = d == "cpu" || d == "cuda" ||
                        (d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
                         d.find_first_not_of("0123456789", 5) == std::string::npos && d.size() < 9);
        if (ok) r.device = d;
        else c.issue("/device", "expected 'cpu', 'cuda' or 'cuda:<index>', got '" + d + "'");
    }
    if (doc.contains("sampler")) {
        parse_sampler(c, doc.at("sampler"), "/sampler", r.sampler);
        if (doc.at("sampler").is_object()) r.sampler_given = doc.at("sampler");
    }
    const bool steps_given = r.sampler_given.contains("steps");
    if (!steps_given && r.sampler.steps > limits.max_steps)
        c.issue("/sampler/steps", "the default of " + std::to_string(r.sampler.steps) + " steps is over the limit of " +
                                      std::to_string(limits.max_steps) + "; give sampler.steps");
    parse_guidance(c, doc, r.guidance);
    parse_controllers(c, doc, r.controllers);
    if (issues != nullptr) {
        issues->insert(issues->end(), c.issues().begin(), c.issues().end());
    } else if (!c.issues().empty()) {
        throw RecipeError(c.issues());
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
    Checker c(limits);
    parse_sampler(c, sampler, pointer, out);
    issues.insert(issues.end(), c.issues().begin(), c.issues().end());
}

}  // namespace rudder
