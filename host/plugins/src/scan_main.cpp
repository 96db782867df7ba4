// rudder-plugin-scan LIBRARY [ALARM_SECONDS]: loads one plugin library with the host's checks and writes what it
// offers (or why it is rejected) as one JSON object to file descriptor 3. The registry runs it as a child process,
// so a library that crashes, aborts, exits or hangs while loading takes only this process down. Not for users.
#include "plugin_index.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        static const char usage[] = "usage: rudder-plugin-scan LIBRARY [ALARM_SECONDS] (result on fd 3)\n";
        (void)!::write(2, usage, sizeof usage - 1);
        return 2;
    }
    if (argc == 3) ::alarm(static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)));
    std::string out;
    try {
        const rudder::plugins::ScanResult result = rudder::plugins::describe_library(argv[1]);
        out =
            rudder::plugins::scan_result_to_json(result).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (...) {
        return 3;
    }
    for (size_t done = 0; done < out.size();) {
        const ssize_t n = ::write(3, out.data() + done, out.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) ::_exit(4);
        done += static_cast<size_t>(n);
    }
    ::close(3);
    // The library stays loaded: no destructor of its gets a chance to crash or hang after the result is out.
    ::_exit(0);
}
