#include "data.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/syntax/annotator.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/tree.hpp>
#include <rudder/text/treebank.hpp>
#include <rudder/text/words.hpp>
#include "networks.hpp"

namespace rudder::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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
        if (a.tree.empty()) throw std::runtime_error(where + ": no tree (annotate with the parser, not --tags-only)");
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

// Where each field of a meaning representation lies in its encoding: (start, end) pairs, in order. Throws
// std::runtime_error for a representation that is not fields, or a field the tokenizer encodes differently on its own
// (field dropout would then train on conditions a controller cannot write).
std::vector<int64_t> field_spans(const Tokenizer& tokenizer, const std::string& mr,
                                 const std::vector<int64_t>& condition) {
    std::vector<meaning::Field> fields;
    try {
        fields = meaning::parse(mr);
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error("training.field_dropout: meaning representation '" + mr + "': " + e.what());
    }
    std::vector<int64_t> spans;
    auto from = condition.begin();
    for (const auto& field : fields) {
        const std::string text = field.attribute + "[" + field.value + "]";
        const std::vector<int64_t> encoded = tokenizer.encode(text);
        const auto at = std::search(from, condition.end(), encoded.begin(), encoded.end());
        if (encoded.empty() || at == condition.end())
            throw std::runtime_error("training.field_dropout: the field '" + text + "' of '" + mr +
                                     "' is not encoded on its own as within the whole representation");
        spans.push_back(at - condition.begin());
        spans.push_back(at - condition.begin() + static_cast<int64_t>(encoded.size()));
        from = at + static_cast<std::ptrdiff_t>(encoded.size());
    }
    return spans;
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
            if (config.field_dropout > 0) e.field_spans = field_spans(tokenizer, record.mr, e.condition);
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
        if (e.prompt_length > 0) add(static_cast<uint64_t>(e.prompt_length));
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
    return text;
}

void load_treebanks(const TrainConfig& c, TrainingData& d) {
    const auto sentences = syntax::read_treebank(c.train_file);
    if (c.kind == "parser")
        for (const auto& s : sentences)
            if (!s.has_tree) throw std::runtime_error(s.source + ": the parser needs constituency trees");
    std::shared_ptr<WordTokenizer> words;
    if (!c.vocab_file.empty()) {
        words = std::make_shared<WordTokenizer>(WordTokenizer::load(c.vocab_file.string()));
    } else {
        std::vector<std::string> keys;
        for (const auto& s : sentences)
            for (const auto& w : s.words) keys.push_back(syntax::word_key(w));
        words = std::make_shared<WordTokenizer>(WordTokenizer::from_words(keys, c.min_count));
    }
    d.tokenizer = words;
    const TreebankLabels labels = collect_labels(sentences);
    d.network_config = c.network;
    std::vector<ConfigIssue> issues;
    for (const char* key : {"tags", "upos", "labels"})
        if (d.network_config.contains(key))
            issues.push_back({std::string("/network/") + key, "filled in from the training data; leave it out"});
    if (!issues.empty()) throw ConfigError(c.source, std::move(issues));
    if (c.kind == "tagger") {
        d.network_config["tags"] = labels.tags.names;
        d.network_config["upos"] = labels.upos.names;
    } else {
        d.network_config["labels"] = labels.chains.names;
    }
    const int64_t buckets = d.network_config.value("buckets", int64_t{8192});
    if (buckets < 2) throw ConfigError(c.source, {{"/network/buckets", "expected an integer >= 2"}});
    d.train = encode_treebank(sentences, *words, labels, c.kind, buckets, c.max_length);
    if (!c.dev_file.empty())
        d.dev = encode_treebank(syntax::read_treebank(c.dev_file), *words, labels, c.kind, buckets, c.max_length);
}

// The mdlm kind's tokenizer: the BPE tokenizer.json with "<|endoftext|>" as its padding (the end of a text), and
// the mask after its last id, as the runtime reads an MDLM checkpoint's.
std::shared_ptr<const Tokenizer> hub_tokenizer(const TrainConfig& c) {
    std::error_code ec;
    if (!fs::is_regular_file(c.tokenizer_file, ec))
        throw ConfigError(c.source, {{"/tokenizer/file", "no such file '" + c.tokenizer_file.string() +
                                                             "' (scripts/train_bpe_tokenizer.mjs trains one on the "
                                                             "texts of `rudder train CONFIG --texts-out FILE`)"}});
    return bpe_tokenizer_with_mask(c.tokenizer_file, "<|endoftext|>", "<mask>");
}

