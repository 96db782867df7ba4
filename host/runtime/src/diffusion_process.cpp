#include "diffusion_process.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace rudder {
namespace {

using json = nlohmann::json;

// Every process, in the order a model is matched against them (the first that runs it).
const std::vector<ProcessRoom>& rooms() {
    static const std::vector<ProcessRoom> all = {continuous_room(), uniform_room(), absorbing_room()};
    return all;
}

bool offers(const ProcessRoom& room, const std::string& sampler) {
    return std::find(room.samplers.begin(), room.samplers.end(), sampler) != room.samplers.end();
}

const SamplerKey* key_of(const ProcessRoom& room, const std::string& key) {
    for (const auto& k : room.keys)
        if (k.key == key) return &k;
    return nullptr;
}

bool applies_to(const SamplerKey& key, const std::string& sampler) {
    return !key.refused &&
           (key.samplers.empty() || std::find(key.samplers.begin(), key.samplers.end(), sampler) != key.samplers.end());
}

// "'a', 'b' or 'c'".
std::string alternatives(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size(); ++i)
        out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("'" + names[i] + "'");
    return out;
}

// The models of the rooms that offer a sampler (or read a key), as a message names them: by their family when they
// are all of its rooms.
std::string models_of(const std::function<bool(const ProcessRoom&)>& which) {
    std::string out;
    std::set<Family> families;
    size_t chosen = 0;
    for (const auto& room : rooms())
        if (which(room)) {
            out += (out.empty() ? "" : " and ") + room.models;
            families.insert(room.family);
            ++chosen;
        }
    if (families.size() != 1) return out;
    const Family family = *families.begin();
    const auto of_family =
        std::count_if(rooms().begin(), rooms().end(), [&](const ProcessRoom& r) { return r.family == family; });
    return static_cast<size_t>(of_family) == chosen && chosen > 1 ? std::string(family_name(family)) + " models" : out;
}

// Each key of `s` that does not apply to the sampler `name` ("": none named yet) of the rooms that offer it, reported
// once, in the words of the room that declares the key. Keys no room declares are left to reject_unknown_keys().
void check_keys(json_input::ObjectReader& s, const std::string& name) {
    for (auto it = s.value().begin(); it != s.value().end(); ++it) {
        const std::string& key = it.key();
        const SamplerKey* first = nullptr;    // the first room's declaration of the key
        const SamplerKey* nearest = nullptr;  // a declaration by a room offering the sampler
        bool applies = false;
        for (const auto& room : rooms()) {
            const SamplerKey* k = key_of(room, key);
            if (k == nullptr || k->refused) continue;
            if (first == nullptr) first = k;
            if (!name.empty() && offers(room, name)) {
                if (nearest == nullptr) nearest = k;
                applies = applies || applies_to(*k, name);
            }
        }
        if (first == nullptr) continue;
        s.any(key);  // known: not "unknown key" as well
        if (name.empty()) {
            if (first->needs_name) s.issue(key, "'" + key + "' applies to " + first->phrase + " only (name it)");
            continue;
        }
        if (applies) continue;
        const SamplerKey& said = nearest != nullptr ? *nearest : *first;
        s.issue(key, !said.refusal.empty() ? said.refusal
                                           : "'" + key + "' applies to " + said.phrase + " only, not '" + name + "'");
    }
}

