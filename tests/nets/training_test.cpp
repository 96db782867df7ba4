// A few hundred Adam steps on eight sentences: each family's loss must fall clearly, and the bare reverse loop over
// the trained network (no Generator, no controllers) must reproduce training sentences for most samples.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <utility>
#include <iostream>
#include <string>
#include <vector>

#include "nets_fixture.hpp"
#include <rudder/nn/denoiser_net.hpp>

#include "transformer_denoiser.hpp"
#include "sampler.hpp"
#include "seeded_generator.hpp"

namespace rudder {
namespace {
using json = nlohmann::json;
using namespace rudder::testing;

constexpr int64_t kSamples = 64;
constexpr int64_t kSteps = 600;        // Adam steps
constexpr int64_t kSampleSteps = 100;  // reverse steps. The discrete family needs many: positions unmasked in the
                                       // same step are drawn independently (at 12 steps, one per position, only
                                       // about 70% of samples were training sentences; at 100, 80-90%)

// Small, but big enough to memorise eight sentences in a few hundred steps.
json small_config(const std::string& family, bool conditional) {
    json c = micro_config(family, conditional);
    c["dim"] = 64;
    c["layers"] = 2;
    c["heads"] = 4;
    c["ff_dim"] = 128;
    if (family == "continuous") c["schedule"] = {{"name", "sqrt"}, {"T", 2000}};
    return c;
}

struct Curve {
    double first = 0, last = 0;  // mean loss over the first and the last 10% of the steps
};

// Adam on the whole corpus, repeated `copies` times per batch.
Curve train(nn::DenoiserNet& net, int64_t steps, bool conditional, uint64_t seed, double lr = 3e-3) {
    const int64_t copies = 4;
    const nn::TrainingBatch batch{sentence_tokens().repeat({copies, 1}),
                                  conditional ? condition_tokens().repeat({copies, 1}) : at::Tensor()};
    torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(lr));
    auto gen = make_gen(seed);
    net.train();
    const int64_t window = std::max<int64_t>(steps / 10, 1);
    Curve curve;
    for (int64_t step = 0; step < steps; ++step) {
        adam.zero_grad();
        const at::Tensor loss = net.loss(batch, gen);
        loss.backward();
        adam.step();
        const double value = loss.item<double>();
        if (step < window) curve.first += value / static_cast<double>(window);
        if (step >= steps - window) curve.last += value / static_cast<double>(window);
    }
    return curve;
}

// The bare continuous loop: DDIM from noise, x0 estimated from the network's distribution, then rounding to the
// nearest embedding, as the Generator does with "x0": "interpolate".
at::Tensor sample_continuous(TransformerDenoiser& den, const GaussianSchedule& schedule, int64_t steps,
                             const std::vector<std::string>& conditions, uint64_t seed) {
    const at::Tensor E = den.embedding();
    const int64_t B = conditions.empty() ? kSamples : static_cast<int64_t>(conditions.size());
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, steps);
    auto gen = make_gen(seed);
    at::Tensor x = sampler.init({B, kLength, E.size(1)}, gen, E);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const DenoiserOutput out = den.denoise(x, sampler.t(i), conditions);
        x = sampler.step(x, at::matmul(out.logits.exp(), E), i, gen).sample;
    }
    const at::Tensor dist = x.pow(2).sum(-1, true) - 2 * at::matmul(x, E.t()) + E.pow(2).sum(-1);
    return dist.argmin(-1);
}

at::Tensor sample_discrete(TransformerDenoiser& den, const MaskSchedule& schedule, int64_t steps,
                           const std::vector<std::string>& conditions, uint64_t seed) {
    const int64_t B = conditions.empty() ? kSamples : static_cast<int64_t>(conditions.size());
    const int64_t mask = tokenizer()->mask_id();
    const DiscreteSampler sampler(schedule, DiscreteSampler::Kind::analytic, steps);
    auto gen = make_gen(seed);
    at::Tensor tokens = sampler.init(B, kLength, mask, at::kCPU);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        tokens = sampler.step(tokens, den.denoise(tokens, sampler.t(i), conditions).logits, i, mask, gen);
    }
    return tokens;
}

