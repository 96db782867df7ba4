// A way into a Server for the fuzz target (tests/fuzz/fuzz_http.cpp), which drives the routes without a socket.
#pragma once

#include <string>

namespace rudder::serve {

class Server;  // (rudder/serve/server.hpp; declared only, so that this header sits below the server it reaches into)

struct ServerInternals {
    // HttpServer::exchange on the server's routes: the requests in `input` as one connection would carry them, and
    // what the server writes back.
    static std::string exchange(Server& server, const std::string& input);
};

}  // namespace rudder::serve