// The denoiser's network settings a classifier must share (its family, vocabulary and noise): a Rudder denoiser's
// config.json "network", or those of a Hugging Face MDLM checkpoint (config.cpp took its tokenizer.json): absorbing
// noise on MDLM's log-linear schedule, the mask after the tokenizer's last id.
json denoiser_settings(const TrainConfig& c, const Tokenizer& tokenizer) {
    const fs::path file = c.denoiser / "config.json";
    const json denoiser = read_json_file(file);
    if (c.tokenizer_file.empty()) {
        if (denoiser.value("type", "") != "transformer" || !denoiser.contains("network") ||
            !denoiser.at("network").is_object())
            throw ModelError("'" + c.denoiser.string() +
                             "' is not a trained denoiser (config.json \"type\": \"transformer\")");
        return denoiser.at("network");
    }
    if (!nn::is_dit_checkpoint_config(denoiser))
        throw ModelError("'" + file.string() + "' is neither a Rudder denoiser's config (with vocab.txt) nor an MDLM " +
                         "checkpoint's (\"model_type\": \"mdlm\")");
    const nn::DitConfig dit = nn::parse_dit_config(denoiser, file);
    if (dit.flavor != nn::DitFlavor::mdlm)
        throw ModelError("'" + c.denoiser.string() + "' is a " + nn::dit_flavor_name(dit.flavor) +
                         " checkpoint; a classifier learns MDLM's noise (every position masked independently on the "
                         "log-linear schedule), which only MDLM checkpoints sample with");
    if (dit.vocab_size != tokenizer.vocab_size())
        throw ModelError("'" + c.tokenizer_file.string() + "' has " + std::to_string(tokenizer.vocab_size() - 1) +
                         " tokens and the mask, but the network of '" + file.string() + "' has " +
                         std::to_string(dit.vocab_size) + " rows: another tokenizer than the one it was trained with");
    if (c.max_length > dit.max_length)
        throw ConfigError(c.source,
                          {{"/max_length", "at most the denoiser's model_length (" + std::to_string(dit.max_length) +
                                               "), got " + std::to_string(c.max_length)}});
    return {{"family", "discrete"}, {"vocab_size", dit.vocab_size}, {"mask_schedule", {{"eps", dit.schedule_eps}}}};
}

void load_annotations(const TrainConfig& c, TrainingData& d) {
    if (c.tokenizer_file.empty())
        d.tokenizer = std::make_shared<WordTokenizer>(WordTokenizer::load(c.vocab_file.string()));
    else
        d.tokenizer = hub_tokenizer(c);
    // The family and the noise are the denoiser's: the classifier must see what the sampler will hand it.
    const json settings = denoiser_settings(c, *d.tokenizer);
    d.network_config = c.network;
    std::vector<ConfigIssue> issues;
    for (const char* key : {"family", "vocab_size", "embed_dim", "schedule", "mask_schedule", "objective", "graph",
                            "uniform_schedule", "tags", "labels", "classes"}) {
        if (d.network_config.contains(key)) {
            issues.push_back(
                {std::string("/network/") + key, "filled in from the denoiser and the data; leave it out"});
            continue;
        }
        if (settings.contains(key)) d.network_config[key] = settings.at(key);
    }
    if (!issues.empty()) throw ConfigError(c.source, std::move(issues));
    if (c.kind == "attribute_classifier") {
        std::vector<std::string> classes;
        for (const auto& item : c.attribute.at("classes").items()) classes.push_back(item.key());
        d.network_config["classes"] = classes;
        d.train = encode_attribute(read_e2e_csv(c.train_file), *d.tokenizer, c.attribute, classes, c.max_length);
        if (!c.dev_file.empty())
            d.dev = encode_attribute(read_e2e_csv(c.dev_file), *d.tokenizer, c.attribute, classes, c.max_length);
        return;
    }
    TreebankLabels labels;
    d.train = encode_annotations(c.train_file, *d.tokenizer, labels, /*grow=*/true, c.max_length);
    if (!c.dev_file.empty()) d.dev = encode_annotations(c.dev_file, *d.tokenizer, labels, /*grow=*/false, c.max_length);
    d.network_config["tags"] = labels.tags.names;
    d.network_config["labels"] = labels.chains.names;
}

// An E2E row's prompted texts (meaning::prompted_texts); a meaning representation with no record is an error naming
// it.
std::vector<meaning::PromptedText> prompted_texts_of(const E2ERecord& record) {
    try {
        return meaning::prompted_texts(record.mr, record.ref);
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error("meaning representation '" + record.mr + "': " + e.what());
    }
}

