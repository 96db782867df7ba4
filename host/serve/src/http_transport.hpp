// The server's connections: cpp-httplib's request parsing and routing (Server::process_request) over a connection
// loop of our own, because Debian's cpp-httplib 0.11 bounds only each recv (a client that sends a byte every few
// seconds holds its thread forever) and queues connections without limit. Here a request's line and headers must
// arrive within one deadline and its body within another, a kept-alive connection waits a bounded time for its next
// request, a write to a client that does not read fails after a timeout, and connections beyond a cap are answered
// 503 at once instead of waiting for a thread.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace rudder::serve {

struct ConnectionLimits {
    double header_seconds = 10;  // from a request's first byte to the end of its headers
    double body_seconds = 60;    // from the end of the headers to the end of the body
    double idle_seconds = 5;     // a kept-alive connection's wait for its next request
    double write_seconds = 10;   // a write to a client that does not read for this long fails
    int64_t max_connections = 256;
};

// What happened to a connection, for the metrics.
enum class ConnectionEvent { opened, closed, refused, timed_out };

class HttpServer : public httplib::Server {
public:
    HttpServer(ConnectionLimits limits, std::function<void(ConnectionEvent)> on_event);

    // The requests in `input`, as a client would send them on one connection, answered by the routes without a
    // socket (the fuzz target): what the server writes back. Exceptions that escape the routes escape here.
    std::string exchange(const std::string& input);

    // From a pre-routing handler that answers without reading the request's body: the connection is closed after
    // the answer, so the unread body is not taken for the next request.
    static void close_after_this_request();

private:
    bool process_and_close_socket(socket_t sock) override;

    const ConnectionLimits limits_;
    const std::function<void(ConnectionEvent)> on_event_;
};

}  // namespace rudder::serve
