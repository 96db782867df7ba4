#include "http_transport.hpp"

#include "memory_release.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
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
        return true;
    }
    bool timed_out() const { return timed_out_; }

    bool is_readable() const override { return begin_ < end_ || poll_until(fd_, POLLIN, clock_.deadline()) > 0; }
    bool is_writable() const override {
        return poll_until(fd_, POLLOUT, Clock::now() + span(limits_.write_seconds)) > 0;
    }
    ssize_t read(char* ptr, size_t size) override {
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
    char buffer_[4096];
    size_t begin_ = 0, end_ = 0;
    bool timed_out_ = false;
};

// Requests from a string, answers into another: exchange() and the fuzz target.
class MemoryConnection final : public httplib::Stream {
public:
    explicit MemoryConnection(const std::string& input) : input_(input) {}
    bool exhausted() const { return position_ >= input_.size(); }
    const std::string& output() const { return output_; }

    bool is_readable() const override { return !exhausted(); }
    bool is_writable() const override { return output_.size() < kMaxOutput; }
    ssize_t read(char* ptr, size_t size) override {
        if (exhausted()) return 0;
        const size_t n = std::min(size, input_.size() - position_);
        std::memcpy(ptr, input_.data() + position_, n);
        position_ += n;
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

bool HttpServer::process_and_close_socket(socket_t sock) {
    bool answered = false;
    if (t_refusing) {
        refuse(sock);
        on_event_(ConnectionEvent::refused);
    } else {
        on_event_(ConnectionEvent::opened);
        SocketConnection connection(sock, limits_);
        for (size_t count = keep_alive_max_count_; count > 0 && connection.await_request(svr_sock_); --count) {
            t_close_after = false;
            bool closed = false;
            try {
                answered = process_request(connection, count == 1, closed, nullptr);
            } catch (...) {  // the routes answer every exception; this is the last line
                answered = false;
            }
            if (connection.timed_out()) on_event_(ConnectionEvent::timed_out);
            if (!answered || closed || t_close_after || connection.timed_out()) break;
        }
        on_event_(ConnectionEvent::closed);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return answered;
}

std::string HttpServer::exchange(const std::string& input) {
    MemoryConnection connection(input);
    for (int count = 0; count < 64 && !connection.exhausted(); ++count) {
        t_close_after = false;
        bool closed = false;
        if (!process_request(connection, false, closed, nullptr) || closed || t_close_after) break;
    }
    return connection.output();
}

}  // namespace rudder::serve
