#include "http_transport.hpp"

#include "memory_release.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace rudder::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Set while the accept thread runs a connection the pool has no room for: it is answered 503 and closed.
thread_local bool t_refusing = false;
// Set by a handler that answered without reading the body (HttpServer::close_after_this_request).
thread_local bool t_close_after = false;

// What may be read of a request's body once its headers are in: everything the parser asks for (a Content-Length
// body, which httplib reads exactly, checked against the limit by frame_body first), nothing (a request with no
// framing header has no body), or chunks, decoded here as the parser takes them so that their payload is counted
// and the read fails as soon as a chunk's size line would take it past the limit, before the chunk arrives.
class BodyMeter {
public:
    enum class Mode { pass, none, chunked };
    enum class Cut { no, over_limit, malformed };

    // Before each request: its headers pass.
    void reset() {
        mode_ = Mode::pass;
        cut_ = Cut::no;
        state_ = State::size;
        total_ = chunk_ = remaining_ = 0;
        digits_ = line_ = trailer_ = 0;
    }
    void expect(Mode mode, uint64_t limit) {
        mode_ = mode;
        limit_ = limit;
    }
    bool no_body() const { return mode_ == Mode::none; }
    Cut cut() const { return cut_; }

    // The body's bytes the parser takes; false (and the cause in cut()) when the read must fail.
    bool take(const char* bytes, size_t n) {
        if (mode_ != Mode::chunked) return true;
        for (size_t i = 0; i < n; ++i) {
            const char c = bytes[i];
            switch (state_) {
                case State::size:
                    if (std::isxdigit(static_cast<unsigned char>(c))) {
                        if (++digits_ > kMaxSizeDigits) return fail(Cut::malformed);
                        chunk_ = chunk_ * 16 + static_cast<uint64_t>(hex_value(c));
                    } else if (c == '\n') {
                        if (digits_ == 0) return fail(Cut::malformed);
                        if (!end_of_size_line()) return false;
                    } else if (c == ';' || c == ' ' || c == '\t') {
                        if (digits_ == 0) return fail(Cut::malformed);
                        state_ = State::extension;
                    } else if (c != '\r') {
                        return fail(Cut::malformed);
                    }
                    if (++line_ > kMaxLine) return fail(Cut::malformed);
                    break;
                case State::extension:
                    if (c == '\n') {
                        if (!end_of_size_line()) return false;
                    } else if (++line_ > kMaxLine) {
                        return fail(Cut::malformed);
                    }
                    break;
                case State::data: {
                    const uint64_t step = std::min<uint64_t>(remaining_, n - i);
                    remaining_ -= step;
                    i += static_cast<size_t>(step) - 1;
                    if (remaining_ == 0) state_ = State::data_end;
                    break;
                }
                case State::data_end:
                    if (c == '\n') {
                        state_ = State::size;
                        line_ = 0;
                    } else if (c != '\r') {
                        return fail(Cut::malformed);
                    }
                    break;
                case State::trailer:
                    if (c == '\n') {
                        if (line_ == 0) state_ = State::done;
                        line_ = 0;
                    } else if (c != '\r') {
                        ++line_;
                        if (++trailer_ > kMaxLine) return fail(Cut::malformed);
                    }
                    break;
                case State::done: break;
            }
        }
        return true;
    }

private:
    enum class State { size, extension, data, data_end, trailer, done };
    static constexpr int kMaxSizeDigits = 15;  // 2^60 bytes: any real size; more would overflow the count
    static constexpr size_t kMaxLine = 4096;   // a size line with its extensions, and the trailers together

    static int hex_value(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }
    bool fail(Cut cut) {
        cut_ = cut;
        return false;
    }
    bool end_of_size_line() {
        if (chunk_ == 0) {
            state_ = State::trailer;
        } else {
            if (chunk_ > limit_ - std::min(limit_, total_)) return fail(Cut::over_limit);
            total_ += chunk_;
            remaining_ = chunk_;
            state_ = State::data;
        }
        chunk_ = 0;
        digits_ = 0;
        line_ = 0;
        return true;
    }

    Mode mode_ = Mode::pass;
    Cut cut_ = Cut::no;
    State state_ = State::size;
    uint64_t limit_ = 0, total_ = 0, chunk_ = 0, remaining_ = 0;
    int digits_ = 0;
    size_t line_ = 0, trailer_ = 0;
};

// The body meter of the request this thread is reading (a connection is read by one thread), set for as long as
// a MeterInUse lives.
thread_local BodyMeter* t_meter = nullptr;

