// allocator_is_tcmalloc(), which the run-memory estimate follows, against what the process really allocates with:
// ctest runs this test plain (glibc's malloc) and again with tcmalloc preloaded (runtime.allocator_tcmalloc), and
// says which through RUDDER_TEST_EXPECT_TCMALLOC.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <rudder/base/memory.hpp>

TEST(Allocator, IsTcmallocExactlyWhenTheProcessAllocatesWithIt) {
    const char* expect = std::getenv("RUDDER_TEST_EXPECT_TCMALLOC");
    EXPECT_EQ(rudder::allocator_is_tcmalloc(), expect != nullptr && std::string(expect) == "1");
}
