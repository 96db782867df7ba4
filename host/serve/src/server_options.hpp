// The server's options with every default decided (Server's constructor takes them so): isolation, the request
// memory limit, the model folders; std::invalid_argument naming the option that is out of range. The options
// themselves are public (rudder/serve/server_options.hpp: an application sets them); deciding them is the server's.
#pragma once

#include <rudder/serve/server_options.hpp>

namespace rudder::serve {

ServerOptions resolved_options(ServerOptions options);

}  // namespace rudder::serve