struct MeterInUse {
    explicit MeterInUse(BodyMeter& meter) { t_meter = &meter; }
    ~MeterInUse() { t_meter = nullptr; }
    MeterInUse(const MeterInUse&) = delete;
    MeterInUse& operator=(const MeterInUse&) = delete;
};

Clock::duration span(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// poll() for `events` until `until`: 1 ready (or hung up: the read or write that follows says so), 0 time is up,
// -1 an error.
int poll_until(int fd, short events, Clock::time_point until) {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1000000)));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n;
        return 1;
    }
}

// Where a request is: its line and headers, then its body, each with a deadline. The bytes the parser takes are
// scanned for the empty line that ends the headers.
class RequestClock {
public:
    explicit RequestClock(const ConnectionLimits& limits) : limits_(limits) { start(); }
    void start() {
        deadline_ = Clock::now() + span(limits_.header_seconds);
        in_headers_ = true;
        line_chars_ = 0;
        seen_line_ = false;
    }
    void consumed(const char* bytes, size_t n) {
        for (size_t i = 0; i < n && in_headers_; ++i) {
            if (bytes[i] == '\n') {
                if (line_chars_ == 0 && seen_line_) {
                    in_headers_ = false;
                    deadline_ = Clock::now() + span(limits_.body_seconds);
                }
                seen_line_ = seen_line_ || line_chars_ > 0;
                line_chars_ = 0;
            } else if (bytes[i] != '\r') {
                ++line_chars_;
            }
        }
    }
    Clock::time_point deadline() const { return deadline_; }

private:
    const ConnectionLimits& limits_;
    Clock::time_point deadline_;
    bool in_headers_ = true;
    size_t line_chars_ = 0;
    bool seen_line_ = false;
};

void address_of(int fd, bool peer, std::string& ip, int& port) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                       : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    if (r != 0) return;
    char text[INET6_ADDRSTRLEN] = "";
    if (address.ss_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
        ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
        port = ntohs(v4->sin_port);
    } else if (address.ss_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
        ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
        port = ntohs(v6->sin6_port);
    }
    ip = text;
}

// A connection's socket, read through a buffer of our own (the parser reads a byte at a time) under the request's
// deadlines.
class SocketConnection final : public httplib::Stream {
public:
    SocketConnection(int fd, const ConnectionLimits& limits) : fd_(fd), limits_(limits), clock_(limits) {}

    // Waits for the next request's first byte, at most the idle time and while the listener is open.
    bool await_request(const std::atomic<socket_t>& listener) {
        const auto until = Clock::now() + span(limits_.idle_seconds);
        while (begin_ == end_) {
            if (listener == INVALID_SOCKET) return false;
            const auto now = Clock::now();
            if (now >= until) return false;
            const int ready = poll_until(fd_, POLLIN, std::min(until, now + std::chrono::milliseconds(100)));
            if (ready < 0) return false;
            if (ready > 0) break;
        }
        clock_.start();
        meter_.reset();
        return true;
    }
    bool timed_out() const { return timed_out_; }
    BodyMeter& meter() { return meter_; }

    bool is_readable() const override { return begin_ < end_ || poll_until(fd_, POLLIN, clock_.deadline()) > 0; }
    bool is_writable() const override {
        return poll_until(fd_, POLLOUT, Clock::now() + span(limits_.write_seconds)) > 0;
    }
    ssize_t read(char* ptr, size_t size) override {
        if (meter_.no_body()) return 0;
        if (begin_ == end_) {
            const int ready = poll_until(fd_, POLLIN, clock_.deadline());
            if (ready == 0) timed_out_ = true;
            if (ready <= 0) return -1;
            ssize_t n;
            do n = ::recv(fd_, buffer_, sizeof buffer_, 0);
            while (n < 0 && errno == EINTR);
            if (n <= 0) return n;
            begin_ = 0;
            end_ = static_cast<size_t>(n);
        }
        const size_t n = std::min(size, end_ - begin_);
        std::memcpy(ptr, buffer_ + begin_, n);
        clock_.consumed(ptr, n);
        begin_ += n;
        if (!meter_.take(ptr, n)) return -1;
        return static_cast<ssize_t>(n);
    }
    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n;
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
    void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
    socket_t socket() const override { return fd_; }

private:
    const int fd_;
    const ConnectionLimits& limits_;
    RequestClock clock_;
    BodyMeter meter_;
    char buffer_[4096];
    size_t begin_ = 0, end_ = 0;
    bool timed_out_ = false;
};

