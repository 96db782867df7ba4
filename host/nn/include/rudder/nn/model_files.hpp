// Model directories: a folder with a config.json (a JSON object with "format_version" and "type") and the files it
// names. Diffusion models (runtime/model.hpp), the teacher, the tagger, the parser and the controllers' classifiers
// are all stored so; docs/models.md describes the format.
#pragma once

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include <rudder/text/tokenizer.hpp>

namespace rudder {

constexpr int kModelFormatVersion = 1;

// Every problem with a model directory or one of its files; the message names the file and the problem.
class ModelError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A JSON file's contents; ModelError naming the file if it cannot be read or parsed, is not a regular file or is
// larger than kMaxConfigFileBytes (rudder/text/text_files.hpp). nlohmann::json, keys sorted: configs and tables
// looked up by key (a weight index's weight_map names thousands of tensors; JsonDocument's lookups are linear).
nlohmann::json read_json_file(const std::filesystem::path& file);
// The same, keys in the file's order: a document (a recipe) rather than a table looked up by key.
JsonDocument read_json_document(const std::filesystem::path& file);

// `dir`/config.json: a JSON object of this format version. Throws ModelError naming the file.
nlohmann::json read_model_config(const std::filesystem::path& dir);
// The same check of a config already read from `file`: returns it, or throws ModelError naming the file.
nlohmann::json checked_model_config(nlohmann::json config, const std::filesystem::path& file);

// The string at `key` of `object` (a part of `file`'s config); ModelError "missing string" otherwise.
std::string config_string(const nlohmann::json& object, const std::string& key, const std::filesystem::path& file);

// A file a model's config.json names (`name`, e.g. its "weights"), inside the model's folder `dir`: an absolute
// path, or one that climbs out with "..", is a ModelError, so a model folder cannot make Rudder open, and quote in
// its messages, files elsewhere on the machine.
std::filesystem::path model_file(const std::filesystem::path& dir, const std::string& name);

// The word tokenizer config["tokenizer"] describes ({"type": "word", "vocab": "vocab.txt"}, the vocabulary file
// relative to `dir`). Throws ModelError naming the file and the problem.
std::shared_ptr<WordTokenizer> load_word_tokenizer(const nlohmann::json& config, const std::filesystem::path& dir);

// The tokenizer config["tokenizer"] describes: a word vocabulary (as load_word_tokenizer), or {"type": "bpe", "file":
// "tokenizer.json", "pad": TOKEN, "mask": TEXT}, a byte-level BPE tokenizer.json padded with its token `pad` and with
// the mask after its last id, written as `mask` (a classifier trained for a Hugging Face MDLM checkpoint reads its
// denoiser's tokenizer so, as the runtime reads the checkpoint's). Throws ModelError naming the file and the problem.
std::shared_ptr<const Tokenizer> load_model_tokenizer(const nlohmann::json& config, const std::filesystem::path& dir);

// A byte-level BPE tokenizer.json padded with its token `pad`, with the mask after its last id written as `mask`: how
// an MDLM checkpoint's tokenizer is read for training and for its classifiers. Throws what the BPE reader throws.
std::shared_ptr<const Tokenizer> bpe_tokenizer_with_mask(const std::filesystem::path& file, const std::string& pad,
                                                         const std::string& mask);

}  // namespace rudder
