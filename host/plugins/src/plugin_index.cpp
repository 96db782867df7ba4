// The plugin index: scanning a library in a child process, and the file that remembers what each scan found.
#include "plugin_index.hpp"

#include "child_process.hpp"

#include <rudder/base/paths.hpp>

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#ifndef RUDDER_VERSION
#error "RUDDER_VERSION must be defined by the build"
#endif

extern char** environ;

namespace rudder::plugins {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kIndexFormat = 1;
constexpr double kDefaultScanTimeout = 10.0;
constexpr size_t kMaxResultBytes = 64 << 20;  // a result is a few KB; more is a broken child
constexpr size_t kMaxStderrBytes = 4096;      // the tail of what the child printed, for the reason

// Validation depends on the host's ABI and checks: an index written by another host version is not trusted.
std::string host_tag() {
    return "rudder " RUDDER_VERSION " abi " + std::to_string(RUDDER_ABI_MAJOR) + "." + std::to_string(RUDDER_ABI_MINOR);
}

// An open file descriptor, closed on every path out.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }
    int get() const { return fd_; }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

// A pipe whose ends are close-on-exec and numbered above 3, so that dup2 onto 2 or 3 in the child always makes a
// fresh, inheritable descriptor.
bool make_pipe(Fd& read_end, Fd& write_end) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    Fd a(fds[0]), b(fds[1]);
    const int r = ::fcntl(a.get(), F_DUPFD_CLOEXEC, 10), w = ::fcntl(b.get(), F_DUPFD_CLOEXEC, 10);
    if (r < 0 || w < 0) {
        if (r >= 0) ::close(r);
        if (w >= 0) ::close(w);
        return false;
    }
    read_end.reset(r);
    write_end.reset(w);
    return true;
}

// The last non-empty line of what the child printed, for the reason ("" if none).
std::string last_line(const std::string& text) {
    std::istringstream lines(text);
    std::string line, last;
    while (std::getline(lines, line))
        if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    if (last.size() > 200) last = last.substr(0, 200) + "...";
    return last;
}

ScanResult rejected(std::string reason) {
    ScanResult result;
    result.reason = std::move(reason);
    return result;
}

// The fields of a file that change when it is rewritten or replaced.
struct FileKey {
    uint64_t size = 0, inode = 0, device = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    json to_json() const {
        return {{"size", size}, {"inode", inode}, {"device", device}, {"mtime_ns", mtime_ns}, {"ctime_ns", ctime_ns}};
    }
};

bool file_key(const fs::path& file, FileKey& key) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) return false;
    key.size = static_cast<uint64_t>(st.st_size);
    key.inode = static_cast<uint64_t>(st.st_ino);
    key.device = static_cast<uint64_t>(st.st_dev);
    key.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    key.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
    return true;
}

}  // namespace

json scan_result_to_json(const ScanResult& result) {
    if (!result.ok) return {{"ok", false}, {"reason", result.reason}};
    json controllers = json::array();
    for (const auto& c : result.controllers)
        controllers.push_back({{"id", c.id},
                               {"version", c.version},
                               {"description", c.description},
                               {"capabilities", c.capabilities},
                               {"abi_major", c.abi_major},
                               {"abi_minor", c.abi_minor}});
    return {{"ok", true}, {"plugin", result.plugin}, {"sha256", result.sha256}, {"controllers", controllers}};
}

ScanResult scan_result_from_json(const json& j) {
    ScanResult result;
    result.ok = j.at("ok").get<bool>();
    if (!result.ok) {
        result.reason = j.at("reason").get<std::string>();
        return result;
    }
    result.plugin = j.at("plugin").get<std::string>();
    result.sha256 = j.at("sha256").get<std::string>();
    for (const auto& c : j.at("controllers")) {
        ControllerInfo info;
        info.id = c.at("id").get<std::string>();
        info.version = c.at("version").get<std::string>();
        info.description = c.at("description").get<std::string>();
        info.capabilities = c.at("capabilities").get<uint64_t>();
        info.abi_major = c.at("abi_major").get<uint32_t>();
        info.abi_minor = c.at("abi_minor").get<uint32_t>();
        info.plugin = result.plugin;
        info.sha256 = result.sha256;
        result.controllers.push_back(std::move(info));
    }
    if (result.controllers.empty()) throw std::runtime_error("a usable library with no controllers");
    return result;
}

