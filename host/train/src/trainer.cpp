#include <rudder/train/trainer.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/weights.hpp>
#include <rudder/nn/syntax_classifier.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/syntax/annotator.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/tree.hpp>
#include <rudder/text/treebank.hpp>
#include <rudder/text/words.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/tokenizer.hpp>
#include <rudder/train/networks.hpp>

namespace rudder::train {
namespace fs = std::filesystem;
using json = nlohmann::json;
using json_input::ObjectReader;

namespace {

constexpr int64_t kMaxSteps = 100'000'000;
constexpr int64_t kMaxCount = 1'000'000'000;
constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------------------------------------------------------
// Config

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
            r.issue(key, "the " + kind + " trains on text annotated by `rudder annotate` (JSON Lines, .jsonl or .jsonl.gz); got '" +
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
        r.issue(key, "the " + kind + " trains on a treebank: .conllu (CoNLL-U) or .ptb, .mrg, .tree, .trees (bracketed "
                     "trees), optionally .gz; got '" + file.filename().string() + "'");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Files

// Writes through a temporary file and a rename, so `file` is either the old or the new content, never half.
void write_atomically(const fs::path& file, const std::string& content) {
    const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << content;
        out.flush();
        if (!out) throw ModelError("cannot write '" + tmp.string() + "'");
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec) throw ModelError("cannot move '" + tmp.string() + "' to '" + file.string() + "': " + ec.message());
}

std::string vocab_text(const Tokenizer& tokenizer) {
    std::string text;
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) text += tokenizer.token(id) + "\n";
    return text;
}

// ---------------------------------------------------------------------------------------------------------------
// Randomness: every draw comes from a generator seeded by (seed, stream, index), so any step, epoch or dev batch
// can be reproduced on its own, which is what makes a resumed run identical to an uninterrupted one.

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

enum class Stream : uint64_t { step = 1, epoch_order = 2, dev = 3 };

uint64_t derived_seed(uint64_t seed, Stream stream, uint64_t index) {
    return splitmix64(seed ^ splitmix64((static_cast<uint64_t>(stream) << 56) ^ index));
}

// The order of the examples in one epoch: a Fisher-Yates shuffle written out, so it is the same with any
// standard library.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::mt19937_64 rng(derived_seed(seed, Stream::epoch_order, static_cast<uint64_t>(epoch)));
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[rng() % static_cast<uint64_t>(i + 1)]);
    return order;
}

// ---------------------------------------------------------------------------------------------------------------
// Data

struct Example {
    std::vector<int64_t> tokens;
    std::vector<int64_t> condition;  // denoisers only
    std::vector<int64_t> features;   // tagger, parser: syntax::kWordFeatures per token
    // tagger: (PTB tag, universal tag) per token, -1 = unknown; parser: (start, end, label) per constituent
    std::vector<int64_t> targets;
    std::vector<int64_t> tags;  // syntax classifier: tag + 1 per token
    int64_t label = -1;         // attribute classifier: the text's class
};

struct Dataset {
    std::vector<Example> examples;
    int64_t dropped_too_long = 0;
    int64_t dropped_condition = 0;
    int64_t dropped_empty = 0;
    int64_t unknown_labels = 0;  // dev only: gold tags or constituents the training data never had
    int64_t dropped_misaligned = 0;  // annotations whose words are not the tokenizer's tokens
    int64_t dropped_unlabelled = 0;  // attribute classifier: texts whose meaning representation maps to no class
};

// The label sets of a treebank, in order of first appearance in the training data.
struct LabelSet {
    std::vector<std::string> names;
    std::map<std::string, int64_t> index;
    void add(const std::string& name) {
        if (index.emplace(name, static_cast<int64_t>(names.size())).second) names.push_back(name);
    }
    int64_t find(const std::string& name) const {
        auto it = index.find(name);
        return it == index.end() ? -1 : it->second;
    }
};

struct TreebankLabels {
    LabelSet tags, upos, chains;
};

TreebankLabels collect_labels(const std::vector<syntax::TreebankSentence>& sentences) {
    TreebankLabels labels;
    for (const auto& s : sentences) {
        for (const auto& t : s.xpos) labels.tags.add(t);
        for (const auto& t : s.upos) labels.upos.add(t);
        if (s.has_tree)
            for (const auto& span : syntax::chain_spans(s.tree)) labels.chains.add(span.label);
    }
    return labels;
}

Dataset encode_treebank(const std::vector<syntax::TreebankSentence>& sentences, const WordTokenizer& vocabulary,
                        const TreebankLabels& labels, const std::string& kind, int64_t buckets, int64_t max_length) {
    Dataset data;
    for (const auto& s : sentences) {
        if (static_cast<int64_t>(s.words.size()) > max_length) {
            ++data.dropped_too_long;
            continue;
        }
        Example e;
        syntax::encode_tokens(vocabulary, buckets, s.words, e.tokens, e.features);
        if (kind == "tagger") {
            for (size_t k = 0; k < s.words.size(); ++k) {
                const int64_t tag = labels.tags.find(s.xpos[k]);
                const int64_t upos = s.upos.empty() ? -1 : labels.upos.find(s.upos[k]);
                data.unknown_labels += (tag < 0) + (!s.upos.empty() && upos < 0);
                e.targets.insert(e.targets.end(), {tag, upos});
            }
        } else {
            for (const auto& span : syntax::chain_spans(s.tree)) {
                const int64_t label = labels.chains.find(span.label);
                if (label < 0) {
                    ++data.unknown_labels;  // scored as "no constituent": the parser cannot predict it
                    continue;
                }
                e.targets.insert(e.targets.end(), {span.start, span.end, label + 1});
            }
        }
        data.examples.push_back(std::move(e));
    }
    return data;
}

// A classifier example's tokens; false (the drop counted in `data`) for an empty text or one over max_length.
bool encode_text(const Tokenizer& tokenizer, const std::string& text, int64_t max_length, Example& e, Dataset& data) {
    e.tokens = tokenizer.encode(text);
    if (e.tokens.empty()) {
        ++data.dropped_empty;
        return false;
    }
    if (static_cast<int64_t>(e.tokens.size()) > max_length) {
        ++data.dropped_too_long;
        return false;
    }
    return true;
}