// Requests from a string, answers into another: exchange() and the fuzz target.
class MemoryConnection final : public httplib::Stream {
public:
    explicit MemoryConnection(const std::string& input) : input_(input) {}
    bool exhausted() const { return position_ >= input_.size(); }
    BodyMeter& meter() { return meter_; }
    const std::string& output() const { return output_; }

    bool is_readable() const override { return !exhausted(); }
    bool is_writable() const override { return output_.size() < kMaxOutput; }
    ssize_t read(char* ptr, size_t size) override {
        if (exhausted() || meter_.no_body()) return 0;
        const size_t n = std::min(size, input_.size() - position_);
        std::memcpy(ptr, input_.data() + position_, n);
        position_ += n;
        if (!meter_.take(ptr, n)) return -1;
        return static_cast<ssize_t>(n);
    }
    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        output_.append(ptr, size);
        return static_cast<ssize_t>(size);
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip = "127.0.0.1";
        port = 40000;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip = "127.0.0.1";
        port = 8080;
    }
    socket_t socket() const override { return INVALID_SOCKET; }

private:
    static constexpr size_t kMaxOutput = size_t{64} << 20;
    const std::string& input_;
    size_t position_ = 0;
    std::string output_;
    BodyMeter meter_;
};

// A thread per connection, up to `max` at once; a connection beyond that is run on the accept thread in refusing
// mode (answered 503 and closed at once) instead of waiting in an unbounded queue. Threads start as needed and end
// after a while without work (their stacks and allocator caches go back to the system), the last few kept.
class ConnectionPool final : public httplib::TaskQueue {
public:
    explicit ConnectionPool(size_t max) : max_(max) {}
    ~ConnectionPool() override = default;

    void enqueue(std::function<void()> fn) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            join_finished();
            if (running_ + jobs_.size() < max_) {
                jobs_.push_back(std::move(fn));
                if (idle_ < jobs_.size() && threads_.size() < max_) threads_.emplace_back([this] { work(); });
                ready_.notify_one();
                return;
            }
        }
        t_refusing = true;
        fn();
        t_refusing = false;
    }
    void shutdown() override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        ready_.notify_all();
        for (auto& thread : threads_) thread.join();
    }

private:
    static constexpr size_t kKeptThreads = 8;
    static constexpr std::chrono::seconds kIdleEnd{10};

    void work() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            ++idle_;
            const bool woken = ready_.wait_for(lock, kIdleEnd, [&] { return stopping_ || !jobs_.empty(); });
            --idle_;
            if (!woken) {
                if (threads_.size() - finished_.size() <= kKeptThreads) continue;
                finished_.push_back(std::this_thread::get_id());  // joined by the next enqueue
                return;
            }
            if (jobs_.empty()) return;  // stopping
            std::function<void()> fn = std::move(jobs_.front());
            jobs_.pop_front();
            ++running_;
            lock.unlock();
            fn();
            fn = nullptr;
            release_thread_cache();  // the connection's allocations, freed, are not kept in this thread's cache
            lock.lock();
            --running_;
        }
    }
    // The threads that ended for want of work (the lock held): they have let go of it, so they are joined at once.
    void join_finished() {
        for (const auto id : finished_)
            for (auto it = threads_.begin(); it != threads_.end(); ++it)
                if (it->get_id() == id) {
                    it->join();
                    threads_.erase(it);
                    break;
                }
        finished_.clear();
    }

    const size_t max_;
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> jobs_;
    std::list<std::thread> threads_;
    std::vector<std::thread::id> finished_;
    size_t running_ = 0, idle_ = 0;
    bool stopping_ = false;
};

// After an answer given before the request's body was read whole: the answer's end is sent (FIN), then what the
// client still sends is read and dropped for a moment, so that closing does not reset the connection (a reset can
// discard the answer in the client's buffers before it reads it). Until the client closes its side, bounded in time,
// not bytes (what is read is dropped, never kept): a client that keeps sending is cut off after a few seconds.
void close_gracefully(int fd) {
    ::shutdown(fd, SHUT_WR);
    const auto until = Clock::now() + std::chrono::seconds(5);
    char sink[65536];
    while (poll_until(fd, POLLIN, until) > 0) {
        const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) break;
    }
}