double scan_timeout_seconds() {
    const char* text = std::getenv("RUDDER_PLUGIN_SCAN_TIMEOUT");
    if (text == nullptr || *text == '\0') return kDefaultScanTimeout;
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end == text || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
        spdlog::warn("RUDDER_PLUGIN_SCAN_TIMEOUT={} is not a positive number of seconds; using {}", text,
                     kDefaultScanTimeout);
        return kDefaultScanTimeout;
    }
    return seconds;
}

ScanResult scan_in_child(const fs::path& scanner, const fs::path& library, double timeout_s, bool& cacheable) {
    cacheable = false;
    Fd result_read, result_write, err_read, err_write;
    if (!make_pipe(result_read, result_write) || !make_pipe(err_read, err_write))
        return rejected(std::string("could not be scanned: pipe: ") + std::strerror(errno));

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
    posix_spawn_file_actions_adddup2(&actions, result_write.get(), 3);
    start_with_default_signals(attr);

    const std::string scanner_text = scanner.string(), library_text = library.string();
    // The child's own backstop: should this process die first, the child still ends (SIGALRM).
    const std::string alarm_text = std::to_string(static_cast<long>(std::ceil(timeout_s)) + 1);
    std::vector<char*> argv = {const_cast<char*>(scanner_text.c_str()), const_cast<char*>(library_text.c_str()),
                               const_cast<char*>(alarm_text.c_str()), nullptr};
    pid_t pid = -1;
    const int spawn_error = ::posix_spawn(&pid, scanner_text.c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    result_write.reset();
    err_write.reset();
    if (spawn_error != 0)
        return rejected("could not be scanned: starting " + scanner_text + " failed: " + std::strerror(spawn_error));

    using clock = std::chrono::steady_clock;
    const auto deadline =
        clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    auto millis_left = [&] {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
        return left > 0 ? static_cast<int>(std::min<long long>(left, 1000)) : 0;
    };
    std::string output, errors;
    bool timed_out = false;
    char buffer[65536];
    while (result_read.get() >= 0 || err_read.get() >= 0) {
        const int wait = millis_left();
        if (wait == 0) {
            timed_out = true;
            break;
        }
        pollfd fds[2] = {{result_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
        const int ready = ::poll(fds, 2, wait);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        for (int k = 0; k < 2; ++k) {
            if (fds[k].fd < 0 || fds[k].revents == 0) continue;
            const ssize_t n = ::read(fds[k].fd, buffer, sizeof buffer);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                (k == 0 ? result_read : err_read).reset();
                continue;
            }
            if (k == 0) {
                if (output.size() < kMaxResultBytes) output.append(buffer, static_cast<size_t>(n));
            } else {
                errors.append(buffer, static_cast<size_t>(n));
                if (errors.size() > 2 * kMaxStderrBytes) errors.erase(0, errors.size() - kMaxStderrBytes);
            }
        }
    }
    // Both pipes closed: the child is ending. It may still hang with them closed, so the deadline holds for the wait.
    const ChildEnd end = wait_for_child(pid, timed_out ? clock::now() : deadline);
    timed_out = timed_out || end.timed_out;
    const int status = end.known ? end.status : -1;
    cacheable = true;
    const std::string printed = last_line(errors);
    const std::string said = printed.empty() ? std::string() : "; it printed: " + printed;
    if (timed_out) {
        std::ostringstream seconds;
        seconds << timeout_s;
        return rejected("did not finish loading within " + seconds.str() +
                        " s and was stopped: its entry point or a constructor hangs (scanned in a child process; "
                        "RUDDER_PLUGIN_SCAN_TIMEOUT sets the limit)" +
                        said);
    }
    if (status != -1 && WIFSIGNALED(status))
        return rejected("crashed while loading, killed by " + signal_text(WTERMSIG(status)) +
                        " (scanned in a child process)" + said);
    if (!output.empty()) {
        const json j = json::parse(output, nullptr, false);
        if (!j.is_discarded()) {
            try {
                return scan_result_from_json(j);
            } catch (const std::exception& e) {
                return rejected(std::string("the scanner's result is malformed: ") + e.what());
            }
        }
    }
    if (status != -1 && WIFEXITED(status))
        return rejected("ended the process with exit status " + std::to_string(WEXITSTATUS(status)) +
                        " while loading, before handing over its descriptor (scanned in a child process)" + said);
    return rejected("the scanner gave no result (scanned in a child process)" + said);
}

PluginIndex::PluginIndex(fs::path file) : file_(std::move(file)) {
    if (file_.empty()) return;
    std::ifstream in(file_, std::ios::binary);
    if (!in) return;
    std::ostringstream text;
    text << in.rdbuf();
    const json j = json::parse(text.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("format", 0) != kIndexFormat ||
        j.value("host", "") != host_tag() || !j.contains("libraries") || !j["libraries"].is_object()) {
        spdlog::debug("plugin index {} is unreadable or from another host version; scanning again", file_.string());
        return;
    }
    libraries_ = j["libraries"];
}

ScanResult PluginIndex::examine(const fs::path& library, size_t& scans) {
    std::error_code error;
    const fs::path canonical = fs::canonical(library, error);
    FileKey key;
    if (error || !file_key(canonical, key)) return describe_library(library);  // gone: load_library says why
    const std::string name = canonical.string();

    if (const auto found = libraries_.find(name); found != libraries_.end()) {
        try {
            if (found->at("key") == key.to_json()) {
                spdlog::debug("plugin {}: from the index", library.string());
                return scan_result_from_json(found->at("result"));
            }
        } catch (const std::exception&) {
            // a malformed entry: scan again
        }
    }

    const fs::path scanner = plugin_scanner_file();
    if (!fs::is_regular_file(scanner, error)) {
        static std::once_flag warned;
        std::call_once(warned, [&] {
            spdlog::warn(
                "the plugin scanner {} is missing: plugin libraries are loaded into this process to list "
                "them, so a broken one can take it down (set RUDDER_PLUGIN_SCANNER, or install Rudder "
                "whole)",
                scanner.string());
        });
        return describe_library(library);
    }
    bool cacheable = false;
    ++scans;
    ScanResult result = scan_in_child(scanner, canonical, scan_timeout_seconds(), cacheable);
    spdlog::debug("plugin {}: scanned in a child process: {}", library.string(), result.ok ? "usable" : result.reason);
    if (cacheable) {
        // Stat again: a file that changed while it was scanned is not kept under either key.
        FileKey after;
        if (file_key(canonical, after) && after.to_json() == key.to_json()) {
            libraries_[name] = {{"key", key.to_json()}, {"result", scan_result_to_json(result)}};
            dirty_ = true;
        }
    }
    return result;
}

void PluginIndex::save() {
    if (!dirty_ || file_.empty()) return;
    dirty_ = false;
    try {
        json libraries = json::object();
        for (auto it = libraries_.begin(); it != libraries_.end(); ++it) {
            std::error_code error;
            if (fs::exists(it.key(), error)) libraries[it.key()] = it.value();
        }
        const json j = {{"format", kIndexFormat}, {"host", host_tag()}, {"libraries", libraries}};
        std::error_code error;
        fs::create_directories(file_.parent_path(), error);
        std::random_device random;
        const fs::path temp = file_.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(random());
        {
            std::ofstream out(temp, std::ios::binary | std::ios::trunc);
            out << j.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
            out.flush();
            if (!out) {
                out.close();
                fs::remove(temp, error);
                spdlog::debug("plugin index {} could not be written; not kept", file_.string());
                return;
            }
        }
        fs::rename(temp, file_, error);
        if (error) {
            fs::remove(temp, error);
            spdlog::debug("plugin index {} could not be replaced; not kept", file_.string());
        }
    } catch (const std::exception& e) {
        spdlog::debug("plugin index {} could not be written: {}", file_.string(), e.what());
    }
}

}  // namespace rudder::plugins
