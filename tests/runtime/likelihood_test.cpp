// The likelihood bounds (rudder/runtime/likelihood.hpp): MDLM's for absorbing noise, SEDD's for uniform noise and the
// Gaussian chain's for the continuous family. With the exact corpus denoiser each bound is tight: every one of the
// corpus's 24 distinct sentences has probability 1/24, so the estimate of -log p per sentence is log 24 (for the
// continuous chain, up to its T steps' discretisation); a sentence the corpus does not hold gets a far larger bound.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <rudder/runtime/likelihood.hpp>

#include "corpus_fixture.hpp"

namespace rudder {
namespace {

// Enough draws that the exact denoiser's bound is within a few hundredths of log 24.
LikelihoodOptions exact_bound_options() {
    LikelihoodOptions options;
    options.draws = 64;
    options.batch_size = 8;
    options.seed = 3;
    return options;
}

TEST(Likelihood, TheExactDenoisersBoundIsTheCorpusLogProbability) {
    const Model model = load_model(testing::corpus_model_dir(), Family::discrete);
    LikelihoodOptions options = exact_bound_options();
    const LikelihoodReport r = nelbo(model, testing::corpus_sentences(), options);
    ASSERT_EQ(r.texts, 24);
    EXPECT_EQ(r.skipped_too_long, 0);
    EXPECT_EQ(r.length, 12);  // the longest sentence, 11 tokens, and its end
    int64_t tokens = 0;
    for (const auto& s : testing::corpus_sentences())
        tokens += static_cast<int64_t>(model.tokenizer->encode(s).size()) + 1;
    EXPECT_EQ(r.tokens, tokens);
    const double standard_error = r.standard_error_per_token() * static_cast<double>(r.tokens) / r.texts;
    RecordProperty("nats_per_sentence", std::to_string(r.nats_per_text()));
    EXPECT_NEAR(r.nats_per_text(), std::log(24.0), 4 * standard_error + 0.02) << "standard error " << standard_error;
    EXPECT_LT(standard_error, 0.3);
    EXPECT_NEAR(r.perplexity_bound(), std::exp(r.nelbo_sum / static_cast<double>(r.tokens)), 1e-12);

    // A sentence from two of the corpus's: the exact posterior gives its words (almost) no probability.
    const LikelihoodReport mixed = nelbo(model, {"The Eagle serves Italian food near the river ."}, options);
    EXPECT_GT(mixed.nats_per_text(), 10 * std::log(24.0));

    // Longer than the length asked for: skipped and counted.
    options.length = 6;
    const LikelihoodReport short_length = nelbo(model, testing::corpus_sentences(), options);
    EXPECT_EQ(short_length.texts + short_length.skipped_too_long, 24);
    EXPECT_GT(short_length.skipped_too_long, 0);
}

// SEDD's bound under uniform noise, with the exact corpus posterior: tight too, log 24 per sentence.
TEST(Likelihood, TheUniformNoiseBoundOfTheExactDenoiserIsTheCorpusLogProbability) {
    const auto dir = std::filesystem::path(testing::corpus_model_dir().string() + "-likelihood-uniform");
    std::filesystem::remove_all(dir);
    std::filesystem::copy(testing::corpus_model_dir(), dir);
    nlohmann::json config = read_json_file(dir / "config.json");
    config["uniform_noise"] = {{"sigma_min", 1e-4}, {"sigma_max", 20.0}};
    std::ofstream(dir / "config.json") << config.dump(2);
    const Model model = load_model(dir, Family::discrete);
    EXPECT_EQ(nelbo_kind(model), "sedd_uniform");
    LikelihoodOptions options = exact_bound_options();
    const LikelihoodReport r = nelbo(model, testing::corpus_sentences(), options);
    ASSERT_EQ(r.texts, 24);
    const double standard_error = r.standard_error_per_token() * static_cast<double>(r.tokens) / r.texts;
    RecordProperty("nats_per_sentence", std::to_string(r.nats_per_text()));
    std::cout << "[uniform noise] bound " << r.nats_per_text() << " nats per sentence (log 24 = " << std::log(24.0)
              << "), standard error " << standard_error << std::endl;
    EXPECT_NEAR(r.nats_per_text(), std::log(24.0), 4 * standard_error + 0.02) << "standard error " << standard_error;
    EXPECT_LT(standard_error, 0.5);
    const LikelihoodReport mixed = nelbo(model, {"The Eagle serves Italian food near the river ."}, options);
    EXPECT_GT(mixed.nats_per_text(), 5 * std::log(24.0));
}

// The continuous chain's bound with the exact posterior: an upper bound on log 24 that the T steps of its
// chain (1,000 for the fixture) make close to it.
TEST(Likelihood, TheContinuousBoundOfTheExactDenoiserIsCloseAboveTheCorpusLogProbability) {
    const Model model = load_model(testing::corpus_model_dir(), Family::continuous);
    EXPECT_EQ(nelbo_kind(model), "ddpm_vlb");
    LikelihoodOptions options = exact_bound_options();
    options.draws = 1024;  // the steps' weights span orders of magnitude: more draws than the discrete bounds take
    const LikelihoodReport r = nelbo(model, testing::corpus_sentences(), options);
    ASSERT_EQ(r.texts, 24);
    const double standard_error = r.standard_error_per_token() * static_cast<double>(r.tokens) / r.texts;
    RecordProperty("nats_per_sentence", std::to_string(r.nats_per_text()));
    std::cout << "[continuous] bound " << r.nats_per_text() << " nats per sentence (log 24 = " << std::log(24.0)
              << "), standard error " << standard_error << std::endl;
    EXPECT_GT(r.nats_per_text(), std::log(24.0) - 4 * standard_error) << "standard error " << standard_error;
    EXPECT_LT(r.nats_per_text(), std::log(24.0) + 4 * standard_error + 0.05) << "standard error " << standard_error;
    EXPECT_LT(standard_error, 0.1);
    const LikelihoodReport mixed = nelbo(model, {"The Eagle serves Italian food near the river ."}, options);
    EXPECT_GT(mixed.nats_per_text(), 10 * std::log(24.0));
}

TEST(Likelihood, BadOptionsAreRefused) {
    const Model discrete = load_model(testing::corpus_model_dir(), Family::discrete);
    LikelihoodOptions none;
    none.draws = 0;
    EXPECT_THROW(nelbo(discrete, {"The Eagle is a pub ."}, none), std::invalid_argument);
    LikelihoodOptions no_batch;
    no_batch.batch_size = 0;
    const Model continuous = load_model(testing::corpus_model_dir(), Family::continuous);
    EXPECT_THROW(nelbo(continuous, {"The Eagle is a pub ."}, no_batch), std::invalid_argument);
}

// The corpus model's words with no padding token, as a checkpoint trained on packed text has.
class NoPadTokenizer final : public Tokenizer {
public:
    explicit NoPadTokenizer(std::shared_ptr<const Tokenizer> words) : words_(std::move(words)) {}
    std::vector<int64_t> encode(std::string_view text) const override { return words_->encode(text); }
    std::string decode(const int64_t* ids, int64_t n) const override { return words_->decode(ids, n); }
    int64_t vocab_size() const override { return words_->vocab_size(); }
    const std::string& token(int64_t id) const override { return words_->token(id); }
    int64_t pad_id() const override { return -1; }
    int64_t unk_id() const override { return words_->unk_id(); }
    int64_t mask_id() const override { return words_->mask_id(); }
    std::string type() const override { return words_->type(); }

private:
    std::shared_ptr<const Tokenizer> words_;
};

TEST(Likelihood, AModelWithoutAPaddingTokenIsRefusedSayingWhy) {
    Model model = load_model(testing::corpus_model_dir(), Family::discrete);
    model.tokenizer = std::make_shared<NoPadTokenizer>(model.tokenizer);
    try {
        nelbo(model, {"The Eagle is a pub ."}, {});
        FAIL() << "a model without a padding token was scored";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("has no padding token"), std::string::npos) << e.what();
    }
}

// A checkpoint trained on packed documents (MDLM-OWT and the others with GPT-2's vocabulary) pads with its
// end-of-text, which ends generated texts, but it never saw a padded sequence: its bound of one is not computed.
TEST(Likelihood, AModelTrainedOnPackedTextIsRefusedSayingWhy) {
    Model model = load_model(testing::corpus_model_dir(), Family::discrete);
    model.training_layout = "packed documents joined by <|endoftext|>, never padded";
    try {
        nelbo(model, {"The Eagle is a pub ."}, {});
        FAIL() << "a model trained on packed text was scored on padded texts";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("was trained on packed documents"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace rudder
