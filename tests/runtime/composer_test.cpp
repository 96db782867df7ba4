#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <limits>

#include "composer.hpp"

namespace {

using rudder::Combined;
using rudder::Composer;

TEST(ComposerApply, DeltasForbiddenAndFixedTokens) {
    // One sequence, two positions, four tokens, uniform to start with.
    const at::Tensor logp = at::log_softmax(at::zeros({1, 2, 4}), -1);
    Combined c;
    c.logit_delta = at::zeros({1, 2, 4});
    c.logit_delta.index_put_({0, 0, 1}, 2.0);
    c.forbidden = at::zeros({1, 2, 4}, at::kBool);
    c.forbidden.index_put_({0, 0, 3}, true);
    c.fixed = at::full({1, 2}, -1, at::kLong);
    c.fixed.index_put_({0, 1}, 2);

    const at::Tensor p = Composer::apply(logp, c, /*never_id=*/0).exp();
    // Position 0: token 0 never, token 3 forbidden, token 1 has e^2 the weight of token 2.
    EXPECT_FLOAT_EQ(p.index({0, 0, 0}).item<float>(), 0.0f);
    EXPECT_FLOAT_EQ(p.index({0, 0, 3}).item<float>(), 0.0f);
    EXPECT_NEAR(p.index({0, 0, 1}).item<float>() / p.index({0, 0, 2}).item<float>(), std::exp(2.0), 1e-3);
    EXPECT_NEAR(p[0][0].sum().item<float>(), 1.0f, 1e-6);
    // Position 1: fixed to token 2.
    EXPECT_FLOAT_EQ(p.index({0, 1, 2}).item<float>(), 1.0f);
}

TEST(ComposerApply, NothingContributedKeepsTheDistribution) {
    const at::Tensor logp = at::log_softmax(at::randn({2, 3, 5}), -1);
    EXPECT_TRUE(at::allclose(Composer::apply(logp, Combined{}, -1), logp, 1e-5, 1e-6));
}

TEST(ComposerControlled, ForbiddenTokensAreTheSameAsMaskedFill) {
    // A mask without runs, logits with -inf, NaN and +inf among them: the branch-free float32 path sets exactly the
    // values masked_fill_ sets; float64 takes masked_fill_ itself.
    at::Tensor logits = at::randn({3, 1000});
    logits.index_put_({0, 1}, -std::numeric_limits<float>::infinity());
    logits.index_put_({1, 2}, std::numeric_limits<float>::quiet_NaN());
    logits.index_put_({2, 3}, std::numeric_limits<float>::infinity());
    Combined c;
    c.forbidden = at::rand({3, 1000}).lt(0.5);
    c.forbidden.index_put_({1, 2}, true);
    for (const auto dtype : {at::kFloat, at::kDouble}) {
        const at::Tensor x = logits.to(dtype);
        const at::Tensor expected = x.clone().masked_fill_(c.forbidden, -std::numeric_limits<double>::infinity());
        const at::Tensor got = Composer::controlled(x, c, {}, -1);
        EXPECT_TRUE(got.isnan().equal(expected.isnan()));
        EXPECT_TRUE(at::nan_to_num(got, 7.0).equal(at::nan_to_num(expected, 7.0))) << dtype;
    }
}

TEST(ComposerControlled, ForbiddenBitsAreTheSameAsTheirBytes) {
    // Packed bits applied in one pass set what the unpacked mask sets: V not a multiple of 32 (the last word is
    // short), words with no bit, every bit and some bits, at picked rows and at all of them, float32 and float64, with
    // and without a logit delta.
    const int64_t N = 4, V = 1000, W = (V + 31) / 32;
    at::Tensor forbidden = at::rand({N, V}).lt(0.5);
    forbidden[1].zero_();
    forbidden[2].narrow(0, 64, 64).fill_(true);
    forbidden.index_put_({3, V - 1}, true);
    at::Tensor words = at::zeros({N, W}, at::kLong);  // token v is bit v % 32 of word v / 32
    for (int64_t v = 0; v < V; ++v)
        words.select(1, v / 32).bitwise_or_(forbidden.select(1, v).to(at::kLong) * (int64_t{1} << (v % 32)));
    Combined bytes, bits;
    bytes.forbidden = forbidden;
    bits.forbidden_bits = words.to(at::kInt);  // the low 32 bits, as the packed masks come
    EXPECT_TRUE(bits.forbidden_mask(V).equal(forbidden));
    at::Tensor logits = at::randn({N, V});
    logits.index_put_({0, 1}, std::numeric_limits<float>::quiet_NaN());
    const at::Tensor pick = at::tensor({3, 0, 2}, at::kLong);
    const at::Tensor delta = at::randn({N, V});
    for (const bool with_delta : {false, true}) {
        // Without a logit delta the bits are applied while the scores are copied; with one, to the sum in place.
        bytes.logit_delta = bits.logit_delta = with_delta ? delta : at::Tensor();
        for (const auto dtype : {at::kFloat, at::kDouble}) {
            const at::Tensor x = logits.to(dtype);
            for (const at::Tensor& rows : {at::Tensor(), pick}) {
                const at::Tensor scores = rows.defined() ? x.index_select(0, rows) : x;
                const at::Tensor before = at::nan_to_num(scores, 7.0);
                const at::Tensor expected = Composer::controlled(scores, bytes, rows, 5);
                const at::Tensor got = Composer::controlled(scores, bits, rows, 5);
                EXPECT_TRUE(got.isnan().equal(expected.isnan()));
                EXPECT_TRUE(at::nan_to_num(got, 7.0).equal(at::nan_to_num(expected, 7.0))) << dtype << with_delta;
                EXPECT_TRUE(at::nan_to_num(scores, 7.0).equal(before)) << "the scores were changed";
            }
        }
    }
}

}  // namespace