// E2E rows as prompted texts: the prompt's tokens, the answer's, then the end-of-text token. Prompt and answer are
// encoded apart, as a prompt is encoded at sampling time before its answer exists.
Dataset encode_prompted(const std::vector<E2ERecord>& records, const Tokenizer& tokenizer, const TrainConfig& c) {
    Dataset data;
    for (const auto& record : records) {
        for (const auto& text : prompted_texts_of(record)) {
            Example e;
            e.tokens = tokenizer.encode(text.prompt);
            e.prompt_length = static_cast<int64_t>(e.tokens.size());
            const std::vector<int64_t> answer = tokenizer.encode(text.answer);
            if (answer.empty()) {
                ++data.dropped_empty;
                continue;
            }
            e.tokens.insert(e.tokens.end(), answer.begin(), answer.end());
            e.tokens.push_back(tokenizer.pad_id());
            if (static_cast<int64_t>(e.tokens.size()) > c.max_length) {
                ++data.dropped_too_long;
                continue;
            }
            data.examples.push_back(std::move(e));
        }
    }
    return data;
}

void load_prompted(const TrainConfig& c, TrainingData& d) {
    d.network_config = c.network;
    d.tokenizer = hub_tokenizer(c);
    d.train = encode_prompted(read_e2e_csv(c.train_file), *d.tokenizer, c);
    if (!c.dev_file.empty()) d.dev = encode_prompted(read_e2e_csv(c.dev_file), *d.tokenizer, c);
}

void load_e2e(const TrainConfig& c, TrainingData& d) {
    d.network_config = c.network;
    const auto records = read_e2e_csv(c.train_file);
    if (!c.vocab_file.empty()) {
        d.tokenizer = std::make_shared<WordTokenizer>(WordTokenizer::load(c.vocab_file.string()));
    } else {
        // The meaning representations are tokenized with the same vocabulary, so they are part of it.
        std::vector<std::string> lines;
        lines.reserve(records.size() * 2);
        for (const auto& r : records) {
            lines.push_back(r.ref);
            lines.push_back(r.mr);
        }
        d.tokenizer = std::make_shared<WordTokenizer>(WordTokenizer::build(lines, c.min_count));
    }
    d.train = encode_records(records, *d.tokenizer, c, is_denoiser_kind(c.kind));
    if (!c.dev_file.empty())
        d.dev = encode_records(read_e2e_csv(c.dev_file), *d.tokenizer, c, is_denoiser_kind(c.kind));
}

}  // namespace

TrainingData load_training_data(const TrainConfig& c, const std::function<void(const std::string&)>& say) {
    TrainingData d;
    const bool syntax = is_syntax_kind(c.kind);
    if (is_controller_kind(c.kind)) {
        load_annotations(c, d);
    } else if (syntax) {
        load_treebanks(c, d);
    } else if (is_hub_kind(c.kind)) {
        load_prompted(c, d);
    } else {
        load_e2e(c, d);
    }
    const std::string unit = syntax ? "sentence" : "text";
    if (d.train.dropped_misaligned > 0)
        say("dropped " + std::to_string(d.train.dropped_misaligned) +
            " annotated texts whose words are not the denoiser's tokens");
    if (d.train.examples.empty())
        throw std::runtime_error("'" + c.train_file.string() + "': no training " + unit +
                                 " is left after dropping the " + std::to_string(d.train.dropped_too_long) +
                                 " longer than max_length " + std::to_string(c.max_length));
    d.fingerprint = fingerprint(*d.tokenizer, d.train.examples);
    if (!c.dev_file.empty()) {
        if (static_cast<int64_t>(d.dev.examples.size()) > c.dev_max_texts)
            d.dev.examples.resize(static_cast<size_t>(c.dev_max_texts));
        if (d.dev.examples.empty())
            throw std::runtime_error("'" + c.dev_file.string() + "': no dev " + unit + " fits max_length");
    }
    return d;
}

std::string prompted_texts_jsonl(const TrainConfig& c, int64_t& count) {
    if (!is_hub_kind(c.kind))
        throw std::runtime_error("--texts-out applies to the mdlm kind; this config trains a " + c.kind);
    std::string out;
    count = 0;
    for (const auto& record : read_e2e_csv(c.train_file))
        for (const auto& text : prompted_texts_of(record)) {
            out += json{{"prompt", text.prompt}, {"answer", text.answer}}.dump() + "\n";
            ++count;
        }
    return out;
}

}  // namespace rudder::train