// The sampler object checked as far as it can be without a model.
void read_sampler_object(json_input::ObjectReader& s, const RecipeLimits& limits) {
    std::vector<std::string> names;
    for (const auto& room : rooms())
        for (const auto& sampler : room.samplers)
            if (std::find(names.begin(), names.end(), sampler) == names.end()) names.push_back(sampler);
    const std::string name = s.choice("name", names).value_or("");
    check_keys(s, name);
    // The values, read by each room that offers the sampler (by every room while none is named); a key that several
    // read alike is reported once. While none is named, a value is a problem only where every room that reads the
    // key finds one (temperature 0 is the discrete samplers' arg-max, below the continuous range): the model's room
    // reads the sampler again once the model is known.
    const size_t before = s.issues().size();
    std::map<std::string, size_t> rooms_reading, rooms_refusing;  // by pointer, while none is named
    for (const auto& room : rooms()) {
        if (!name.empty() && !offers(room, name)) continue;
        const size_t own = s.issues().size();
        SamplerObject object{s, name, limits, &room.keys};
        room.read(object);
        if (!name.empty()) continue;
        for (auto it = s.value().begin(); it != s.value().end(); ++it)
            if (const SamplerKey* k = key_of(room, it.key()); k != nullptr && !k->refused)
                ++rooms_reading[s.pointer(it.key())];
        std::set<std::string> refused_here;
        for (size_t i = own; i < s.issues().size(); ++i) refused_here.insert(s.issues()[i].pointer);
        for (const auto& pointer : refused_here) ++rooms_refusing[pointer];
    }
    auto& issues = s.issues();
    if (name.empty()) {
        // One problem per value, the last room's (the discrete rooms read the widest ranges).
        std::map<std::string, size_t> last;
        for (size_t i = before; i < issues.size(); ++i) last[issues[i].pointer] = i;
        std::vector<RecipeIssue> kept(issues.begin(), issues.begin() + static_cast<std::ptrdiff_t>(before));
        for (size_t i = before; i < issues.size(); ++i) {
            const auto reading = rooms_reading.find(issues[i].pointer);
            const bool some_room_takes_it =
                reading != rooms_reading.end() && rooms_refusing[issues[i].pointer] < reading->second;
            if (last[issues[i].pointer] == i && !some_room_takes_it) kept.push_back(issues[i]);
        }
        issues = std::move(kept);
    }
    std::set<std::pair<std::string, std::string>> seen;
    issues.erase(std::remove_if(issues.begin() + static_cast<std::ptrdiff_t>(before), issues.end(),
                                [&](const RecipeIssue& i) {
                                    return !seen.insert({i.pointer, i.message}).second;
                                }),
                 issues.end());
    s.reject_unknown_keys();
}

// The keys of `sampler` that the model's room does not read: another process's, or ones it refuses.
void check_keys_against(const ProcessRoom& room, const Model& model, const json& sampler,
                        std::vector<RecipeIssue>& issues, const std::function<bool(const std::string&)>& reported) {
    for (auto it = sampler.begin(); it != sampler.end(); ++it) {
        const std::string& key = it.key();
        const std::string pointer = "/sampler/" + json_input::pointer_token(key);
        const SamplerKey* own = key_of(room, key);
        if (key == "name" || reported(pointer) || (own != nullptr && !own->refused)) continue;
        if (own != nullptr) {
            issues.push_back({pointer, "model '" + model.name + "' " + room.model_is + ": " + own->refusal});
            continue;
        }
        const std::string models = models_of([&](const ProcessRoom& r) {
            const SamplerKey* k = key_of(r, key);
            return k != nullptr && !k->refused;
        });
        if (!models.empty())
            issues.push_back(
                {pointer, "'" + key + "' applies to " + models + "; model '" + model.name + "' " + room.model_is});
    }
}

}  // namespace

bool SamplerObject::applies(const std::string& key) const {
    for (const auto& k : *keys)
        if (k.key == key) return !k.refused && (name.empty() ? !k.needs_name : applies_to(k, name));
    return false;
}

void read_steps(SamplerObject& o, int64_t& steps) {
    if (o.applies("steps"))
        if (auto v = o.reader.integer("steps", 1, o.limits.max_steps)) steps = *v;
}

void read_temperature(SamplerObject& o, double& temperature, bool zero_is_arg_max) {
    // 0.01 is the least temperature every sampler computes: the scores divided by it stay finite in float32 (a
    // temperature of 1e-38 made them infinite, and the run failed with a message blaming the controllers). A
    // sampler that takes the arg-max at 0 takes 0 itself.
    constexpr double kLeast = 0.01;
    if (!o.applies("temperature")) return;
    const std::optional<double> v = o.reader.number("temperature", zero_is_arg_max ? 0.0 : kLeast, 100.0);
    if (v && *v > 0 && *v < kLeast)
        o.reader.issue("temperature", "expected 0 (the most probable token) or a number in [0.01, 100], got " +
                                          nlohmann::json(*v).dump());
    else if (v)
        temperature = *v;
}

