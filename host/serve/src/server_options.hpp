// The server's options with every default decided (Server's constructor takes them so): isolation, the request
// memory limit, the model folders; std::invalid_argument naming the option that is out of range.
#pragma once

#include <rudder/serve/server.hpp>

namespace rudder::serve {

ServerOptions resolved_options(ServerOptions options);

}  // namespace rudder::serve
