// The playground page (host/serve/playground/index.html), built into the server so an installed rudder serves it.
#pragma once

namespace rudder::serve {

const char* playground_page();

}  // namespace rudder::serve