// `rudder annotate` output (one {"text", "words", "pos", "tree"} object per line) as syntax classifier examples:
// the text's token ids, tag + 1 per token and its tree's chain spans. With `grow`, new tags and labels join the
// sets; otherwise they are counted as unknown (the tag becomes "no word", the span "no constituent").
Dataset encode_annotations(const fs::path& file, const Tokenizer& tokenizer, TreebankLabels& labels, bool grow,
                           int64_t max_length) {
    Dataset data;
    for (const auto& a : syntax::read_annotated_texts(file)) {
        const std::string where = file.string() + ":" + std::to_string(a.line);
        if (a.tree.empty())
            throw std::runtime_error(where + ": no tree (annotate with the parser, not --tags-only)");
        Example e;
        if (!encode_text(tokenizer, a.text, max_length, e, data)) continue;
        if (a.pos.size() != e.tokens.size()) {
            ++data.dropped_misaligned;
            continue;
        }
        for (const auto& tag : a.pos) {
            if (grow) labels.tags.add(tag);
            const int64_t id = labels.tags.find(tag);
            data.unknown_labels += id < 0;
            e.tags.push_back(id + 1);
        }
        for (const auto& span : syntax::chain_spans(syntax::read_tree(a.tree, where))) {
            if (grow) labels.chains.add(span.label);
            const int64_t label = labels.chains.find(span.label);
            if (label < 0 || span.end > static_cast<int64_t>(e.tokens.size())) {
                ++data.unknown_labels;
                continue;
            }
            e.targets.insert(e.targets.end(), {span.start, span.end, label + 1});
        }
        data.examples.push_back(std::move(e));
    }
    return data;
}

// E2E records as attribute classifier examples: the text's tokens and the class its meaning representation's
// `field` value maps to (attribute.classes: {class: [values]}); records with another value, or none, are dropped.
Dataset encode_attribute(const std::vector<E2ERecord>& records, const Tokenizer& tokenizer, const json& attribute,
                         const std::vector<std::string>& classes, int64_t max_length) {
    Dataset data;
    for (const auto& record : records) {
        const auto it = std::find(classes.begin(), classes.end(), meaning::attribute_class(attribute, record.mr));
        const int64_t label = it == classes.end() ? -1 : static_cast<int64_t>(it - classes.begin());
        if (label < 0) {
            ++data.dropped_unlabelled;
            continue;
        }
        Example e;
        e.label = label;
        if (encode_text(tokenizer, record.ref, max_length, e, data)) data.examples.push_back(std::move(e));
    }
    return data;
}

Dataset encode_records(const std::vector<E2ERecord>& records, const Tokenizer& tokenizer, const TrainConfig& config,
                       bool conditional) {
    Dataset data;
    for (const auto& record : records) {
        Example e;
        e.tokens = tokenizer.encode(record.ref);
        if (e.tokens.empty()) {
            ++data.dropped_empty;
            continue;
        }
        if (static_cast<int64_t>(e.tokens.size()) > config.max_length) {
            ++data.dropped_too_long;
            continue;
        }
        if (conditional) {
            e.condition = tokenizer.encode(record.mr);
            if (static_cast<int64_t>(e.condition.size()) > config.max_condition_length) {
                ++data.dropped_condition;
                continue;
            }
        }
        data.examples.push_back(std::move(e));
    }
    return data;
}

// FNV-1a over the vocabulary and every encoded example: a resumed run must see the same data.
std::string fingerprint(const Tokenizer& tokenizer, const std::vector<Example>& examples) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto add = [&](uint64_t v) {
        for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 0x100000001b3ull;
    };
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id)
        for (char c : tokenizer.token(id)) add(static_cast<unsigned char>(c));
    for (const auto& e : examples) {
        for (const auto* part : {&e.tokens, &e.condition, &e.features, &e.targets, &e.tags}) {
            add(part->size());
            for (int64_t t : *part) add(static_cast<uint64_t>(t));
        }
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
    return text;
}

// Row b of span targets [B, L+1, L+1] for a sentence of n words: every span [i, j) of the sentence is "no
// constituent" (0) unless `spans` ((start, end, label + 1) triples) has it; the rest stays -1.
void fill_span_targets(at::Tensor& targets, int64_t b, int64_t n, const std::vector<int64_t>& spans) {
    auto row = targets.accessor<int64_t, 3>()[b];
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j <= n; ++j) row[i][j] = 0;
    for (size_t k = 0; k + 2 < spans.size(); k += 3) row[spans[k]][spans[k + 1]] = spans[k + 2];
}

// A batch of treebank sentences, padded to the batch's longest: word ids, features and the targets of the kind.
nn::TrainingBatch make_syntax_batch(const std::vector<Example>& examples, const std::vector<int64_t>& rows,
                                    const std::string& kind) {
    const int64_t B = static_cast<int64_t>(rows.size());
    int64_t L = 1;
    for (int64_t row : rows) L = std::max(L, static_cast<int64_t>(examples[static_cast<size_t>(row)].tokens.size()));
    nn::TrainingBatch batch;
    batch.tokens = at::zeros({B, L}, at::kLong);
    batch.features = at::zeros({B, L, syntax::kWordFeatures}, at::kLong);
    batch.targets = kind == "tagger" ? at::full({B, L, 2}, -1, at::kLong) : at::full({B, L + 1, L + 1}, -1, at::kLong);
    auto tokens = batch.tokens.accessor<int64_t, 2>();
    auto features = batch.features.accessor<int64_t, 3>();
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        const auto n = static_cast<int64_t>(e.tokens.size());
        for (int64_t t = 0; t < n; ++t) {
            tokens[b][t] = e.tokens[static_cast<size_t>(t)];
            for (int64_t k = 0; k < syntax::kWordFeatures; ++k)
                features[b][t][k] = e.features[static_cast<size_t>(t * syntax::kWordFeatures + k)];
        }
        if (kind == "tagger") {
            auto targets = batch.targets.accessor<int64_t, 3>();
            for (int64_t t = 0; t < n; ++t) {
                targets[b][t][0] = e.targets[static_cast<size_t>(2 * t)];
                targets[b][t][1] = e.targets[static_cast<size_t>(2 * t + 1)];
            }
        } else {
            fill_span_targets(batch.targets, b, n, e.targets);
        }
    }
    return batch;
}

