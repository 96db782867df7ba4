// The protocol between the host and rudder-controller-host, the child process that runs one controller instance when
// a recipe asks for "isolation": "process". Torch-free: the child links only the loader.
//
// One stream socket (socketpair) carries framed messages, one call at a time: the host sends a call (create, begin,
// step, evaluate, destroy) and reads until the reply; while a call is in progress the child may send service
// requests (the plugin calling tokenize, find_model, denoise...), which the host answers before the reply comes. The
// step's tensors do not travel on the socket: they live in shared memory files (memfd) that the host sizes from the
// run shape at begin and hands over with SCM_RIGHTS: the inputs in one file shared by all of a run's isolated
// controllers (written once per step, mapped read-only here), the outputs in one per controller; both sides compute
// the same layouts (input_layout(), output_layout()).
#pragma once

#include "step_forms.hpp"

#include <rudder/rudder_plugin.h>

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::plugins::isolation {

// The child's socket descriptor, set up by posix_spawn.
constexpr int kChildSocketFd = 3;
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 34;  // 16 GiB: a denoise result can be large, but not more

enum Msg : uint32_t {
    // host -> child calls
    kCreate = 1,    // params text
    kBegin = 2,     // run fields, sizes, model_dir; the output and/or input shared memory fds when they changed
    kStep = 3,      // phase, step, times, which inputs are present, N
    kEvaluate = 4,  // sample
    kDestroy = 5,
    // child -> host replies
    kReady = 100,  // after loading: the library loaded and the controller was found (payload: nothing)
    kReply = 101,  // a call's result
    kFatal = 102,  // the child cannot go on (e.g. the library failed to load there): message
    // child -> host service requests during a call, each answered with kServiceReply
    kTokenize = 200,
    kDetokenize = 201,
    kTokenText = 202,
    kFindModel = 203,
    kDenoise = 204,
    kTokenPieces = 205,  // ABI 1.3: uint8 whole -> int32 kinds [, int64 V, kinds after, every kind's pieces if whole]
    kServiceReply = 300,
};

// How a call ended in the child, in a kReply.
enum Outcome : uint32_t {
    kOk = 0,            // status RUDDER_OK
    kFailed = 1,        // a non-OK status: status and the plugin's message follow
    kEscaped = 2,       // a C++ exception escaped the C callback
    kRewroteHeader = 3  // step: the plugin changed an output's DLTensor header (message names it)
};

struct Header {
    uint32_t type;
    uint32_t n_fds;  // descriptors sent with the header (SCM_RIGHTS)
    uint64_t size;
};

// Appends plain values and strings to a payload.
class Writer {
public:
    template <class T>
    Writer& put(const T& value) {
        const auto* bytes = reinterpret_cast<const char*>(&value);
        data_.insert(data_.end(), bytes, bytes + sizeof(T));
        return *this;
    }
    Writer& text(const std::string& value) {
        put<uint64_t>(value.size());
        data_.insert(data_.end(), value.begin(), value.end());
        return *this;
    }
    Writer& bytes(const void* data, size_t size) {
        put<uint64_t>(size);
        data_.insert(data_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
        return *this;
    }
    const std::vector<char>& data() const { return data_; }
    std::vector<char>& data() { return data_; }

private:
    std::vector<char> data_;
};

// Reads what a Writer wrote; throws std::runtime_error past the end (a malformed message).
class Reader {
public:
    explicit Reader(const std::vector<char>& data) : data_(data) {}
    template <class T>
    T get() {
        need(sizeof(T));
        T value;
        std::memcpy(&value, data_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return value;
    }
    std::string text() {
        const auto size = get<uint64_t>();
        need(size);
        std::string value(data_.data() + at_, size);
        at_ += size;
        return value;
    }
    // A byte run inside the payload (valid as long as the payload).
    const char* bytes(uint64_t& size) {
        size = get<uint64_t>();
        need(size);
        const char* start = data_.data() + at_;
        at_ += size;
        return start;
    }

private:
    void need(uint64_t n) const {
        if (n > data_.size() - at_) throw std::runtime_error("a malformed message from the other process");
    }
    const std::vector<char>& data_;
    size_t at_ = 0;
};

// Writes one message, and with its header the descriptors fds[0..n_fds) (at most kMaxFds). False if the other side
// is gone. Never raises SIGPIPE.
constexpr int kMaxFds = 2;
inline bool send_message(int socket, uint32_t type, const std::vector<char>& payload, const int* fds = nullptr,
                         int n_fds = 0) {
    const Header header{type, static_cast<uint32_t>(n_fds), payload.size()};
    const char* head = reinterpret_cast<const char*>(&header);
    size_t sent = 0;
    bool fd_pending = n_fds > 0;
    while (sent < sizeof header) {
        iovec iov{const_cast<char*>(head + sent), sizeof header - sent};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
        if (fd_pending) {
            std::memset(control, 0, sizeof control);
            msg.msg_control = control;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(n_fds));
            cmsghdr* c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(n_fds));
            std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<size_t>(n_fds));
        }
        const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        fd_pending = false;
        sent += static_cast<size_t>(n);
    }
    for (size_t done = 0; done < payload.size();) {
        const ssize_t n = ::send(socket, payload.data() + done, payload.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

// Reads exactly `size` bytes; false on end of stream or error. Descriptors that come with the bytes go to
// fds[0..kMaxFds) in order (-1 where none came), or are closed if `fds` is null.
inline bool read_exact(int socket, char* out, size_t size, int* fds = nullptr) {
    size_t done = 0;
    int next = 0;
    while (done < size) {
        iovec iov{out + done, size - done};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; ++i) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (fds != nullptr && next < kMaxFds)
                    fds[next++] = fd;
                else
                    ::close(fd);
            }
        }
        done += static_cast<size_t>(n);
    }
    return true;
}

