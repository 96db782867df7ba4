// Reading the text data Rudder trains and builds models from: plain or gzip-compressed lines, and E2E's CSV.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace rudder {

// The most bytes Rudder reads from a file it parses whole by name: a recipe, a model's config.json, a safetensors
// index, an evaluation suite, a training config (16 MiB; the largest real ones are a few hundred KB), and a
// tokenizer's files (256 MiB; Hugging Face's largest tokenizer.json files are tens of MB).
constexpr uint64_t kMaxConfigFileBytes = uint64_t{16} << 20;
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;

// The whole of `file`, which must be a regular file of at most `max_bytes`: a FIFO, a device (/dev/zero), a socket or
// a folder is refused before anything is read (it is opened without blocking), and so is a larger file, before it is
// read into memory. Throws std::runtime_error naming the file (as "<what> '<file>'") and the reason.
std::string read_small_file(const std::filesystem::path& file, uint64_t max_bytes, const std::string& what = "");

// "16 MiB", "1.5 GiB", "300 bytes": a size limit as messages state it.
std::string byte_size_text(uint64_t bytes);

// Every line of a text file; a name ending in ".gz" is decompressed on the fly. Throws std::runtime_error naming
// the file when it cannot be read.
std::vector<std::string> read_lines(const std::filesystem::path& file);

// One E2E record: a meaning representation ("name[The Eagle], food[French]") and a human-written text.
struct E2ERecord {
    std::string mr;
    std::string ref;
};

// E2E's CSV (header "mr,ref", RFC 4180 quoting, quoted fields may hold newlines), plain or .gz. Throws
// std::runtime_error naming the file and record on a malformed file.
std::vector<E2ERecord> read_e2e_csv(const std::filesystem::path& file);

// The texts of a file, by what it holds: the `ref` column of E2E CSV when the name contains ".csv" (plain or .gz);
// JSON Lines with a "text" string field (as `rudder generate` writes) when the first non-blank line starts with
// '{'; otherwise one text per non-blank line. Throws std::runtime_error naming the file and line on a malformed
// JSON line.
std::vector<std::string> read_texts(const std::filesystem::path& file);

}  // namespace rudder