// A batch for a controller's classifier: tokens padded to max_length (the length the sampler runs at); for the
// syntax classifier tag + 1 per word and 0 after the text, span targets as the parser's; for the attribute
// classifier the text's class.
nn::TrainingBatch make_classifier_batch(const std::vector<Example>& examples, const std::vector<int64_t>& rows,
                                        int64_t max_length, int64_t pad) {
    const int64_t B = static_cast<int64_t>(rows.size()), L = max_length;
    nn::TrainingBatch batch;
    batch.tokens = at::full({B, L}, pad, at::kLong);
    auto tokens = batch.tokens.accessor<int64_t, 2>();
    const bool attribute = !examples.empty() && examples.front().label >= 0;
    if (attribute) {
        batch.classes = at::zeros({B}, at::kLong);
    } else {
        batch.tags = at::zeros({B, L}, at::kLong);
        batch.targets = at::full({B, L + 1, L + 1}, -1, at::kLong);
    }
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        const auto n = static_cast<int64_t>(e.tokens.size());
        for (int64_t t = 0; t < n; ++t) tokens[b][t] = e.tokens[static_cast<size_t>(t)];
        if (attribute) {
            batch.classes[b] = e.label;
            continue;
        }
        auto tags = batch.tags.accessor<int64_t, 2>();
        for (int64_t t = 0; t < n; ++t) tags[b][t] = e.tags[static_cast<size_t>(t)];
        fill_span_targets(batch.targets, b, n, e.targets);
    }
    return batch;
}

// A batch of examples: tokens padded to max_length, conditions to the batch's longest (denoisers).
nn::TrainingBatch make_batch(const std::vector<Example>& examples, const std::vector<int64_t>& rows,
                             int64_t max_length, int64_t pad, bool conditional) {
    const int64_t B = static_cast<int64_t>(rows.size());
    nn::TrainingBatch batch;
    batch.tokens = at::full({B, max_length}, pad, at::kLong);
    auto tokens = batch.tokens.accessor<int64_t, 2>();
    size_t width = 1;
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        for (size_t j = 0; j < e.tokens.size(); ++j) tokens[b][static_cast<int64_t>(j)] = e.tokens[j];
        width = std::max(width, e.condition.size());
    }
    if (!conditional) return batch;
    batch.condition = at::full({B, static_cast<int64_t>(width)}, pad, at::kLong);
    auto condition = batch.condition.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        for (size_t j = 0; j < e.condition.size(); ++j) condition[b][static_cast<int64_t>(j)] = e.condition[j];
    }
    return batch;
}

// ---------------------------------------------------------------------------------------------------------------
// Optimiser

// Linear warmup to lr, then a cosine decay to lr / 10 at the last step.
double learning_rate(const TrainConfig& c, int64_t step) {
    if (step <= c.warmup) return c.lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, c.warmup));
    const double progress = static_cast<double>(step - c.warmup) / static_cast<double>(std::max<int64_t>(1, c.steps - c.warmup));
    return c.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(kPi * std::min(1.0, progress))));
}

// Scales the gradients so that their global L2 norm is at most max_norm, as torch.nn.utils.clip_grad_norm_ does.
void clip_gradients(const std::vector<at::Tensor>& parameters, double max_norm) {
    std::vector<at::Tensor> norms;
    for (const auto& p : parameters)
        if (p.grad().defined()) norms.push_back(p.grad().norm());
    if (norms.empty()) return;
    const double total = at::stack(norms).norm().item<double>();
    const double scale = max_norm / (total + 1e-6);
    if (scale >= 1.0) return;
    for (const auto& p : parameters)
        if (p.grad().defined()) p.grad().mul_(scale);
}

// AdamW keys its per-parameter state by the parameter's TensorImpl address, as torch/optim/serialize.h does.
std::string state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// ---------------------------------------------------------------------------------------------------------------
// Output

std::string duration_text(double seconds) {
    const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
    char text[32];
    if (s >= 3600)
        std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
    else
        std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
    return text;
}

class Trainer {
public:
    Trainer(const TrainConfig& config, const TrainOptions& options) : c_(config), o_(options) {}
    TrainResult run();

private:
    void say(const std::string& line) {
        if (o_.progress) *o_.progress << line << std::endl;
    }
    void prepare_out_dir();
    void load_data();
    void build_network();
    std::optional<json> find_checkpoint();
    void resume(const json& state);
    void start_from_model(bool load_weights);
    void write_checkpoint(int64_t step);
    double dev_loss();
    void log_step(int64_t step, double loss, std::optional<double> dev, double lr);
    void write_model(const TrainResult& result);

    const TrainConfig& c_;
    const TrainOptions& o_;
    bool conditional_ = false;
    bool syntax_ = false;      // tagger or parser: treebank data
    bool controller_ = false;  // a controller's noisy classifier: annotated E2E text, the denoiser's noise
    nn::TrainingBatch batch_of(const Dataset& data, const std::vector<int64_t>& rows) const {
        if (controller_) return make_classifier_batch(data.examples, rows, c_.max_length, tokenizer_->pad_id());
        return syntax_ ? make_syntax_batch(data.examples, rows, c_.kind)
                       : make_batch(data.examples, rows, c_.max_length, tokenizer_->pad_id(), conditional_);
    }
    void load_annotations();  // a controller's classifier: the denoiser's settings, then its data
    void copy_denoiser_embedding();
    void load_e2e();        // E2E CSV: the teacher and the denoisers
    void load_treebanks();  // the tagger and the parser
    json network_config_;  // c_.network, plus the label sets of treebank data
    fs::path checkpoint_dir_;
    std::shared_ptr<WordTokenizer> tokenizer_;
    Dataset train_, dev_;
    std::string fingerprint_;
    std::shared_ptr<nn::TrainableNetwork> network_;
    std::unique_ptr<torch::optim::AdamW> optimizer_;
    std::vector<std::pair<std::string, at::Tensor>> parameters_;  // named, in a fixed order
    int64_t start_step_ = 0;
    double seconds_before_ = 0.0;  // training time of earlier runs (from the checkpoint)
    int64_t init_steps_ = 0;       // steps behind the training.init_from weights, earlier stages included
    double run_seconds_ = 0.0;
    std::optional<double> last_dev_;
    std::optional<double> last_dev_accuracy_;  // attribute classifier: share of dev texts classed right
};

