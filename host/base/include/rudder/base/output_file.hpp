// A file that is replaced only by a complete result. What a command writes goes to "<name>.partial" beside the
// target, a file this creates afresh (O_EXCL | O_NOFOLLOW: a symlink placed there is never followed); commit() moves
// it over the target once everything is written and flushed, so a run that fails or is interrupted never truncates
// or half-overwrites the file it was asked to write, and what it completed stays in the .partial file. A write that
// fails (a full disk) removes the .partial file, whose last line may be cut. A target that exists but is not a
// regular file (a terminal, a pipe, /dev/null) is written directly. Every write is checked: a full disk or a refused
// write is an error naming the file, never silent.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rudder {

// Every failure to open, write, flush or move an output file; the message names the file and the cause.
class OutputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class OutputFile {
public:
    // Creates "<target>.partial" (removing an earlier run's leftover first), or opens `target` itself when it is not
    // a regular file. Throws OutputError.
    explicit OutputFile(std::filesystem::path target);
    // Without commit(): closes, keeps the .partial file when something was written and removes it otherwise.
    ~OutputFile();
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    // Appends `text`; throws OutputError when it cannot be written (ENOSPC, EIO, ...), after removing the .partial
    // file.
    void write(std::string_view text);
    // Flushes, closes and moves the written file over the target. Throws OutputError (a failed flush removes the
    // .partial file).
    void commit();

    const std::filesystem::path& target() const { return target_; }
    // Where the output is until commit(): "<target>.partial", or the target when it is written directly.
    const std::filesystem::path& written_path() const { return written_; }
    bool direct() const { return written_ == target_; }
    // Bytes written so far (0 again once a failed write removed them).
    uint64_t size() const { return size_; }

private:
    void remove_partial();
    [[noreturn]] void abandon(const std::string& what, int error);
    std::filesystem::path target_, written_;
    std::FILE* file_ = nullptr;
    uint64_t size_ = 0;
    bool committed_ = false;
};

// Writes `text` to the results stream (results_stream()) and flushes it; throws OutputError when that fails (a full
// disk, a closed pipe), so a command never reports success for output that went nowhere.
void write_stdout(std::string_view text);

// Where a command's results go: stdout, unless set_results_stream() named another stream. The CLI names a duplicate
// of standard output taken at its start, and points file descriptor 1 at standard error, so that what a plugin in the
// process prints never mixes into its results (docs/cli.md).
std::FILE* results_stream();
void set_results_stream(std::FILE* stream);

}  // namespace rudder