void read_truncation(SamplerObject& o, int64_t& top_k, double& top_p) {
    if (o.applies("top_k"))
        if (auto v = o.reader.integer("top_k", 0, int64_t{1} << 31)) top_k = *v;
    if (o.applies("top_p"))
        if (auto v = o.reader.number("top_p", 0.0, 1.0)) top_p = *v;
    if (o.reader.has("top_p") && top_p <= 0.0) o.reader.issue("top_p", "'top_p' must be above 0 (1 keeps every token)");
}

// Declared in recipe.hpp: the recipe reads its sampler object through the rooms.
void check_sampler_settings(const json& sampler, const std::string& pointer, std::vector<RecipeIssue>& issues,
                            const RecipeLimits& limits) {
    json_input::ObjectReader s(sampler, pointer, issues);
    if (s.is_object()) read_sampler_object(s, limits);
}

bool is_sampler_of(const std::string& sampler_name, Family family) {
    for (const auto& room : rooms())
        if (room.family == family && offers(room, sampler_name)) return true;
    return false;
}

std::unique_ptr<DiffusionProcess> make_process(const Model& model, const Recipe& recipe,
                                               std::vector<RecipeIssue>& issues,
                                               const std::function<bool(const std::string&)>& reported) {
    const auto room = std::find_if(rooms().begin(), rooms().end(), [&](const ProcessRoom& r) { return r.runs(model); });
    if (room == rooms().end()) throw std::logic_error("no diffusion process runs model '" + model.name + "'");
    if (reported("/sampler") || reported("/sampler/name")) return nullptr;
    const size_t before = issues.size();
    json sampler = recipe.sampler.settings;
    if (!sampler.contains("name") && !model.recommended_sampler.empty()) {
        // The recipe leaves the sampler to the model: its recommendation, with the recipe's own keys over it.
        sampler = model.recommended_sampler;
        sampler.update(recipe.sampler.settings);
        std::vector<RecipeIssue> problems;
        check_sampler_settings(sampler, "/sampler", problems, RecipeLimits{});
        for (const auto& p : problems)
            if (!reported(p.pointer))  // the recipe's own keys were checked already; say each problem once
                issues.push_back({p.pointer, p.message + " (the recipe names no sampler, so it takes model '" +
                                                 model.name + "''s recommended " + model.recommended_sampler.dump() +
                                                 ")"});
    }
    if (!sampler.contains("name")) sampler["name"] = room->default_sampler;
    const std::string name = sampler["name"].get<std::string>();
    if (!offers(*room, name)) {
        const bool same_family = is_sampler_of(name, room->family);
        issues.push_back({"/sampler/name", same_family && !room->other_samplers_refusal.empty()
                                               ? "model '" + model.name + "' " + room->model_is + "; sampler '" + name +
                                                     "' " + room->other_samplers_refusal + ": use " +
                                                     alternatives(room->samplers)
                                               : "sampler '" + name + "' is for " +
                                                     models_of([&](const ProcessRoom& r) { return offers(r, name); }) +
                                                     "; model '" + model.name + "' " + room->model_is + " (use " +
                                                     alternatives(room->samplers) + ")"});
        return nullptr;
    }
    check_keys_against(*room, model, sampler, issues, reported);
    if (issues.size() > before) return nullptr;
    std::vector<RecipeIssue> read_again;  // the values were checked when the recipe was read
    json_input::ObjectReader reader(sampler, "/sampler", read_again);
    RecipeLimits limits;
    limits.max_steps = recipe.max_steps_limit;
    SamplerObject object{reader, name, limits, &room->keys};
    std::vector<RecipeIssue> checks;
    auto process = room->make(model, recipe, object, checks);
    for (auto& issue : checks)
        if (!reported(issue.pointer)) issues.push_back(std::move(issue));
    return issues.size() > before ? nullptr : std::move(process);
}

}  // namespace rudder