void Trainer::prepare_out_dir() {
    std::error_code ec;
    fs::create_directories(c_.out, ec);
    if (ec) throw ModelError("cannot create '" + c_.out.string() + "': " + ec.message());
    checkpoint_dir_ = c_.out / "checkpoint";
}

std::optional<json> Trainer::find_checkpoint() {
    const fs::path state_file = checkpoint_dir_ / "state.json";
    std::error_code ec;
    if (!fs::exists(state_file, ec)) {
        if (fs::exists(c_.out / "config.json", ec) && !o_.overwrite)
            throw ModelError("'" + c_.out.string() + "' already holds a trained model; choose another \"out\" or "
                             "pass --overwrite to train it again");
        return std::nullopt;
    }
    json state = read_json_file(state_file);
    if (!state.is_object() || !state.contains("identity") || !state.contains("step"))
        throw ModelError("'" + state_file.string() + "' is not a checkpoint state written by rudder train");
    const json patch = json::diff(state.at("identity"), c_.identity());
    if (!patch.empty()) {
        std::string what;
        for (const auto& op : patch) {
            const std::string path = op.value("path", "");
            const json before = state.at("identity").contains(json::json_pointer(path))
                                    ? state.at("identity").at(json::json_pointer(path))
                                    : json("(absent)");
            const json now = c_.identity().contains(json::json_pointer(path)) ? c_.identity().at(json::json_pointer(path))
                                                                              : json("(absent)");
            what += "\n  " + path + ": " + before.dump() + " in the checkpoint, " + now.dump() + " in the config";
            if (what.size() > 2000) break;
        }
        throw ModelError("the checkpoint in '" + checkpoint_dir_.string() + "' was written with another config:" + what +
                         "\nrestore those values, or delete '" + checkpoint_dir_.string() + "' to start over");
    }
    return state;
}

void Trainer::load_treebanks() {
    const auto sentences = syntax::read_treebank(c_.train_file);
    if (c_.kind == "parser")
        for (const auto& s : sentences)
            if (!s.has_tree) throw std::runtime_error(s.source + ": the parser needs constituency trees");
    if (!c_.vocab_file.empty()) {
        tokenizer_ = std::make_shared<WordTokenizer>(WordTokenizer::load(c_.vocab_file.string()));
    } else {
        std::vector<std::string> keys;
        for (const auto& s : sentences)
            for (const auto& w : s.words) keys.push_back(syntax::word_key(w));
        tokenizer_ = std::make_shared<WordTokenizer>(WordTokenizer::from_words(keys, c_.min_count));
    }
    const TreebankLabels labels = collect_labels(sentences);
    network_config_ = c_.network;
    std::vector<ConfigIssue> issues;
    for (const char* key : {"tags", "upos", "labels"})
        if (network_config_.contains(key)) issues.push_back({std::string("/network/") + key, "filled in from the training data; leave it out"});
    if (!issues.empty()) throw ConfigError(c_.source, std::move(issues));
    if (c_.kind == "tagger") {
        network_config_["tags"] = labels.tags.names;
        network_config_["upos"] = labels.upos.names;
    } else {
        network_config_["labels"] = labels.chains.names;
    }
    const int64_t buckets = network_config_.value("buckets", int64_t{8192});
    if (buckets < 2) throw ConfigError(c_.source, {{"/network/buckets", "expected an integer >= 2"}});
    train_ = encode_treebank(sentences, *tokenizer_, labels, c_.kind, buckets, c_.max_length);
    if (!c_.dev_file.empty())
        dev_ = encode_treebank(syntax::read_treebank(c_.dev_file), *tokenizer_, labels, c_.kind, buckets, c_.max_length);
}

void Trainer::load_data() {
    if (controller_) {
        load_annotations();
    } else if (syntax_) {
        load_treebanks();
    } else {
        load_e2e();
    }
    const std::string unit = syntax_ ? "sentence" : "text";
    if (train_.dropped_misaligned > 0)
        say("dropped " + std::to_string(train_.dropped_misaligned) + " annotated texts whose words are not the denoiser's tokens");
    if (train_.examples.empty())
        throw std::runtime_error("'" + c_.train_file.string() + "': no training " + unit + " is left after dropping the " +
                                 std::to_string(train_.dropped_too_long) + " longer than max_length " +
                                 std::to_string(c_.max_length));
    fingerprint_ = fingerprint(*tokenizer_, train_.examples);
    if (!c_.dev_file.empty()) {
        if (static_cast<int64_t>(dev_.examples.size()) > c_.dev_max_texts) dev_.examples.resize(static_cast<size_t>(c_.dev_max_texts));
        if (dev_.examples.empty()) throw std::runtime_error("'" + c_.dev_file.string() + "': no dev " + unit + " fits max_length");
    }
}

