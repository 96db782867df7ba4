// The compute threads (rudder/nn/compute_threads.hpp): the cap, the cores other processes keep busy, and the
// cores shared among computations of one process. Speed is measured in bench/ (bench/threads.sh), not here.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <rudder/nn/compute_threads.hpp>

namespace {

using namespace rudder;

struct RestoreSetting {
    ~RestoreSetting() { set_compute_threads(0); }
};

TEST(ComputeThreads, TheCapBoundsAShareAndIsAppliedToTheCallingThread) {
    RestoreSetting restore;
    set_compute_threads(1);
    ComputeShare one;
    EXPECT_EQ(one.threads(), 1);
    EXPECT_EQ(at::get_num_threads(), 1);
    set_compute_threads(0);
    const int n = one.refresh();
    EXPECT_GE(n, 1);
    EXPECT_LE(n, available_cores());
    EXPECT_EQ(at::get_num_threads(), n);
}

TEST(ComputeThreads, SharesHeldAtOnceSplitTheCores) {
    RestoreSetting restore;
    set_compute_threads(0);
    ComputeShare a;
    ComputeShare b;
    const int cores = available_cores();
    EXPECT_LE(a.refresh() + b.refresh(), std::max(2, cores));
    EXPECT_GE(a.threads(), 1);
    EXPECT_GE(b.threads(), 1);
}

TEST(ComputeThreads, AProcessThatKeepsACoreBusyIsSeenAndLeftItsCore) {
    RestoreSetting restore;
    set_compute_threads(0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        for (volatile unsigned long i = 0;; i = i + 1) {
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int busy = busy_threads_elsewhere();
    ComputeShare share;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    EXPECT_GE(busy, 1);  // the child spins without a pause: it is running or runnable at every sample
    if (available_cores() >= 2) {
        EXPECT_LE(share.threads(), available_cores() - 1);
    }
}

}  // namespace
