// The absorbing-diffusion likelihood bound (rudder/runtime/likelihood.hpp). With the exact corpus denoiser the bound
// is tight: every one of the corpus's 24 distinct sentences has probability 1/24, so the estimate of -log p per
// sentence is log 24; a sentence the corpus does not hold gets a far larger bound; a continuous model is refused.
#include <gtest/gtest.h>

#include <cmath>

#include <rudder/runtime/likelihood.hpp>

#include "corpus_fixture.hpp"

namespace rudder {
namespace {

TEST(Likelihood, TheExactDenoisersBoundIsTheCorpusLogProbability) {
    const Model model = load_model(testing::corpus_model_dir(), Family::discrete);
    LikelihoodOptions options;
    options.draws = 64;
    options.batch_size = 8;
    options.seed = 3;
    const LikelihoodReport r = absorbing_nelbo(model, testing::corpus_sentences(), options);
    ASSERT_EQ(r.texts, 24);
    EXPECT_EQ(r.skipped_too_long, 0);
    EXPECT_EQ(r.length, 12);  // the longest sentence, 11 tokens, and its end
    int64_t tokens = 0;
    for (const auto& s : testing::corpus_sentences()) tokens += static_cast<int64_t>(model.tokenizer->encode(s).size()) + 1;
    EXPECT_EQ(r.tokens, tokens);
    const double standard_error = r.standard_error_per_token() * static_cast<double>(r.tokens) / r.texts;
    RecordProperty("nats_per_sentence", std::to_string(r.nats_per_text()));
    EXPECT_NEAR(r.nats_per_text(), std::log(24.0), 4 * standard_error + 0.02) << "standard error " << standard_error;
    EXPECT_LT(standard_error, 0.3);
    EXPECT_NEAR(r.perplexity_bound(), std::exp(r.nelbo_sum / static_cast<double>(r.tokens)), 1e-12);

    // A sentence from two of the corpus's: the exact posterior gives its words (almost) no probability.
    const LikelihoodReport mixed = absorbing_nelbo(model, {"The Eagle serves Italian food near the river ."}, options);
    EXPECT_GT(mixed.nats_per_text(), 10 * std::log(24.0));

    // Longer than the length asked for: skipped and counted.
    options.length = 6;
    const LikelihoodReport short_length = absorbing_nelbo(model, testing::corpus_sentences(), options);
    EXPECT_EQ(short_length.texts + short_length.skipped_too_long, 24);
    EXPECT_GT(short_length.skipped_too_long, 0);
}

TEST(Likelihood, AContinuousModelAndBadOptionsAreRefused) {
    const Model continuous = load_model(testing::corpus_model_dir(), Family::continuous);
    EXPECT_THROW(absorbing_nelbo(continuous, {"The Eagle is a pub ."}, {}), std::invalid_argument);
    const Model discrete = load_model(testing::corpus_model_dir(), Family::discrete);
    LikelihoodOptions none;
    none.draws = 0;
    EXPECT_THROW(absorbing_nelbo(discrete, {"The Eagle is a pub ."}, none), std::invalid_argument);
}

}  // namespace
}  // namespace rudder