void Trainer::load_annotations() {
    tokenizer_ = std::make_shared<WordTokenizer>(WordTokenizer::load(c_.vocab_file.string()));
    // The family and the noise are the denoiser's: the classifier must see what the sampler will hand it.
    const json denoiser = read_json_file(c_.denoiser / "config.json");
    if (denoiser.value("type", "") != "transformer" || !denoiser.contains("network") || !denoiser.at("network").is_object())
        throw ModelError("'" + c_.denoiser.string() + "' is not a trained denoiser (config.json \"type\": \"transformer\")");
    network_config_ = c_.network;
    std::vector<ConfigIssue> issues;
    for (const char* key : {"family", "vocab_size", "embed_dim", "schedule", "mask_schedule", "tags", "labels", "classes"}) {
        if (network_config_.contains(key)) {
            issues.push_back({std::string("/network/") + key, "filled in from the denoiser and the data; leave it out"});
            continue;
        }
        if (denoiser.at("network").contains(key)) network_config_[key] = denoiser.at("network").at(key);
    }
    if (!issues.empty()) throw ConfigError(c_.source, std::move(issues));
    if (c_.kind == "attribute_classifier") {
        std::vector<std::string> classes;
        for (const auto& item : c_.attribute.at("classes").items()) classes.push_back(item.key());
        network_config_["classes"] = classes;
        train_ = encode_attribute(read_e2e_csv(c_.train_file), *tokenizer_, c_.attribute, classes, c_.max_length);
        if (!c_.dev_file.empty())
            dev_ = encode_attribute(read_e2e_csv(c_.dev_file), *tokenizer_, c_.attribute, classes, c_.max_length);
        return;
    }
    TreebankLabels labels;
    train_ = encode_annotations(c_.train_file, *tokenizer_, labels, /*grow=*/true, c_.max_length);
    if (!c_.dev_file.empty()) dev_ = encode_annotations(c_.dev_file, *tokenizer_, labels, /*grow=*/false, c_.max_length);
    network_config_["tags"] = labels.tags.names;
    network_config_["labels"] = labels.chains.names;
}

// A continuous classifier noises text with the denoiser's own embedding table, which it keeps (frozen).
void Trainer::copy_denoiser_embedding() {
    auto* classifier = dynamic_cast<nn::SyntaxClassifierNet*>(network_.get());
    if (classifier == nullptr || classifier->family() != Family::continuous) return;
    const json denoiser = read_json_file(c_.denoiser / "config.json");
    const fs::path weights = c_.denoiser / denoiser.value("weights", "model.safetensors");
    const SafeTensors saved = load_safetensors(weights);
    const at::Tensor* table = saved.find("embedding");
    if (table == nullptr) throw ModelError("'" + weights.string() + "' has no tensor 'embedding' (not a continuous denoiser)");
    classifier->set_noise_embedding(*table);
}

void Trainer::load_e2e() {
    network_config_ = c_.network;
    const auto records = read_e2e_csv(c_.train_file);
    if (!c_.vocab_file.empty()) {
        tokenizer_ = std::make_shared<WordTokenizer>(WordTokenizer::load(c_.vocab_file.string()));
    } else {
        // The meaning representations are tokenized with the same vocabulary, so they are part of it.
        std::vector<std::string> lines;
        lines.reserve(records.size() * 2);
        for (const auto& r : records) {
            lines.push_back(r.ref);
            lines.push_back(r.mr);
        }
        tokenizer_ = std::make_shared<WordTokenizer>(WordTokenizer::build(lines, c_.min_count));
    }
    train_ = encode_records(records, *tokenizer_, c_, conditional_);
    if (!c_.dev_file.empty()) dev_ = encode_records(read_e2e_csv(c_.dev_file), *tokenizer_, c_, conditional_);
}