// Reads one message. False if the other side is gone (or sent something malformed). `fds` receive the passed
// descriptors, in the order sent (-1 where none).
inline bool receive_message(int socket, Header& header, std::vector<char>& payload, int (&fds)[kMaxFds]) {
    for (int& fd : fds) fd = -1;
    if (!read_exact(socket, reinterpret_cast<char*>(&header), sizeof header, fds)) return false;
    if (header.size > kMaxMessageBytes) return false;
    payload.resize(header.size);
    return header.size == 0 || read_exact(socket, payload.data(), header.size);
}

// Where each tensor lives in its shared memory file, in bytes from its start; size 0 = absent. Both sides compute
// it from the same fields. The inputs are in one file that every isolated controller of a run shares (mapped
// read-only by the children); each controller's outputs and the run's embedding table are in a file of its own.
// A step's rows vary in number (N <= B * L): every row-shaped region holds B * L rows, and a step uses the first N.
struct Region {
    size_t offset = 0, size = 0;
};
struct InputLayout {
    Region latent, x0_logits, tokens, masked;
    Region rows, x0_rows, candidate_ids, candidate_logp;  // ABI 1.2
    Region proposed;                                      // ABI 1.3 (COMMIT)
    size_t total = 0;
};
struct OutputLayout {
    Region outputs[forms::kOutputs];  // by forms::Output
    Region embedding;                 // run info (continuous)
    size_t total = 0;
};

namespace detail {
inline size_t bytes(int64_t a, int64_t b, int64_t c, size_t element) {
    return static_cast<size_t>(a) * static_cast<size_t>(b) * static_cast<size_t>(c) * element;
}
struct Placer {
    size_t at = 0;
    void operator()(Region& region, size_t size) {
        region.offset = at;
        region.size = size;
        at += (size + 63) / 64 * 64;
    }
};
}  // namespace detail

