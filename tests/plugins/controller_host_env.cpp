// Process isolation's tests (isolation_test.cpp, commit_test.cpp) start the build's controller host, also when this
// binary runs outside ctest (ctest sets it through test_environment.cmake): set before main, so before any test.
#include <cstdlib>

namespace {

const bool controller_host_is_set = ::setenv("RUDDER_CONTROLLER_HOST", RUDDER_TEST_CONTROLLER_HOST, 0) == 0;

}  // namespace