void refuse(int fd) {
    static const std::string body = "{\"error\": \"the server has too many connections open; try again later\"}\n";
    static const std::string answer =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

HttpServer::HttpServer(ConnectionLimits limits, std::function<void(ConnectionEvent)> on_event)
    : limits_(limits), on_event_(std::move(on_event)) {
    const size_t max = static_cast<size_t>(std::max<int64_t>(1, limits_.max_connections));
    new_task_queue = [max] { return new ConnectionPool(max); };
    // What the Keep-Alive header announces, and the socket's own send timeout (a blocking send of a large answer).
    set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, limits_.idle_seconds)));
    set_write_timeout(std::chrono::duration<double>(limits_.write_seconds));
}

void HttpServer::close_after_this_request() { t_close_after = true; }

std::string HttpServer::over_limit_message() const {
    return "the request body is over this server's limit of " +
           std::to_string(std::max<int64_t>(0, limits_.max_body_bytes)) + " bytes";
}

std::optional<FramingRefusal> HttpServer::body_cut_off() const {
    if (t_meter == nullptr || t_meter->cut() == BodyMeter::Cut::no) return std::nullopt;
    if (t_meter->cut() == BodyMeter::Cut::malformed) return FramingRefusal{400, "the chunked body is malformed"};
    return FramingRefusal{413, over_limit_message()};
}

std::optional<FramingRefusal> HttpServer::frame_body(const httplib::Request& req) const {
    const uint64_t limit = static_cast<uint64_t>(std::max<int64_t>(0, limits_.max_body_bytes));
    auto refuse_with = [](int status, std::string message) {
        close_after_this_request();
        return std::optional<FramingRefusal>(FramingRefusal{status, std::move(message)});
    };
    const size_t encodings = req.get_header_value_count("Transfer-Encoding");
    const size_t lengths = req.get_header_value_count("Content-Length");
    if (encodings > 0) {
        if (lengths > 0)
            return refuse_with(400, "a request may not have both Transfer-Encoding and Content-Length (RFC 9112 6.3)");
        std::string encoding = encodings == 1 ? req.get_header_value("Transfer-Encoding") : std::string();
        std::transform(encoding.begin(), encoding.end(), encoding.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (encoding != "chunked") return refuse_with(501, "the only Transfer-Encoding this server reads is 'chunked'");
        if (t_meter != nullptr) t_meter->expect(BodyMeter::Mode::chunked, limit);
        return std::nullopt;
    }
    if (lengths == 0) {
        if (t_meter != nullptr) t_meter->expect(BodyMeter::Mode::none, 0);
        return std::nullopt;
    }
    std::string first;
    for (size_t i = 0; i < lengths; ++i) {
        const std::string value = req.get_header_value("Content-Length", i);
        // Digits only (no sign, no spaces: httplib trims the header's own), and few enough to be a number.
        const bool digits = !value.empty() && value.size() <= 18 &&
                            std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); });
        if (!digits) return refuse_with(400, "the Content-Length header is not a length in bytes");
        if (i == 0) first = value;
        if (value != first) return refuse_with(400, "the request has Content-Length headers that disagree");
    }
    if (std::stoull(first) > limit) return refuse_with(413, over_limit_message());
    return std::nullopt;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
    bool answered = false;
    if (t_refusing) {
        refuse(sock);
        on_event_(ConnectionEvent::refused);
    } else {
        on_event_(ConnectionEvent::opened);
        SocketConnection connection(sock, limits_);
        bool body_unread = false;
        MeterInUse in_use(connection.meter());
        for (size_t count = keep_alive_max_count_; count > 0 && connection.await_request(svr_sock_); --count) {
            t_close_after = false;
            bool closed = false;
            try {
                answered = process_request(connection, count == 1, closed, nullptr);
            } catch (...) {  // the routes answer every exception; this is the last line
                answered = false;
            }
            if (connection.timed_out()) on_event_(ConnectionEvent::timed_out);
            body_unread = t_close_after || connection.meter().cut() != BodyMeter::Cut::no;
            if (!answered || closed || body_unread || connection.timed_out()) break;
        }
        if (body_unread && !connection.timed_out()) close_gracefully(sock);
        on_event_(ConnectionEvent::closed);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return answered;
}

std::string HttpServer::exchange(const std::string& input) {
    MemoryConnection connection(input);
    MeterInUse in_use(connection.meter());
    for (int count = 0; count < 64 && !connection.exhausted(); ++count) {
        t_close_after = false;
        connection.meter().reset();
        bool closed = false;
        if (!process_request(connection, false, closed, nullptr) || closed || t_close_after ||
            connection.meter().cut() != BodyMeter::Cut::no)
            break;
    }
    return connection.output();
}

}  // namespace rudder::serve
