#include <rudder/base/output_file.hpp>

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
    file_ = std::fopen(written_.c_str(), "wb");
    if (file_ == nullptr) fail("write", written_, errno);
}

OutputFile::~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_ && !direct() && size_ == 0) {
        std::error_code ec;
        fs::remove(written_, ec);
    }
}

void OutputFile::write(std::string_view text) {
    if (file_ == nullptr) throw OutputError("'" + target_.string() + "' is already closed");
    // Flushed at once: a sample written is a sample kept, even if the run is killed later.
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
        fail("write", written_, errno);
    size_ += text.size();
}

void OutputFile::commit() {
    if (file_ == nullptr) throw OutputError("'" + target_.string() + "' is already closed");
    std::FILE* file = file_;
    file_ = nullptr;
    if (std::fflush(file) != 0) {
        const int error = errno;
        std::fclose(file);
        fail("write", written_, error);
    }
    if (std::fclose(file) != 0) fail("write", written_, errno);
    if (!direct()) {
        std::error_code ec;
        fs::rename(written_, target_, ec);
        if (ec)
            throw OutputError("cannot move '" + written_.string() + "' to '" + target_.string() + "': " + ec.message());
    }
    committed_ = true;
}

void write_stdout(std::string_view text) {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
        throw OutputError(std::string("cannot write to standard output: ") + std::strerror(errno));
}

}  // namespace rudder
