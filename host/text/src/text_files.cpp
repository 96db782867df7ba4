#include <rudder/text/text_files.hpp>

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>
#include <zlib.h>

#include <memory>
#include <stdexcept>

namespace rudder {
namespace {

// The whole file as bytes; gzip is detected by name. zlib's gz* functions also read plain files unchanged.
std::string read_all(const std::filesystem::path& file) {
    std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(file.c_str(), "rb"), &gzclose);
    if (!in) throw std::runtime_error("cannot read '" + file.string() + "'");
    std::string data;
    char buf[1 << 16];
    for (;;) {
        const int n = gzread(in.get(), buf, sizeof buf);
        if (n < 0) {
            int err = 0;
            throw std::runtime_error("cannot read '" + file.string() + "': " + gzerror(in.get(), &err));
        }
        if (n == 0) break;
        data.append(buf, static_cast<size_t>(n));
    }
    return data;
}

}  // namespace

std::vector<std::string> read_lines(const std::filesystem::path& file) {
    const std::string data = read_all(file);
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < data.size()) {
        size_t end = data.find('\n', start);
        if (end == std::string::npos) end = data.size();
        std::string line = data.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(std::move(line));
        start = end + 1;
    }
    return lines;
}

std::vector<E2ERecord> read_e2e_csv(const std::filesystem::path& file) {
    const std::string data = read_all(file);
    // A small RFC 4180 reader: fields separated by commas, quoted fields may contain commas, newlines and "".
    std::vector<std::vector<std::string>> rows(1);
    std::string field;
    bool quoted = false, field_started = false;
    for (size_t i = 0; i < data.size(); ++i) {
        const char c = data[i];
        if (quoted) {
            if (c == '"' && i + 1 < data.size() && data[i + 1] == '"') {
                field += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                field += c;
            }
        } else if (c == '"' && !field_started) {
            quoted = field_started = true;
        } else if (c == ',') {
            rows.back().push_back(std::move(field));
            field.clear();
            field_started = false;
        } else if (c == '\n' || c == '\r') {
            if (c == '\r' && i + 1 < data.size() && data[i + 1] == '\n') ++i;
            rows.back().push_back(std::move(field));
            field.clear();
            field_started = false;
            rows.emplace_back();
        } else {
            field += c;
            field_started = true;
        }
    }
    if (quoted) throw std::runtime_error("'" + file.string() + "': a quoted field is not closed");
    if (field_started || !rows.back().empty()) rows.back().push_back(std::move(field));
    if (rows.back().empty()) rows.pop_back();
    if (rows.empty() || rows[0].size() != 2 || rows[0][0] != "mr" || rows[0][1] != "ref")
        throw std::runtime_error("'" + file.string() + "' is not E2E CSV: the header must be \"mr,ref\"");
    std::vector<E2ERecord> out;
    out.reserve(rows.size() - 1);
    for (size_t r = 1; r < rows.size(); ++r) {
        if (rows[r].size() != 2)
            throw std::runtime_error("'" + file.string() + "': record " + std::to_string(r) + " has " +
                                     std::to_string(rows[r].size()) + " fields, expected 2");
        out.push_back({std::move(rows[r][0]), std::move(rows[r][1])});
    }
    return out;
}

std::vector<std::string> read_texts(const std::filesystem::path& file) {
    if (file.filename().string().find(".csv") != std::string::npos) {
        std::vector<std::string> refs;
        for (auto& record : read_e2e_csv(file)) refs.push_back(std::move(record.ref));
        return refs;
    }
    const std::vector<std::string> lines = read_lines(file);
    auto blank = [](const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; };
    bool jsonl = false;
    for (const auto& line : lines) {
        if (blank(line)) continue;
        jsonl = line[line.find_first_not_of(" \t")] == '{';
        break;
    }
    std::vector<std::string> texts;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (blank(lines[i])) continue;
        if (!jsonl) {
            texts.push_back(lines[i]);
            continue;
        }
        const std::string where = file.string() + ":" + std::to_string(i + 1) + ": ";
        nlohmann::json record;
        try {
            record = json_input::parse(lines[i], json_input::kMaxDepth, false);  // texts may hold any character
        } catch (const std::exception& e) {  // nlohmann's parse errors, and json_input::TooDeep
            throw std::runtime_error(where + "not valid JSON (the file's first line made it JSON Lines): " + e.what());
        }
        if (!record.is_object() || !record.contains("text") || !record.at("text").is_string())
            throw std::runtime_error(where + "expected an object with a \"text\" string");
        texts.push_back(record.at("text").get<std::string>());
    }
    return texts;
}

}  // namespace rudder
