#include <rudder/runtime/model.hpp>

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <rudder/base/paths.hpp>
#include <rudder/rudder_json.hpp>

#include <rudder/runtime/recipe.hpp>

#include "model_formats.hpp"
#include "transformer_denoiser.hpp"

namespace rudder {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Reads a model's sentences file: one sentence per line, tokenized with the model's tokenizer.
std::vector<std::vector<int64_t>> read_sentences(const fs::path& file, const Tokenizer& tokenizer) {
    std::ifstream in(file);
    if (!in) throw ModelError("cannot read corpus file '" + file.string() + "'");
    std::vector<std::vector<int64_t>> out;
    std::string line;
    while (std::getline(in, line)) {
        auto ids = tokenizer.encode(line);
        if (!ids.empty()) out.push_back(std::move(ids));
    }
    if (out.empty()) throw ModelError("corpus file '" + file.string() + "' holds no sentence");
    return out;
}

template <class T>
T get(const json& obj, const std::string& key, const fs::path& file) {
    if (!obj.contains(key)) throw ModelError("'" + file.string() + "': missing key '" + key + "'");
    try {
        return obj.at(key).get<T>();
    } catch (const json::exception&) {
        throw ModelError("'" + file.string() + "': key '" + key + "' has the wrong type (" + obj.at(key).dump() + ")");
    }
}

Family parse_family(const std::string& name, const fs::path& file) {
    if (name == "continuous") return Family::continuous;
    if (name == "discrete") return Family::discrete;
    throw ModelError("'" + file.string() + "': unknown family '" + name + "' (continuous or discrete)");
}

// config.json's "sampler": {"<family>": {sampler settings}}, checked as a recipe's sampler is; it names a sampler of
// that family (it is a whole recommendation) and leaves out "steps" (how many to spend is the recipe's choice).
// config.json's "schedule": {"name", "T"}, and for "cdcd" sigma_min, sigma_max and the time warp ("warp": its
// CDF; "warp_bins" uniform bins when there is none).
GaussianSchedule schedule_of(const json& s) {
    if (!s.is_object()) throw std::invalid_argument("'schedule' must be an object");
    const std::string name = s.value("name", "sqrt");
    const int64_t T = s.value("T", int64_t{2000});
    if (name != "cdcd") return GaussianSchedule::make(name, T);
    return GaussianSchedule::make_cdcd(s.value("sigma_min", 1.0), s.value("sigma_max", 300.0),
                                       s.value("warp", std::vector<double>{}), s.value("warp_bins", int64_t{100}), T);
}

json recommended_sampler(const json& config, Family family, const fs::path& file) {
    if (!config.contains("sampler")) return json::object();
    const json& by_family = config.at("sampler");
    auto fail = [&](const std::string& pointer, const std::string& message) {
        return ModelError("'" + file.string() + "': " + pointer + ": " + message);
    };
    if (!by_family.is_object()) throw fail("/sampler", "expected an object keyed by family (continuous, discrete)");
    for (auto it = by_family.begin(); it != by_family.end(); ++it) {
        if (it.key() != "continuous" && it.key() != "discrete")
            throw fail("/sampler/" + it.key(), "unknown family (the keys are continuous and discrete)");
    }
    const std::string name = family_name(family);
    if (!by_family.contains(name)) return json::object();
    const json& settings = by_family.at(name);
    const std::string pointer = "/sampler/" + name;
    std::vector<RecipeIssue> issues;
    check_sampler_settings(settings, pointer, issues);
    if (!issues.empty()) throw fail(issues.front().pointer, issues.front().message);
    if (settings.contains("steps")) throw fail(pointer + "/steps", "the number of steps is the recipe's to choose");
    const std::string sampler = settings.value("name", std::string());
    if (!is_sampler_of(sampler, family))
        throw fail(pointer + "/name", sampler.empty() ? "required: a recommendation names its sampler"
                                                      : "'" + sampler + "' is not a " + name + " sampler");
    return settings;
}

}  // namespace