void Trainer::build_network() {
    // The initial weights come from the default CPU generator: seeding it makes them a function of the seed.
    at::manual_seed(c_.seed);
    try {
        network_ = make_network(c_.kind, network_config_, *tokenizer_);
    } catch (const ConfigError& e) {
        std::vector<ConfigIssue> issues;
        for (const auto& issue : e.issues()) issues.push_back({"/network" + issue.pointer, issue.message});
        throw ConfigError(c_.source, std::move(issues));
    }
    if (controller_) copy_denoiser_embedding();
    network_->train();
    parameters_.clear();
    std::vector<at::Tensor> decay, no_decay;
    for (const auto& item : network_->named_parameters()) {
        parameters_.emplace_back(item.key(), item.value());
        // Weight decay on matrices only: biases and LayerNorm gains are not decayed.
        (item.value().dim() >= 2 ? decay : no_decay).push_back(item.value());
    }
    auto options = [&](double weight_decay) {
        return torch::optim::AdamWOptions(c_.lr).betas({0.9, 0.98}).eps(1e-8).weight_decay(weight_decay);
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options(c_.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    optimizer_ = std::make_unique<torch::optim::AdamW>(std::move(groups), options(c_.weight_decay));
}

void Trainer::write_checkpoint(int64_t step) {
    std::error_code ec;
    fs::create_directories(checkpoint_dir_, ec);
    if (ec) throw ModelError("cannot create '" + checkpoint_dir_.string() + "': " + ec.message());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [name, tensor] : nn::module_tensors(*network_)) tensors.emplace_back("network." + name, tensor);
    for (const auto& [name, p] : parameters_) {
        auto it = optimizer_->state().find(state_key(p));
        if (it == optimizer_->state().end()) continue;  // a parameter that never had a gradient
        const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        tensors.emplace_back("adam." + name + ".exp_avg", s.exp_avg());
        tensors.emplace_back("adam." + name + ".exp_avg_sq", s.exp_avg_sq());
        tensors.emplace_back("adam." + name + ".step", at::scalar_tensor(s.step(), at::kLong));
    }
    // The weights go to a new file first; state.json, written last, is what names the current one. A crash at any
    // point leaves a state.json that names a complete file.
    char name[64];
    std::snprintf(name, sizeof name, "checkpoint-%09lld.safetensors", static_cast<long long>(step));
    save_safetensors(checkpoint_dir_ / name, tensors, {{"step", std::to_string(step)}});
    const fs::path state_file = checkpoint_dir_ / "state.json";
    std::string previous;
    if (fs::exists(state_file, ec)) previous = read_json_file(state_file).value("weights", "");
    const json state = {{"step", step},
                        {"data_position", step * c_.batch_size},
                        {"examples", static_cast<int64_t>(train_.examples.size())},
                        {"seconds", seconds_before_ + run_seconds_},
                        {"weights", name},
                        {"data_fingerprint", fingerprint_},
                        {"identity", c_.identity()}};
    write_atomically(checkpoint_dir_ / "vocab.txt", vocab_text(*tokenizer_));
    write_atomically(state_file, state.dump(2) + "\n");
    if (!previous.empty() && previous != name) fs::remove(checkpoint_dir_ / previous, ec);
}

void Trainer::resume(const json& state) {
    const fs::path state_file = checkpoint_dir_ / "state.json";
    if (state.value("data_fingerprint", "") != fingerprint_)
        throw ModelError("the training data or vocabulary changed since the checkpoint in '" + checkpoint_dir_.string() +
                         "' was written; delete it to start over");
    if (!state.at("step").is_number_integer() || state.at("step").get<int64_t>() < 0 ||
        state.at("step").get<int64_t>() > c_.steps)
        throw ModelError("'" + state_file.string() + "': step " + state.at("step").dump() + " is not in [0, " +
                         std::to_string(c_.steps) + "]");
    start_step_ = state.at("step").get<int64_t>();
    seconds_before_ = state.value("seconds", 0.0);
    const fs::path weights = checkpoint_dir_ / state.value("weights", "");
    const SafeTensors saved = load_safetensors(weights);
    nn::load_module_tensors(*network_, saved, weights, "network.");
    for (const auto& [name, p] : parameters_) {
        const at::Tensor* exp_avg = saved.find("adam." + name + ".exp_avg");
        const at::Tensor* exp_avg_sq = saved.find("adam." + name + ".exp_avg_sq");
        const at::Tensor* step = saved.find("adam." + name + ".step");
        if (!exp_avg && !exp_avg_sq && !step) continue;
        if (!exp_avg || !exp_avg_sq || !step || exp_avg->sizes() != p.sizes() || exp_avg_sq->sizes() != p.sizes() ||
            step->numel() != 1 || step->scalar_type() != at::kLong)
            throw SafeTensorsError("'" + weights.string() + "': incomplete or misshapen optimizer state for '" + name + "'");
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(step->item<int64_t>());
        s->exp_avg(exp_avg->clone());
        s->exp_avg_sq(exp_avg_sq->clone());
        optimizer_->state()[state_key(p)] = std::move(s);
    }
    say("resuming from the checkpoint at step " + std::to_string(start_step_) + " in '" + checkpoint_dir_.string() + "'");
}

void Trainer::start_from_model(bool load_weights) {
    // Steps behind the weights: the model's own, plus those of the model it started from, if any.
    const json config = read_json_file(c_.init_from / "config.json");
    if (const auto training = config.find("training"); training != config.end() && training->is_object()) {
        init_steps_ = training->value("steps", int64_t{0});
        if (const auto earlier = training->find("init_from"); earlier != training->end() && earlier->is_object())
            init_steps_ += earlier->value("steps", int64_t{0});
    }
    if (!load_weights) return;
    const fs::path weights = c_.init_from / "model.safetensors";
    const SafeTensors saved = load_safetensors(weights);
    // The trainer stamps every model's weights with its kind.
    const auto kind = saved.metadata.find("rudder_kind");
    const std::string held = kind != saved.metadata.end() ? kind->second : "?";
    if (held != c_.kind)
        throw ModelError("training.init_from: '" + c_.init_from.string() + "' holds a " + held +
                         " model; this config trains a " + c_.kind);
    nn::load_module_tensors(*network_, saved, weights, "");
    say("starting from the weights of '" + c_.init_from.string() + "' (trained for " + std::to_string(init_steps_) +
        " steps)");
}

double Trainer::dev_loss() {
    at::NoGradGuard no_grad;
    network_->eval();
    auto* classifier = dynamic_cast<nn::SyntaxClassifierNet*>(network_.get());
    const bool attribute = classifier != nullptr && !classifier->classes().empty();
    double sum = 0.0;
    int64_t rows_done = 0, correct = 0;
    const auto n = static_cast<int64_t>(dev_.examples.size());
    for (int64_t start = 0, index = 0; start < n; start += c_.batch_size, ++index) {
        std::vector<int64_t> rows;
        for (int64_t i = start; i < std::min(n, start + c_.batch_size); ++i) rows.push_back(i);
        const nn::TrainingBatch batch = batch_of(dev_, rows);
        // The same noise at every evaluation, so dev losses are comparable across steps.
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(derived_seed(c_.seed, Stream::dev, static_cast<uint64_t>(index)));
        sum += network_->loss(batch, gen).item<double>() * static_cast<double>(rows.size());
        rows_done += static_cast<int64_t>(rows.size());
        if (attribute) {
            at::Generator same = at::make_generator<at::CPUGeneratorImpl>(derived_seed(c_.seed, Stream::dev, static_cast<uint64_t>(index)));
            correct += classifier->predict_classes(batch.tokens, same).eq(batch.classes).sum().item<int64_t>();
        }
    }
    network_->train();
    if (attribute) last_dev_accuracy_ = static_cast<double>(correct) / static_cast<double>(rows_done);
    return sum / static_cast<double>(rows_done);
}

void Trainer::log_step(int64_t step, double loss, std::optional<double> dev, double lr) {
    const double rate = run_seconds_ > 0 ? static_cast<double>(step - start_step_) / run_seconds_ : 0.0;
    char dev_text[32] = "";
    if (dev) std::snprintf(dev_text, sizeof dev_text, "  dev %.4f", *dev);
    if (dev && last_dev_accuracy_)
        std::snprintf(dev_text + std::strlen(dev_text), sizeof dev_text - std::strlen(dev_text), " (accuracy %.3f)", *last_dev_accuracy_);
    char line[256];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f%s  lr %.2e  %.2f steps/s  ETA %s",
                  static_cast<long long>(step), static_cast<long long>(c_.steps), loss, dev_text, lr, rate,
                  rate > 0 ? duration_text(static_cast<double>(c_.steps - step) / rate).c_str() : "?");
    say(line);
    const json entry = {{"step", step},
                        {"loss", loss},
                        {"dev_loss", dev ? json(*dev) : json(nullptr)},
                        {"dev_accuracy", dev && last_dev_accuracy_ ? json(*last_dev_accuracy_) : json(nullptr)},
                        {"lr", lr},
                        {"seconds", seconds_before_ + run_seconds_}};
    std::ofstream log(c_.out / "train_log.jsonl", std::ios::app);
    log << entry.dump() << "\n";
    if (!log) throw ModelError("cannot append to '" + (c_.out / "train_log.jsonl").string() + "'");
}

