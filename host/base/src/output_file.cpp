#include <rudder/base/output_file.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace rudder {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& what, const fs::path& file, int error) {
    throw OutputError("cannot " + what + " '" + file.string() + "': " + std::strerror(error));
}

}  // namespace

OutputFile::OutputFile(fs::path target) : target_(std::move(target)) {
    std::error_code ec;
    const fs::file_status status = fs::status(target_, ec);
    if (fs::is_directory(status)) throw OutputError("cannot write '" + target_.string() + "': it is a folder");
    const bool special = fs::exists(status) && !fs::is_regular_file(status);
    written_ = special ? target_ : fs::path(target_.string() + ".partial");
    int fd = -1;
    if (special) {
        fd = ::open(written_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
    } else {
        // A fresh file of our own: an earlier run's leftover is removed (a symlink placed there is removed, never
        // followed), and O_EXCL | O_NOFOLLOW refuse whatever appears in its place before the open.
        if (::unlink(written_.c_str()) != 0 && errno != ENOENT && errno != EISDIR) fail("replace", written_, errno);
        fd = ::open(written_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    }
    if (fd < 0) fail("write", written_, errno);
    file_ = ::fdopen(fd, "wb");
    if (file_ == nullptr) {
        const int error = errno;
        ::close(fd);
        fail("write", written_, error);
    }
}

OutputFile::~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_ && !direct() && size_ == 0) remove_partial();
}

void OutputFile::remove_partial() {
    std::error_code ec;
    fs::remove(written_, ec);
}

void OutputFile::abandon(const std::string& what, int error) {
    // What was written may end mid-sample: nothing of it is kept.
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
    if (!direct()) remove_partial();
    size_ = 0;
    fail(what, written_, error);
}

void OutputFile::write(std::string_view text) {
    if (file_ == nullptr) throw OutputError("'" + target_.string() + "' is already closed");
    // Flushed at once: a sample written is a sample kept, even if the run is killed later.
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
        abandon("write", errno);
    size_ += text.size();
}

void OutputFile::commit() {
    if (file_ == nullptr) throw OutputError("'" + target_.string() + "' is already closed");
    if (std::fflush(file_) != 0) abandon("write", errno);
    std::FILE* file = file_;
    file_ = nullptr;
    if (std::fclose(file) != 0) {
        const int error = errno;
        if (!direct()) remove_partial();
        size_ = 0;
        fail("write", written_, error);
    }
    if (!direct()) {
        std::error_code ec;
        fs::rename(written_, target_, ec);
        if (ec)
            throw OutputError("cannot move '" + written_.string() + "' to '" + target_.string() + "': " + ec.message());
    }
    committed_ = true;
}

namespace {
std::FILE* g_results = nullptr;  // set_results_stream's; stdout when null
}  // namespace

std::FILE* results_stream() { return g_results != nullptr ? g_results : stdout; }
void set_results_stream(std::FILE* stream) { g_results = stream; }

void write_stdout(std::string_view text) {
    std::FILE* out = results_stream();
    if (std::fwrite(text.data(), 1, text.size(), out) != text.size() || std::fflush(out) != 0)
        throw OutputError(std::string("cannot write to standard output: ") + std::strerror(errno));
}

}  // namespace rudder