struct Reproduction {
    double share = 0;      // rows that are exactly a training sentence (the wanted one, if given)
    int64_t distinct = 0;  // how many different training sentences appear
};

// How the sampled rows match the training sentences; prints the first ones. `wanted`: per row, the sentence the
// condition asks for (empty: any sentence counts).
Reproduction report(const at::Tensor& tokens, const char* label, const std::vector<int64_t>& wanted = {}) {
    const auto match = matching_sentence(tokens);
    int64_t exact = 0;
    std::vector<bool> seen(sentences().size(), false);
    for (int64_t b = 0; b < tokens.size(0); ++b) {
        const int64_t m = match[static_cast<size_t>(b)];
        if (m >= 0) seen[static_cast<size_t>(m)] = true;
        exact += (wanted.empty() ? m >= 0 : m == wanted[static_cast<size_t>(b)]) ? 1 : 0;
        if (b < 12) {
            const at::Tensor row = tokens[b].contiguous();
            std::cout << "[" << label << "] " << (match[static_cast<size_t>(b)] >= 0 ? "corpus " : "NEW    ")
                      << tokenizer()->decode(row.data_ptr<int64_t>(), row.size(0)) << "\n";
        }
    }
    Reproduction r;
    r.share = static_cast<double>(exact) / static_cast<double>(tokens.size(0));
    r.distinct = std::count(seen.begin(), seen.end(), true);
    std::cout << "[" << label << "] " << (wanted.empty() ? "training sentences: " : "the condition's sentence: ")
              << exact << " / " << tokens.size(0) << "; distinct sentences: " << r.distinct << std::endl;
    return r;
}

// The eight meaning representations, each repeated for a batch of kSamples rows, and the sentence each asks for.
std::pair<std::vector<std::string>, std::vector<int64_t>> conditioned_batch() {
    std::vector<std::string> conditions;
    std::vector<int64_t> wanted;
    const auto n = static_cast<int64_t>(meaning_representations().size());
    for (int64_t b = 0; b < kSamples; ++b) {
        conditions.push_back(meaning_representations()[static_cast<size_t>(b % n)]);
        wanted.push_back(b % n);
    }
    return {conditions, wanted};
}

TEST(Training, ContinuousLearnsEightSentencesAndTheLoopReproducesThem) {
    at::manual_seed(21);
    auto net = std::make_shared<nn::ContinuousDenoiserNet>(small_config("continuous", false), *tokenizer());
    const Curve curve = train(*net, kSteps, false, 22);
    std::cout << "[continuous] mean loss over the first 10% of " << kSteps << " steps: " << curve.first
              << ", over the last 10%: " << curve.last << std::endl;
    EXPECT_LT(curve.last, 0.3 * curve.first);

    const GaussianSchedule schedule = net->schedule();
    TransformerDenoiser den(net, tokenizer());
    const Reproduction r = report(sample_continuous(den, schedule, kSampleSteps, {}, 23), "continuous");
    EXPECT_GT(r.share, 0.6);
    EXPECT_GE(r.distinct, 6);  // not one memorised sentence: most of the corpus comes out
}