void Trainer::write_model(const TrainResult& result) {
    const bool denoiser = is_denoiser_kind(c_.kind);
    const json network = network_->config();
    json families = json::array();
    if (denoiser) families.push_back(c_.kind);
    if (controller_) families.push_back(network.at("family"));
    json config = {{"format_version", kModelFormatVersion},
                   {"type", denoiser ? "transformer" : c_.kind},
                   {"families", families},
                   {"tokenizer", {{"type", "word"}, {"vocab", "vocab.txt"}}},
                   {"weights", "model.safetensors"},
                   {"network", network}};
    // The sampler reads the noise schedule from the top level; the network's config holds the one it learned.
    for (const char* key : {"schedule", "mask_schedule"})
        if (denoiser && network.contains(key)) config[key] = network.at(key);
    config["training"] = {{"steps", result.step},
                          {"seed", c_.seed},
                          {"texts", result.texts},
                          {"final_loss", result.last_loss},
                          {"dev_loss", result.dev_loss ? json(*result.dev_loss) : json(nullptr)},
                          {"seconds", seconds_before_ + run_seconds_}};
    if (!c_.init_from.empty())
        config["training"]["init_from"] = {{"model", c_.init_from.string()}, {"steps", init_steps_}};
    if (controller_) config["denoiser"] = c_.denoiser.filename().string();
    if (last_dev_accuracy_) config["training"]["dev_accuracy"] = *last_dev_accuracy_;
    write_atomically(c_.out / "vocab.txt", vocab_text(*tokenizer_));
    save_safetensors(c_.out / "model.safetensors", nn::module_tensors(*network_),
                     {{"format", "pt"}, {"rudder_kind", c_.kind}, {"step", std::to_string(result.step)}});
    // config.json last: a directory with one holds a complete model.
    write_atomically(c_.out / "config.json", config.dump(2) + "\n");
    std::error_code ec;
    fs::remove_all(checkpoint_dir_, ec);
}

TrainResult Trainer::run() {
    set_compute_threads(static_cast<int>(c_.threads));
    conditional_ = is_denoiser_kind(c_.kind);
    syntax_ = is_syntax_kind(c_.kind);
    controller_ = is_controller_kind(c_.kind);
    prepare_out_dir();
    const std::optional<json> state = find_checkpoint();
    load_data();
    build_network();
    // A resumed run's weights come from its checkpoint; init_from is still read for its kind and step count.
    if (!c_.init_from.empty()) start_from_model(/*load_weights=*/!state);
    if (state) resume(*state);

    // The log keeps the entries up to the step training starts from; a fresh run starts a fresh log.
    {
        const fs::path log_file = c_.out / "train_log.jsonl";
        std::string kept;
        std::error_code ec;
        if (state && fs::exists(log_file, ec)) {
            for (const auto& line : read_lines(log_file)) {
                try {
                    if (!line.empty() && json::parse(line).value("step", int64_t{0}) <= start_step_) kept += line + "\n";
                } catch (const json::exception&) {
                    // A line cut short by a crash: dropped.
                }
            }
        }
        write_atomically(log_file, kept);
    }

    TrainResult result;
    result.resumed_from = start_step_;
    result.texts = static_cast<int64_t>(train_.examples.size());
    result.dropped_too_long = train_.dropped_too_long + train_.dropped_condition;
    result.vocab_size = tokenizer_->vocab_size();
    for (const auto& [name, p] : parameters_) result.parameters += p.numel();
    {
        std::ostringstream line;
        const char* unit = syntax_ ? " sentences" : " texts";
        line << "training " << c_.kind << ": " << result.texts << unit;
        if (train_.dropped_too_long) line << ", " << train_.dropped_too_long << " dropped (longer than max_length " << c_.max_length << ")";
        if (train_.dropped_condition)
            line << ", " << train_.dropped_condition << " dropped (meaning representation longer than max_condition_length "
                 << c_.max_condition_length << ")";
        if (train_.dropped_empty) line << ", " << train_.dropped_empty << " empty";
        line << "; vocabulary " << result.vocab_size << "; " << result.parameters << " parameters; " << c_.threads
             << " thread" << (c_.threads == 1 ? "" : "s");
        if (syntax_ || controller_) {
            const json& net = network_->config();
            if (c_.kind == "attribute_classifier")
                line << "; classes " << net.at("classes").dump() << ", " << train_.dropped_unlabelled
                     << " texts with no class dropped" << (net.value("noise", true) ? "" : "; clean text (no noise)");
            else if (controller_)
                line << "; " << net.at("tags").size() << " tags, " << net.at("labels").size() << " span labels";
            else if (c_.kind == "tagger")
                line << "; " << net.at("tags").size() << " PTB tags, " << net.at("upos").size() << " universal tags";
            else
                line << "; " << net.at("labels").size() << " span labels (unary chains joined with '+')";
        }
        if (!dev_.examples.empty()) line << "; dev loss on " << dev_.examples.size() << unit << " every " << c_.dev_every << " steps";
        if (dev_.unknown_labels)
            line << " (" << dev_.unknown_labels << " dev " << (c_.kind == "tagger" ? "tags" : "constituents")
                 << " with labels the training data lacks are not scored)";
        say(line.str());
    }

    const auto n = static_cast<int64_t>(train_.examples.size());
    int64_t epoch = -1;
    std::vector<int64_t> order;
    double loss_sum = 0.0;
    int64_t loss_count = 0;
    const auto started = std::chrono::steady_clock::now();
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(c_.seed);
    for (int64_t step = start_step_ + 1; step <= c_.steps; ++step) {
        // The batch: the next batch_size examples of the epochs' shuffled orders, which run on into each other.
        std::vector<int64_t> rows;
        for (int64_t position = (step - 1) * c_.batch_size; position < step * c_.batch_size; ++position) {
            if (position / n != epoch) {
                epoch = position / n;
                order = epoch_order(n, c_.seed, epoch);
            }
            rows.push_back(order[static_cast<size_t>(position % n)]);
        }
        nn::TrainingBatch batch = batch_of(train_, rows);
        gen.set_current_seed(derived_seed(c_.seed, Stream::step, static_cast<uint64_t>(step)));
        const double lr = learning_rate(c_, step);
        for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
        optimizer_->zero_grad();
        const at::Tensor loss = network_->loss(batch, gen);
        const double loss_value = loss.item<double>();
        if (!std::isfinite(loss_value))
            throw std::runtime_error("the training loss is " + std::to_string(loss_value) + " at step " + std::to_string(step) +
                                     " (try a lower training.lr or a training.grad_clip)");
        loss.backward();
        if (c_.grad_clip > 0) clip_gradients(network_->parameters(), c_.grad_clip);
        optimizer_->step();
        loss_sum += loss_value;
        ++loss_count;
        run_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

        std::optional<double> dev;
        if (!dev_.examples.empty() && (step % c_.dev_every == 0 || step == c_.steps)) last_dev_ = dev = dev_loss();
        if (step % c_.log_every == 0 || step == c_.steps || step == o_.stop_after) {
            result.last_loss = loss_sum / static_cast<double>(loss_count);
            log_step(step, result.last_loss, dev, lr);
            loss_sum = 0.0;
            loss_count = 0;
        }
        result.step = step;
        const bool stopping = step == o_.stop_after && step < c_.steps;
        if (stopping || (c_.checkpoint_every > 0 && step % c_.checkpoint_every == 0 && step < c_.steps)) write_checkpoint(step);
        if (stopping) {
            say("stopped after step " + std::to_string(step) + " as asked; the checkpoint in '" + checkpoint_dir_.string() +
                "' resumes it");
            break;
        }
    }
    if (loss_count > 0) result.last_loss = loss_sum / static_cast<double>(loss_count);
    result.step = std::max(result.step, start_step_);
    result.dev_loss = last_dev_;
    result.seconds = run_seconds_;
    result.steps_per_second = run_seconds_ > 0 ? static_cast<double>(result.step - start_step_) / run_seconds_ : 0.0;
    if (result.step < c_.steps) return result;

    write_model(result);
    result.finished = true;
    std::error_code ec;
    say("wrote model '" + c_.out.string() + "' (" + std::to_string(fs::file_size(c_.out / "model.safetensors", ec) / 1024) +
        " KB of weights) after " + duration_text(seconds_before_ + run_seconds_) + " of training");
    return result;
}

}  // namespace

