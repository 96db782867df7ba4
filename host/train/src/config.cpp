#include <rudder/train/config.hpp>

#include <string>
#include <vector>

#include <rudder/text/meaning.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/treebank.hpp>
#include "networks.hpp"

namespace rudder::train {
namespace fs = std::filesystem;
using json = nlohmann::json;
using json_input::ObjectReader;

namespace {

constexpr int64_t kMaxSteps = 100'000'000;
constexpr int64_t kMaxCount = 1'000'000'000;

fs::path resolve(const fs::path& base_dir, const std::string& path) {
    if (path.empty()) return {};
    const fs::path p(path);
    return p.is_absolute() ? p : base_dir / p;
}

// An input file the config names: it must exist now, not after the data is half read.
fs::path input_file(ObjectReader& r, const std::string& key, bool required, const fs::path& base_dir) {
    const std::string text = r.text(key, required ? json_input::kRequired : json_input::kOptional).value_or("");
    if (text.empty()) return {};
    const fs::path file = resolve(base_dir, text);
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) r.issue(key, "no such file '" + file.string() + "'");
    return file;
}

// A treebank of the right kind for a syntax kind: CoNLL-U or bracketed trees for the tagger, bracketed trees for
// the parser; `rudder annotate` output for a controller's classifier. (The teacher and the denoisers read E2E CSV.)
void check_data_file(ObjectReader& r, const std::string& key, const fs::path& file, const std::string& kind) {
    if (file.empty() || kind.empty()) return;
    if (kind == "attribute_classifier") return;  // E2E CSV, whatever its name
    if (is_controller_kind(kind)) {
        const std::string name = file.filename().string();
        if (name.find(".jsonl") == std::string::npos)
            r.issue(key, "the " + kind +
                             " trains on text annotated by `rudder annotate` (JSON Lines, .jsonl or .jsonl.gz); got '" +
                             name + "'");
        return;
    }
    if (!is_syntax_kind(kind)) return;  // E2E CSV, whatever its name
    try {
        const auto format = syntax::treebank_format(file);
        if (kind == "parser" && format != syntax::TreebankFormat::ptb)
            r.issue(key, "the parser trains on constituency trees (.ptb, .mrg, .tree, .trees, optionally .gz); got '" +
                             file.filename().string() + "'");
    } catch (const std::invalid_argument&) {
        r.issue(key, "the " + kind +
                         " trains on a treebank: .conllu (CoNLL-U) or .ptb, .mrg, .tree, .trees (bracketed "
                         "trees), optionally .gz; got '" +
                         file.filename().string() + "'");
    }
}

}  // namespace

bool is_controller_kind(const std::string& kind) {
    return kind == "syntax_classifier" || kind == "attribute_classifier";
}

json TrainConfig::identity() const {
    json id = {{"kind", kind},
               {"network", network},
               {"max_length", max_length},
               {"training",
                {{"steps", steps},
                 {"batch_size", batch_size},
                 {"lr", lr},
                 {"warmup", warmup},
                 {"weight_decay", weight_decay},
                 {"grad_clip", grad_clip},
                 {"seed", seed},
                 {"condition_dropout", condition_dropout}}}};
    // Only when used, so checkpoints written before the setting existed still resume.
    if (field_dropout > 0) id["training"]["field_dropout"] = field_dropout;
    if (ema > 0) id["training"]["ema"] = ema;
    if (precision != "float32") id["training"]["precision"] = precision;
    // The vocabulary itself is checked through the data fingerprint; min_count only matters when it is built.
    if (vocab_file.empty() && tokenizer_file.empty()) id["tokenizer"] = {{"min_count", min_count}};
    if (is_denoiser_kind(kind)) id["max_condition_length"] = max_condition_length;
    if (!init_from.empty()) id["training"]["init_from"] = init_from.string();
    if (!attribute.is_null()) id["attribute"] = attribute;
    if (!denoiser.empty()) id["denoiser"] = denoiser.string();
    return id;
}

