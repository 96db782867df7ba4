// The server's connections: cpp-httplib's request parsing and routing (Server::process_request) over a connection
// loop of our own, because Debian's cpp-httplib 0.11 bounds only each recv (a client that sends a byte every few
// seconds holds its thread forever) and queues connections without limit. Here a request's line and headers must
// arrive within one deadline and its body within another, a kept-alive connection waits a bounded time for its next
// request, a write to a client that does not read fails after a timeout, and connections beyond a cap are answered
// 503 at once instead of waiting for a thread. The body's framing is checked here too, before a byte of the body is
// read (cpp-httplib 0.11 bounds only a Content-Length body, reads a chunked one without limit and waits for the end
// of the connection when a request has neither): see HttpServer::frame_body.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace rudder::serve {

struct ConnectionLimits {
    double header_seconds = 10;  // from a request's first byte to the end of its headers
    double body_seconds = 60;    // from the end of the headers to the end of the body
    double idle_seconds = 5;     // a kept-alive connection's wait for its next request
    double write_seconds = 10;   // a write to a client that does not read for this long fails
    int64_t max_connections = 256;
    int64_t max_body_bytes = 1 << 20;  // a request body's limit, in payload bytes, however it is framed
};

// Why a request's body is refused before it is read: the status (400 malformed framing, 413 over the limit, 501 an
// encoding the server does not decode) and what to tell the client.
struct FramingRefusal {
    int status;
    std::string message;
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

    // From the pre-routing handler, which runs after a request's headers and before its body: checks how the body
    // is framed and bounds what will be read of it. A Content-Length must be plain digits (one header, or several
    // equal) and at most the limit; a chunked body is counted chunk by chunk as it arrives and cut off past the
    // limit (body_cut_off() then says why, for the error handler's answer); a request with neither has
    // no body (RFC 9112 6.3), so its body reads as empty at once instead of waiting for the connection to end.
    // Transfer-Encoding with Content-Length (a smuggling vector) and encodings other than `chunked` are refused. A
    // refusal closes the connection after the answer, the unread body not taken for the next request.
    std::optional<FramingRefusal> frame_body(const httplib::Request& req) const;

    // For the error handler: why the current request's chunked body was cut off while it was read (413 past the
    // limit, 400 malformed chunks); nothing when it was not.
    std::optional<FramingRefusal> body_cut_off() const;

private:
    bool process_and_close_socket(socket_t sock) override;
    std::string over_limit_message() const;

    const ConnectionLimits limits_;
    const std::function<void(ConnectionEvent)> on_event_;
};

}  // namespace rudder::serve