std::vector<fs::path> default_model_path() {
    std::vector<fs::path> out = split_path_list(std::getenv("RUDDER_MODEL_PATH"));
    const fs::path bundled = bundled_model_dir();
    std::error_code ec;
    if (fs::is_directory(bundled, ec))
        out.push_back(fs::weakly_canonical(bundled, ec));
    else
        spdlog::debug("no bundled models: {} is not a folder", bundled.string());
    return out;
}

std::vector<std::string> list_models(const std::vector<fs::path>& search_path) {
    std::vector<std::string> names;
    for (const auto& dir : search_path) {
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            if (fs::exists(entry.path() / "config.json", ec)) names.push_back(entry.path().filename().string());
        }
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

fs::path resolve_model(const std::string& name_or_path, const fs::path& base_dir,
                       const std::vector<fs::path>& search_path) {
    if (name_or_path.size() > json_input::kMaxNameBytes)
        throw ModelError("a model name or path of " + std::to_string(name_or_path.size()) +
                         " bytes is over the limit of " + std::to_string(json_input::kMaxNameBytes));
    std::error_code ec;
    const fs::path as_path = fs::path(name_or_path).is_absolute() ? fs::path(name_or_path) : base_dir / name_or_path;
    const bool looks_like_path = name_or_path.find('/') != std::string::npos;
    if (looks_like_path || fs::is_directory(as_path, ec)) {
        if (!fs::is_directory(as_path, ec))
            throw ModelError("model directory '" + as_path.string() + "' does not exist");
        return as_path;
    }
    for (const auto& dir : search_path) {
        if (fs::is_directory(dir / name_or_path, ec)) return dir / name_or_path;
    }
    const auto names = list_models(search_path);
    std::string msg = "no model named '" + name_or_path + "'";
    const std::string guess = json_input::closest_match(name_or_path, names);
    if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
    msg += names.empty() ? " (no bundled models found" : " (bundled: ";
    for (size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
    msg += ")";
    throw ModelError(msg);
}

void write_corpus_model(const std::vector<std::string>& sentences, const fs::path& dir,
                        const CorpusModelOptions& options) {
    std::vector<std::string> unique;
    std::unordered_set<std::string> seen;
    for (const auto& s : sentences) {
        if (s.find_first_not_of(" \t") == std::string::npos) continue;
        if (seen.insert(s).second) unique.push_back(s);
    }
    if (unique.empty()) throw ModelError("no sentences to build a corpus model from");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw ModelError("cannot create '" + dir.string() + "': " + ec.message());
    WordTokenizer::build(unique).save((dir / "vocab.txt").string());
    std::ofstream out(dir / "sentences.txt");
    for (const auto& s : unique) out << s << "\n";
    const json config = {{"format_version", kModelFormatVersion},
                         {"type", "corpus"},
                         {"families", {"discrete", "continuous"}},
                         {"tokenizer", {{"type", "word"}, {"vocab", "vocab.txt"}}},
                         {"sentences", "sentences.txt"},
                         {"embed_dim", options.embed_dim},
                         {"embed_seed", options.embed_seed},
                         {"schedule", {{"name", options.schedule}, {"T", options.schedule_steps}}},
                         {"mask_schedule", {{"eps", 1e-3}}}};
    std::ofstream cfg(dir / "config.json");
    cfg << config.dump(2) << "\n";
    if (!out || !cfg) throw ModelError("cannot write the model files in '" + dir.string() + "'");
}

Model load_model(const fs::path& dir, std::optional<Family> family) {
    const json config = read_json_file(dir / "config.json");
    return format_of(config).load(dir, config, family);
}

std::shared_ptr<const Tokenizer> load_tokenizer(const fs::path& dir) {
    const json config = read_json_file(dir / "config.json");
    return format_of(config).tokenizer(dir, config);
}

std::shared_ptr<const Tokenizer> load_rudder_tokenizer(const fs::path& dir, const json& own) {
    return load_word_tokenizer(checked_model_config(own, dir / "config.json"), dir);
}

Model load_rudder_model(const fs::path& dir, const json& own, std::optional<Family> family) {
    const fs::path file = dir / "config.json";
    const json config = checked_model_config(own, file);
    Model m;
    m.dir = dir;
    m.name = fs::path(dir).lexically_normal().filename().string();
    if (m.name.empty()) m.name = fs::path(dir).lexically_normal().parent_path().filename().string();

    const auto type = get<std::string>(config, "type", file);
    if (type == "teacher")
        throw ModelError("'" + dir.string() +
                         "' is a teacher language model (used by `rudder score`), not a diffusion model");
    if (type == "attribute_classifier" || type == "syntax_classifier")
        throw ModelError("'" + dir.string() + "' is " +
                         (type == "attribute_classifier"
                              ? "an attribute classifier (the sentiment controller's guide or judge)"
                              : "a noisy syntax classifier (of the pos, syntax_span and syntax_tree controllers)") +
                         ", not a diffusion model: a recipe samples from one of the generators `rudder models` lists");
    if (type == "tagger" || type == "parser")
        throw ModelError("'" + dir.string() + "' is a " +
                         (type == "tagger" ? "part-of-speech tagger" : "constituency parser") +
                         " (used by `rudder annotate` and the syntax controllers), not a diffusion model");
    std::vector<Family> offered;
    for (const auto& f : get<std::vector<std::string>>(config, "families", file))
        offered.push_back(parse_family(f, file));
    if (offered.empty()) throw ModelError("'" + file.string() + "': 'families' is empty");
    if (family && std::find(offered.begin(), offered.end(), *family) == offered.end())
        throw ModelError("model '" + m.name + "' is not a " + family_name(*family) + " model");
    m.family = family.value_or(offered.front());

    const json sched = config.value("schedule", json::object());
    try {
        m.schedule = schedule_of(sched);
        m.mask_schedule = MaskSchedule(config.value("mask_schedule", json::object()).value("eps", 1e-3));
    } catch (const std::exception& e) {
        throw ModelError("'" + file.string() + "': bad schedule: " + e.what());
    }
    m.tokenizer = load_word_tokenizer(config, dir);
    m.recommended_sampler = recommended_sampler(config, m.family, file);

    if (type == "corpus") {
        CorpusDenoiser::Options opt;
        opt.family = m.family;
        opt.vocab_size = m.tokenizer->vocab_size();
        opt.pad_id = m.tokenizer->pad_id();
        opt.mask_id = m.tokenizer->mask_id();
        opt.embed_dim = config.value("embed_dim", int64_t{16});
        opt.embed_seed = config.value("embed_seed", uint64_t{0});
        if (config.contains("uniform_noise")) {
            // The discrete family diffusing with uniform noise instead of masking (SEDD's uniform graph).
            const json& u = config["uniform_noise"];
            try {
                if (!u.is_object()) throw std::invalid_argument("must be an object {\"sigma_min\", \"sigma_max\"}");
                opt.uniform_noise = UniformNoiseSchedule(u.value("sigma_min", 1e-4), u.value("sigma_max", 20.0));
            } catch (const std::exception& e) {
                throw ModelError("'" + file.string() + "': uniform_noise: " + e.what());
            }
        }
        auto sentences = read_sentences(model_file(dir, get<std::string>(config, "sentences", file)), *m.tokenizer);
        m.denoiser = std::make_shared<CorpusDenoiser>(std::move(sentences), opt, m.schedule);
    } else if (type == "transformer") {
        try {
            m.denoiser = load_transformer_denoiser(config, dir, m.tokenizer, m.family);
        } catch (const ModelError&) {
            throw;
        } catch (const std::exception& e) {
            throw ModelError(e.what());
        }
    } else {
        throw ModelError("'" + file.string() + "': unknown model type '" + type + "' (known: corpus, transformer)");
    }
    spdlog::debug("model '{}' loaded from {}: {} denoiser, {} family, {} tokens of vocabulary", m.name, dir.string(),
                  type, family_name(m.family), m.tokenizer->vocab_size());
    return m;
}

}  // namespace rudder