bool is_controller_kind(const std::string& kind) { return kind == "syntax_classifier" || kind == "attribute_classifier"; }

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
    // The vocabulary itself is checked through the data fingerprint; min_count only matters when it is built.
    if (vocab_file.empty()) id["tokenizer"] = {{"min_count", min_count}};
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
    root.text("description").value_or("");
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

    ObjectReader tokenizer(root.object("tokenizer").value_or(json::object()), "/tokenizer", issues);
    c.vocab_file = input_file(tokenizer, "vocab", false, base_dir);
    c.min_count = tokenizer.integer("min_count", 1, kMaxCount).value_or(1);
    if (controller && j.contains("tokenizer"))
        root.issue("tokenizer", "the " + c.kind + " uses its denoiser's vocabulary; leave the tokenizer out");
    if (controller) {
        c.denoiser = resolve(base_dir, root.text("denoiser", json_input::kRequired).value_or(""));
        std::error_code ec;
        if (!fs::is_regular_file(c.denoiser / "config.json", ec) || !fs::is_regular_file(c.denoiser / "vocab.txt", ec))
            root.issue("denoiser", "'" + c.denoiser.string() + "' is not a trained denoiser directory (config.json, vocab.txt)");
        c.vocab_file = c.denoiser / "vocab.txt";
    } else if (root.has("denoiser")) {
        root.issue("denoiser", "applies to the controller kinds (syntax_classifier, attribute_classifier); the " + c.kind +
                                   " has none");
    }
    if (tokenizer.has("vocab") && tokenizer.has("min_count"))
        tokenizer.issue("min_count", "applies only when the vocabulary is built; give \"vocab\" or \"min_count\", not both");
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
    if (const std::string init = training.text("init_from").value_or(""); !init.empty()) {
        c.init_from = resolve(base_dir, init);
        std::error_code ec;
        if (!fs::is_regular_file(c.init_from / "config.json", ec) || !fs::is_regular_file(c.init_from / "model.safetensors", ec))
            training.issue("init_from", "'" + c.init_from.string() + "' is not a trained model directory (config.json and "
                                        "model.safetensors)");
        else if (c.vocab_file.empty() && fs::is_regular_file(c.init_from / "vocab.txt", ec))
            c.vocab_file = c.init_from / "vocab.txt";
        if (tokenizer.has("min_count") && !tokenizer.has("vocab"))
            tokenizer.issue("min_count", "the vocabulary comes from training.init_from; leave min_count out");
    }
    if (!denoiser && c.condition_dropout > 0)
        training.issue("condition_dropout", "applies to the denoiser kinds; the " + c.kind + " is unconditional (use 0)");
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
            const json cond_length = fill_in("max_condition_length", c.max_condition_length, root.has("max_condition_length"),
                                             "the top-level max_condition_length");
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
    std::ifstream in(file, std::ios::binary);
    if (!in) throw ConfigError(file.string(), {{"", "cannot read the file"}});
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {  // parse errors, and numbers beyond double's range ("1e999")
        throw ConfigError(file.string(), {{"", std::string("not valid JSON: ") + e.what()}});
    }
    return parse_train_config(j, file.parent_path(), file.string());
}

TrainResult train(const TrainConfig& config, const TrainOptions& options) {
    Trainer trainer(config, options);
    return trainer.run();
}

}  // namespace rudder::train
