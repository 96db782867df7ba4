// rudder::parallel_rows: every row exactly once, in contiguous shares of at least a grain, on as many threads as
// LibTorch's count allows (the loop that ran on one thread when at::parallel_for's pragma was compiled away), one
// share inside a region already parallel, and an exception thrown on any thread reaching the caller.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <rudder/base/parallel_rows.hpp>

namespace {

struct Shares {
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::set<std::thread::id> threads;
    void add(int64_t first, int64_t last) {
        std::lock_guard<std::mutex> lock(mutex);
        ranges.emplace_back(first, last);
        threads.insert(std::this_thread::get_id());
    }
};

class ParallelRows : public ::testing::Test {
protected:
    void SetUp() override {
        threads_ = at::get_num_threads();
        at::set_num_threads(2);
    }
    void TearDown() override { at::set_num_threads(threads_); }
    int threads_ = 1;
};

TEST_F(ParallelRows, EveryRowOnceInContiguousSharesOnTheThreadsLibTorchCounts) {
    Shares shares;
    std::vector<std::atomic<int>> seen(1000);
    rudder::parallel_rows(0, 1000, 256, [&](int64_t first, int64_t last) {
        shares.add(first, last);
        for (int64_t r = first; r < last; ++r) seen[static_cast<size_t>(r)]++;
    });
    for (const auto& count : seen) EXPECT_EQ(count.load(), 1);
    std::sort(shares.ranges.begin(), shares.ranges.end());
    ASSERT_EQ(shares.ranges.size(), 2u);
    EXPECT_EQ(shares.ranges[0], std::make_pair(int64_t{0}, int64_t{500}));
    EXPECT_EQ(shares.ranges[1], std::make_pair(int64_t{500}, int64_t{1000}));
    EXPECT_EQ(shares.threads.size(), 2u) << "the shares ran on one thread";
}

TEST_F(ParallelRows, FewerRowsThanTwoGrainsAndNestedLoopsRunAsOneShare) {
    Shares small;
    rudder::parallel_rows(3, 10, 8, [&](int64_t first, int64_t last) { small.add(first, last); });
    ASSERT_EQ(small.ranges.size(), 1u);
    EXPECT_EQ(small.ranges[0], std::make_pair(int64_t{3}, int64_t{10}));
    Shares inner;
    rudder::parallel_rows(0, 2, 1, [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r)
            rudder::parallel_rows(r * 100, r * 100 + 100, 1, [&](int64_t a, int64_t b) { inner.add(a, b); });
    });
    std::sort(inner.ranges.begin(), inner.ranges.end());
    ASSERT_EQ(inner.ranges.size(), 2u);
    EXPECT_EQ(inner.ranges[0], std::make_pair(int64_t{0}, int64_t{100}));
    EXPECT_EQ(inner.ranges[1], std::make_pair(int64_t{100}, int64_t{200}));
    rudder::parallel_rows(5, 5, 1, [&](int64_t, int64_t) { ADD_FAILURE() << "called for no rows"; });
}

TEST_F(ParallelRows, AnExceptionOnAnyShareReachesTheCallerAfterEveryShareEnds) {
    std::atomic<int> ended{0};
    EXPECT_THROW(rudder::parallel_rows(0, 100, 1,
                                       [&](int64_t first, int64_t) {
                                           ended++;
                                           if (first > 0) throw std::runtime_error("row failed");
                                       }),
                 std::runtime_error);
    EXPECT_EQ(ended.load(), 2);
}

}  // namespace