// CDCD: the cross-entropy at noise levels drawn uniformly (the dev loss, whatever the warp) falls, and the bare loop
// (DDIM with eta = 0, i.e. CDCD's Euler steps in the variance-preserving form, over the learned warp's steps,
// feeding each step's estimate back as self-conditioning) reproduces the training sentences. With the warp alone
// (warp_uniform near 0) this failed: 5 of 64 samples, cross-entropy 0.30 at sigma_min, because the fit starves the
// low levels while their loss is still flat; half the levels uniform (the default) gave 56 of 64.
TEST(Training, CdcdLearnsEightSentencesAndTheLoopReproducesThem) {
    at::manual_seed(51);
    json config = small_config("continuous", false);
    config["objective"] = "cdcd";
    config["self_conditioning"] = true;
    config["schedule"] = {{"name", "cdcd"}, {"T", 2000}, {"sigma_min", 1.0}, {"sigma_max", 100.0}, {"warp_bins", 20}};
    auto net = std::make_shared<nn::ContinuousDenoiserNet>(config, *tokenizer());
    const nn::TrainingBatch batch{sentence_tokens().repeat({4, 1}), at::Tensor()};
    auto dev_loss = [&] {
        at::NoGradGuard no_grad;
        net->eval();
        auto gen = make_gen(99);
        const double value = net->loss(batch, gen).item<double>();
        net->train();
        return value;
    };
    const double before = dev_loss();
    train(*net, kSteps, false, 52);
    const double after = dev_loss();
    std::cout << "[cdcd] cross-entropy at uniform noise levels: " << before << " before, " << after << " after"
              << std::endl;
    EXPECT_LT(after, 0.3 * before);

    const GaussianSchedule schedule = net->schedule();
    TransformerDenoiser den(net, tokenizer());
    const at::Tensor E = den.embedding();
    const ContinuousSampler sampler(schedule, ContinuousSampler::Kind::ddim, kSampleSteps);
    auto gen = make_gen(53);
    at::Tensor x = sampler.init({kSamples, kLength, E.size(1)}, gen, E), previous;
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        Evidence evidence;
        evidence.self_condition = previous;
        const DenoiserOutput out = den.denoise(x, sampler.t(i), {}, evidence);
        previous = at::matmul(out.logits.exp(), E);
        x = sampler.step(x, previous, i, gen).sample;
    }
    const at::Tensor dist = x.pow(2).sum(-1, true) - 2 * at::matmul(x, E.t()) + E.pow(2).sum(-1);
    const Reproduction r = report(dist.argmin(-1), "cdcd");
    EXPECT_GT(r.share, 0.6);
    EXPECT_GE(r.distinct, 6);
}

TEST(Training, DiscreteLearnsEightSentencesAndTheLoopReproducesThem) {
    at::manual_seed(31);
    auto net = std::make_shared<nn::DiscreteDenoiserNet>(small_config("discrete", false), *tokenizer());
    const Curve curve = train(*net, kSteps, false, 32);
    std::cout << "[discrete] mean loss over the first 10% of " << kSteps << " steps: " << curve.first
              << ", over the last 10%: " << curve.last << std::endl;
    EXPECT_LT(curve.last, 0.3 * curve.first);

    const MaskSchedule schedule = net->mask_schedule();
    TransformerDenoiser den(net, tokenizer());
    const Reproduction r = report(sample_discrete(den, schedule, kSampleSteps, {}, 33), "discrete");
    EXPECT_GT(r.share, 0.6);
    EXPECT_GE(r.distinct, 6);
}

// SEDD's score entropy over the absorbing graph: the loss falls, and the clean-token distribution its scores imply
// (what the runtime samples with) reproduces the training sentences through the same analytic sampler as SUBS.
TEST(Training, ScoreEntropyAbsorbLearnsEightSentencesAndTheLoopReproducesThem) {
    at::manual_seed(61);
    json config = small_config("discrete", false);
    config["objective"] = "score_entropy";
    auto net = std::make_shared<nn::DiscreteDenoiserNet>(config, *tokenizer());
    const Curve curve = train(*net, kSteps, false, 62);
    std::cout << "[score entropy, absorb] mean loss over the first 10% of " << kSteps << " steps: " << curve.first
              << ", over the last 10%: " << curve.last << std::endl;
    EXPECT_LT(curve.last, 0.3 * curve.first);

    const MaskSchedule schedule = net->mask_schedule();
    TransformerDenoiser den(net, tokenizer());
    const Reproduction r = report(sample_discrete(den, schedule, kSampleSteps, {}, 63), "score entropy, absorb");
    EXPECT_GT(r.share, 0.6);
    EXPECT_GE(r.distinct, 6);
}