// D = 0 for the discrete family; k: the candidates per row the run offers (0: none).
inline InputLayout input_layout(int64_t B, int64_t L, int64_t V, int64_t D, int64_t k) {
    using detail::bytes;
    InputLayout layout;
    detail::Placer place;
    const bool continuous = D > 0;
    place(layout.latent, continuous ? bytes(B, L, D, 4) : 0);
    place(layout.x0_logits, bytes(B, L, V, 4));
    place(layout.tokens, bytes(B, L, 1, 8));
    place(layout.masked, continuous ? 0 : bytes(B, L, 1, 1));
    place(layout.rows, bytes(B, L, 1, 8));
    // Only touched when a controller of the run reads x0 at the rows: the file is sparse until then.
    place(layout.x0_rows, bytes(B, L, V, 4));
    place(layout.candidate_ids, bytes(B, L, k, 8));
    place(layout.candidate_logp, bytes(B, L, k, 4));
    place(layout.proposed, bytes(B, L, 1, 8));
    layout.total = std::max<size_t>(place.at, 64);
    return layout;
}

// `run`: the run's shape and the controller's negotiated forms (its rows and step fields do not matter). Each output
// gets the room its largest form takes: all B * L rows, and the largest of its PREDICT, GUIDE and COMMIT shapes.
inline OutputLayout output_layout(forms::StepShape run, bool embedding) {
    run.rows = run.B * run.L;
    std::array<forms::Dims, forms::kOutputs> largest{};
    for (const rudder_phase phase : {RUDDER_PHASE_PREDICT, RUDDER_PHASE_GUIDE, RUDDER_PHASE_COMMIT}) {
        if (phase == RUDDER_PHASE_GUIDE && !run.has(RUDDER_CAP_GRADIENT)) continue;
        run.phase = phase;
        const auto dims = forms::output_dims(run);
        for (size_t k = 0; k < forms::kOutputs; ++k)
            if (dims[k].numel() > largest[k].numel()) largest[k] = dims[k];
    }
    OutputLayout layout;
    detail::Placer place;
    for (size_t k = 0; k < forms::kOutputs; ++k) {
        const size_t element = forms::kOutputInfo[k].dtype.bits / 8;
        place(layout.outputs[k], static_cast<size_t>(largest[k].numel()) * element);
    }
    place(layout.embedding, embedding ? detail::bytes(run.V, run.D, 1, 4) : 0);
    layout.total = std::max<size_t>(place.at, 64);
    return layout;
}

// Step flags: which inputs the host filled in.
constexpr uint32_t kHasLatent = 1, kHasLogits = 2, kHasTokens = 4, kHasMasked = 8;
constexpr uint32_t kHasRows = 16, kHasX0Rows = 32, kHasCandidates = 64;  // ABI 1.2
constexpr uint32_t kHasProposed = 128;                                   // ABI 1.3

// rudder_run_info.token_pieces answered from pieces held in memory (one kind's, and the kinds after), as the
// in-process bridge and the child both answer it: offsets and kinds always, the bytes when they fit.
inline rudder_status write_token_pieces(const std::vector<std::string>& pieces, const std::vector<int32_t>& kinds_after,
                                        char* bytes, size_t capacity, size_t* n_bytes, int64_t* offsets,
                                        int32_t* kind_after) {
    size_t total = 0;
    for (size_t v = 0; v < pieces.size(); ++v) {
        offsets[v] = static_cast<int64_t>(total);
        // An empty piece copies nothing (and `bytes` may be null when the caller first asks for the size).
        if (!pieces[v].empty() && total + pieces[v].size() <= capacity)
            std::memcpy(bytes + total, pieces[v].data(), pieces[v].size());
        total += pieces[v].size();
    }
    offsets[pieces.size()] = static_cast<int64_t>(total);
    if (kind_after != nullptr) std::copy(kinds_after.begin(), kinds_after.end(), kind_after);
    *n_bytes = total;
    return total <= capacity ? RUDDER_OK : RUDDER_ERR_BUFFER_TOO_SMALL;
}

}  // namespace rudder::plugins::isolation
