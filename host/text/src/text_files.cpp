#include <rudder/text/text_files.hpp>

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace rudder {
namespace {

const char* file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a file of another kind";
}

// Closes a descriptor on every way out.
struct Descriptor {
    int fd;
    ~Descriptor() {
        if (fd >= 0) ::close(fd);
    }
};

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

std::string byte_size_text(uint64_t bytes) {
    static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    size_t unit = 0;
    while (value >= 1024 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024;
        ++unit;
    }
    char text[32];
    const bool whole = value == static_cast<double>(static_cast<uint64_t>(value));
    std::snprintf(text, sizeof text, whole ? "%.0f %s" : "%.1f %s", value, units[unit]);
    return text;
}

std::string read_small_file(const std::filesystem::path& file, uint64_t max_bytes, const std::string& what) {
    const std::string named = (what.empty() ? "" : what + " ") + "'" + file.string() + "'";
    const auto cannot_read = [&] { return std::runtime_error("cannot read " + named + ": " + std::strerror(errno)); };
    // O_NONBLOCK: opening a FIFO without a writer would wait for one forever; it is refused below instead.
    const Descriptor in{::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
    if (in.fd < 0) throw cannot_read();
    struct stat status {};
    if (::fstat(in.fd, &status) != 0) throw cannot_read();
    if (!S_ISREG(status.st_mode))
        throw std::runtime_error(named + " is " + file_kind(status.st_mode) + ": only regular files are read");
    const auto over = [&] {
        return std::runtime_error(named + " is larger than " + byte_size_text(max_bytes) + ", the most read from " +
                                  (what.empty() ? std::string("such a file") : "a " + what));
    };
    if (static_cast<uint64_t>(status.st_size) > max_bytes) throw over();
    std::string data;
    data.reserve(static_cast<size_t>(status.st_size));
    char buffer[1 << 16];
    for (;;) {
        const ssize_t n = ::read(in.fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw cannot_read();
        if (n == 0) break;
        if (data.size() + static_cast<size_t>(n) > max_bytes) throw over();  // it grew while being read
        data.append(buffer, static_cast<size_t>(n));
    }
    return data;
}

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