// Over the uniform graph the loss falls too, and Tweedie tau-leaping from uniform noise (every position drawn anew at
// every step) reproduces the training sentences.
TEST(Training, ScoreEntropyUniformLearnsEightSentencesAndTauLeapingReproducesThem) {
    at::manual_seed(71);
    json config = small_config("discrete", false);
    config["objective"] = "score_entropy";
    config["graph"] = "uniform";
    auto net = std::make_shared<nn::DiscreteDenoiserNet>(config, *tokenizer());
    EXPECT_TRUE(net->named_parameters().contains("time_mlp1.weight"));
    const Curve curve = train(*net, 3 * kSteps, false, 72);  // uniform noise is the harder task: it learns slower
    std::cout << "[score entropy, uniform] mean loss over the first 10% of " << 3 * kSteps << " steps: " << curve.first
              << ", over the last 10%: " << curve.last << std::endl;
    EXPECT_LT(curve.last, 0.5 * curve.first);

    TransformerDenoiser den(net, tokenizer());
    ASSERT_TRUE(den.traits().uniform_noise.has_value());
    const UniformSampler sampler(*den.traits().uniform_noise, UniformSampler::Kind::analytic, kSampleSteps);
    auto gen = make_gen(73);
    at::Tensor tokens = sampler.init(kSamples, kLength, tokenizer()->vocab_size(), gen, at::kCPU);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const at::Tensor log_post = den.denoise(tokens, sampler.t(i), {}).logits.reshape({kSamples * kLength, -1});
        tokens = DiscreteSampler::draw(sampler.step_log_probs(log_post, tokens.reshape({-1}), i), gen)
                     .view({kSamples, kLength});
    }
    // Measured 37 of 64 (the absorbing micro models: 80-90%): every position is redrawn at every step, so a late
    // wrong draw at one position is not always mended.
    const Reproduction r = report(tokens, "score entropy, uniform");
    EXPECT_GT(r.share, 0.4);
    EXPECT_GE(r.distinct, 5);
}

// With condition dropout on, the same network serves both: conditioned samples are the meaning representation's
// sentence, unconditioned ones still training sentences. Dropout 0.5 gives the unconditional mode enough of the
// 600 steps to learn (at 0.2 its share varied from 55% to 86% with the seed).
TEST(Training, ConditionedSamplesFollowTheirMeaningRepresentation) {
    for (const std::string family : {"continuous", "discrete"}) {
        at::manual_seed(41);
        json config = small_config(family, true);
        config["condition_dropout"] = 0.5;
        const auto net = nn::make_denoiser_net(config, *tokenizer());
        const Curve curve = train(*net, kSteps, true, 42);
        std::cout << "[" << family << ", conditional] mean loss over the first 10% of " << kSteps
                  << " steps: " << curve.first << ", over the last 10%: " << curve.last << std::endl;
        EXPECT_LT(curve.last, 0.3 * curve.first);

        TransformerDenoiser den(net, tokenizer());
        const auto [conditions, wanted] = conditioned_batch();
        at::Tensor cond_samples, free_samples;
        if (family == "continuous") {
            const GaussianSchedule schedule = dynamic_cast<nn::ContinuousDenoiserNet&>(*net).schedule();
            cond_samples = sample_continuous(den, schedule, kSampleSteps, conditions, 43);
            free_samples = sample_continuous(den, schedule, kSampleSteps, {}, 44);
        } else {
            const MaskSchedule schedule = dynamic_cast<nn::DiscreteDenoiserNet&>(*net).mask_schedule();
            cond_samples = sample_discrete(den, schedule, kSampleSteps, conditions, 43);
            free_samples = sample_discrete(den, schedule, kSampleSteps, {}, 44);
        }
        const std::string label = family + ", conditioned";
        EXPECT_GT(report(cond_samples, label.c_str(), wanted).share, 0.75) << family;
        const std::string free_label = family + ", unconditioned";
        EXPECT_GT(report(free_samples, free_label.c_str()).share, 0.6) << family;
    }
}

}  // namespace
}  // namespace rudder
