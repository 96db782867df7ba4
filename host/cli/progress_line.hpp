// Progress of a long command on stderr, one rule for every command: on a terminal one line rewritten in place;
// otherwise (a log file, CI) a line per tenth of the work and one at its end, so logs stay readable.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace rudder::cli {

class ProgressLine {
public:
    explicit ProgressLine(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO) != 0) {}
    ~ProgressLine() { finish(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    // `done` of `total` units; `text()` (a std::string) describes them, called only for a line that is printed, so
    // a per-step caller formats nothing in between. A `done` below the last one starts another round (next batch).
    template <class MakeText>
    void show(int64_t done, int64_t total, MakeText&& text) {
        if (quiet_ || total <= 0) return;
        if (done < last_) last_ = 0;
        const bool report = tty_ || done >= total || done * 10 / total > last_ * 10 / total;
        last_ = done;
        if (!report) return;
        std::fprintf(stderr, "%s%s%s", tty_ ? "\r" : "", text().c_str(), tty_ ? "   " : "\n");
        open_ = tty_;
        if (done >= total) finish();
        std::fflush(stderr);
    }
    // Ends a line left open on a terminal (work that stops short of its total, e.g. a shard's share of targets).
    void finish() {
        if (open_) std::fputc('\n', stderr);
        open_ = false;
    }

private:
    bool quiet_, tty_;
    bool open_ = false;
    int64_t last_ = 0;
};

}  // namespace rudder::cli
