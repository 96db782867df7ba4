// The step's candidates (top_candidates): each row's k highest log-probabilities, highest first, ties to the lower id.
#include <rudder/plugins/plugins.hpp>

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace rudder::plugins {
namespace {

TEST(Candidates, AreTheTopKTiesToTheLowerId) {
    // The k largest scores, highest first, each at its id, a tie going to the lower id: the first k of a stable
    // descending sort. Random scores, a vocabulary that is not a multiple of the scan's block, k above V, and heavy
    // ties.
    const auto expect_stable_top = [](const at::Tensor& scores, int64_t k) {
        const auto [top, ids] = top_candidates(scores, k);
        const int64_t kept = std::min(k, scores.size(1));
        const auto [sorted, order] = at::sort(scores, /*stable=*/true, /*dim=*/1, /*descending=*/true);
        EXPECT_TRUE(top.equal(sorted.narrow(1, 0, kept))) << scores.sizes() << " k " << k;
        EXPECT_TRUE(ids.equal(order.narrow(1, 0, kept))) << scores.sizes() << " k " << k;
    };
    for (const int64_t V : {151936, 151937, 300, 50}) {
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(V));
        expect_stable_top(at::log_softmax(at::randn({4, V}, gen), 1), 64);
    }
    expect_stable_top(at::randint(0, 5, {2, 151936}).to(at::kFloat), 64);
    expect_stable_top(at::full({1, 1000}, -1e4f), 8);
    // The largest score in the short tail after the last whole block.
    at::Tensor last = at::zeros({1, 151937});
    last.index_put_({0, 151936}, 5.0f);
    EXPECT_EQ(std::get<1>(top_candidates(last, 3))[0][0].item<int64_t>(), 151936);
    // NaN ranks as -inf (a tie with -inf going to the lower id).
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const auto [top, ids] = top_candidates(at::tensor({nan, -inf, 2.0f, nan, 1.0f}).view({1, 5}), 4);
    EXPECT_TRUE(ids.equal(at::tensor({2, 4, 0, 1}, at::kLong).view({1, 4})));
    EXPECT_TRUE(std::isnan(top[0][2].item<float>()));
    // Past the first block too: NaN in blocks that hold the largest scores.
    at::Tensor spread = at::randn({1, 1000});
    spread.index_put_({0, at::tensor({100, 101, 500, 999}, at::kLong)}, std::numeric_limits<float>::quiet_NaN());
    spread.index_put_({0, at::tensor({102, 501}, at::kLong)}, 9.0f);
    const auto [spread_top, spread_ids] = top_candidates(spread, 8);
    const at::Tensor order =
        std::get<1>(at::sort(at::nan_to_num(spread, -inf), /*stable=*/true, 1, /*descending=*/true));
    EXPECT_TRUE(spread_ids.equal(order.narrow(1, 0, 8)));
    EXPECT_EQ(spread_top[0][0].item<float>(), 9.0f);
}

}  // namespace
}  // namespace rudder::plugins