TrainConfig parse_train_config(const json& j, const fs::path& base_dir, const std::string& source) {
    std::vector<ConfigIssue> issues;
    TrainConfig c;
    c.source = source;
    ObjectReader root(j, "", issues);
    if (!j.is_object()) throw ConfigError(source, std::move(issues));
    root.text("description");
    c.kind = root.choice("kind", network_kinds(), json_input::kRequired).value_or("");
    const bool denoiser = is_denoiser_kind(c.kind);
    const bool controller = is_controller_kind(c.kind);

    ObjectReader data(root.object("data", json_input::kRequired).value_or(json::object()), "/data", issues);
    c.train_file = input_file(data, "train", true, base_dir);
    c.dev_file = input_file(data, "dev", false, base_dir);
    check_data_file(data, "train", c.train_file, c.kind);
    check_data_file(data, "dev", c.dev_file, c.kind);
    c.dev_every = data.integer("dev_every", 1, kMaxSteps).value_or(500);
    c.dev_max_texts = data.integer("dev_max_texts", 1, kMaxCount).value_or(1000);
    if (c.kind == "attribute_classifier") {
        c.attribute = meaning::read_attribute_classes(data, "attribute", json_input::kRequired);
    } else if (data.has("attribute")) {
        data.issue("attribute", "applies to the attribute_classifier kind only");
    }
    data.reject_unknown_keys();

    const bool hub = is_hub_kind(c.kind);
    ObjectReader tokenizer(root.object("tokenizer").value_or(json::object()), "/tokenizer", issues);
    c.vocab_file = input_file(tokenizer, "vocab", false, base_dir);
    c.min_count = tokenizer.integer("min_count", 1, kMaxCount).value_or(1);
    // Checked when the data is read, not here: `rudder train --texts-out` writes the texts a tokenizer is made from.
    c.tokenizer_file = resolve(base_dir, tokenizer.text("file").value_or(""));
    if (hub) {
        for (const char* key : {"vocab", "min_count"})
            if (tokenizer.has(key))
                tokenizer.issue(key, "the mdlm kind takes a BPE tokenizer.json (\"file\"), not a word vocabulary");
    } else if (tokenizer.has("file")) {
        tokenizer.issue("file", "applies to the mdlm kind (a BPE tokenizer.json); the " + c.kind +
                                    " takes a word vocabulary (\"vocab\" or \"min_count\")");
    }
    if (controller && j.contains("tokenizer"))
        root.issue("tokenizer", "the " + c.kind + " uses its denoiser's vocabulary; leave the tokenizer out");
    if (controller) {
        c.denoiser = resolve(base_dir, root.text("denoiser", json_input::kRequired).value_or(""));
        std::error_code ec;
        // A Rudder denoiser (its word vocabulary), or a Hugging Face MDLM checkpoint (its BPE tokenizer.json).
        const bool has_config = fs::is_regular_file(c.denoiser / "config.json", ec);
        if (has_config && fs::is_regular_file(c.denoiser / "vocab.txt", ec)) {
            c.vocab_file = c.denoiser / "vocab.txt";
        } else if (has_config && fs::is_regular_file(c.denoiser / "tokenizer.json", ec)) {
            c.tokenizer_file = c.denoiser / "tokenizer.json";
            if (c.kind == "syntax_classifier")
                root.issue("denoiser", "'" + c.denoiser.string() +
                                           "' has a BPE tokenizer: the syntax classifier tags each token as a word, "
                                           "so it needs a word-level denoiser (config.json, vocab.txt); a word-level "
                                           "one guides this model by reading its text (\"input\": \"text\", "
                                           "docs/syntax.md)");
        } else {
            root.issue("denoiser", "'" + c.denoiser.string() +
                                       "' is not a trained denoiser directory (config.json with vocab.txt, or an "
                                       "MDLM checkpoint's config.json with tokenizer.json)");
        }
    } else if (root.has("denoiser")) {
        root.issue("denoiser", "applies to the controller kinds (syntax_classifier, attribute_classifier); the " +
                                   c.kind + " has none");
    }
    if (tokenizer.has("vocab") && tokenizer.has("min_count"))
        tokenizer.issue("min_count",
                        "applies only when the vocabulary is built; give \"vocab\" or \"min_count\", not both");
    tokenizer.reject_unknown_keys();

    c.max_length = root.integer("max_length", 1, 4096).value_or(64);
    c.max_condition_length = root.integer("max_condition_length", 1, 4096).value_or(64);
    if (!denoiser && root.has("max_condition_length"))
        root.issue("max_condition_length", "applies to the denoiser kinds; the " + c.kind + " is unconditional");

    c.network = root.object("network", json_input::kRequired).value_or(json::object());
    ObjectReader training(root.object("training", json_input::kRequired).value_or(json::object()), "/training", issues);
    c.steps = training.integer("steps", 1, kMaxSteps, json_input::kRequired).value_or(1);
    c.batch_size = training.integer("batch_size", 1, 4096).value_or(64);
    c.lr = training.positive("lr", 1.0).value_or(1e-3);
    c.warmup = training.integer("warmup", 0, kMaxSteps).value_or(0);
    c.weight_decay = training.number("weight_decay", 0.0, 1.0).value_or(0.0);
    c.grad_clip = training.number("grad_clip", 0.0, 1e6).value_or(1.0);
    c.seed = static_cast<uint64_t>(training.integer("seed", 0, INT64_MAX).value_or(0));
    c.threads = training.integer("threads", 1, 256).value_or(2);
    c.checkpoint_every = training.integer("checkpoint_every", 0, kMaxSteps).value_or(1000);
    c.log_every = training.integer("log_every", 1, kMaxSteps).value_or(50);
    c.condition_dropout = training.number("condition_dropout", 0.0, 1.0).value_or(denoiser ? 0.1 : 0.0);
    c.field_dropout = training.number("field_dropout", 0.0, 1.0).value_or(0.0);
    c.ema = training.number("ema", 0.0, 0.999999).value_or(0.0);
    c.precision = training.choice("precision", {"float32", "bfloat16"}).value_or("float32");
    if (const std::string init = training.text("init_from").value_or(""); !init.empty()) {
        c.init_from = resolve(base_dir, init);
        std::error_code ec;
        if (!fs::is_regular_file(c.init_from / "config.json", ec) ||
            !fs::is_regular_file(c.init_from / "model.safetensors", ec))
            training.issue("init_from", "'" + c.init_from.string() +
                                            "' is not a trained model directory (config.json and "
                                            "model.safetensors)");
        else if (hub && c.tokenizer_file.empty())
            c.tokenizer_file = c.init_from / "tokenizer.json";
        else if (!hub && !controller && c.vocab_file.empty() && fs::is_regular_file(c.init_from / "vocab.txt", ec))
            c.vocab_file = c.init_from / "vocab.txt";
        if (tokenizer.has("min_count") && !tokenizer.has("vocab"))
            tokenizer.issue("min_count", "the vocabulary comes from training.init_from; leave min_count out");
    }
    if (hub && c.tokenizer_file.empty() && !training.has("init_from"))
        tokenizer.issue("file", "required for the mdlm kind: a byte-level BPE tokenizer.json (or training.init_from)");
    if (!denoiser && c.condition_dropout > 0)
        training.issue("condition_dropout",
                       "applies to the denoiser kinds; the " + c.kind + " is unconditional (use 0)");
    if (!denoiser && c.field_dropout > 0)
        training.issue("field_dropout", "applies to the denoiser kinds; the " + c.kind + " is unconditional (use 0)");
    if (training.has("warmup") && training.has("steps") && c.warmup > c.steps)
        training.issue("warmup", "expected at most training.steps (" + std::to_string(c.steps) + "), got " +
                                     std::to_string(c.warmup));
    training.reject_unknown_keys();

    // The network config gets the settings the trainer owns. Given in both places they must agree; given only in
    // the network config, that value is the one used.
    auto fill_in = [&](const std::string& key, const json& value, bool given, const std::string& owner) {
        if (!c.network.contains(key)) {
            c.network[key] = value;
        } else if (given && c.network.at(key) != value) {
            issues.push_back({"/network/" + key, "must equal " + owner + " (" + value.dump() + ") or be left out"});
        }
        return c.network.at(key);
    };
    if (j.contains("network") && j.at("network").is_object()) {
        const json length = fill_in("max_length", c.max_length, root.has("max_length"), "the top-level max_length");
        if (length.is_number_integer()) c.max_length = length.get<int64_t>();
        if (denoiser) {
            fill_in("family", c.kind, true, "the kind");
            const json cond_length = fill_in("max_condition_length", c.max_condition_length,
                                             root.has("max_condition_length"), "the top-level max_condition_length");
            if (cond_length.is_number_integer()) c.max_condition_length = cond_length.get<int64_t>();
            const json dropout = fill_in("condition_dropout", c.condition_dropout, training.has("condition_dropout"),
                                         "training.condition_dropout");
            if (dropout.is_number()) c.condition_dropout = dropout.get<double>();
        }
    }

    const std::string out = root.text("out", json_input::kRequired).value_or("");
    c.out = resolve(base_dir, out);
    root.reject_unknown_keys();
    if (!issues.empty()) throw ConfigError(source, std::move(issues));
    return c;
}

TrainConfig load_train_config(const fs::path& file) {
    std::string text;
    try {
        text = read_small_file(file, kMaxConfigFileBytes, "training config");
    } catch (const std::runtime_error& e) {
        throw ConfigError(file.string(), {{"", e.what()}});
    }
    json j;
    try {
        j = json_input::parse(text);
    } catch (const std::exception& e) {  // parse errors, numbers beyond double's range ("1e999"), too deep
        throw ConfigError(file.string(), {{"", std::string("not valid JSON: ") + e.what()}});
    }
    return parse_train_config(j, file.parent_path(), file.string());
}

}  // namespace rudder::train
