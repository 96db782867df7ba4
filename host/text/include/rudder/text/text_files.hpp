// Reading the text data Rudder trains and builds models from: plain or gzip-compressed lines, and E2E's CSV.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace rudder {

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
