// End to end: recipe -> model -> plugins -> reverse loop -> decoded text with verdicts, for both families, on the
// exact corpus denoiser. With the closed-form posterior a constraint must select exactly the matching sentences.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "composer.hpp"
#include "corpus_fixture.hpp"
#include <rudder/runtime/generator.hpp>

namespace {

using rudder::Generator;
using rudder::SampleResult;
namespace fs = std::filesystem;

rudder::plugins::Registry& registry() {
    static rudder::plugins::Registry r({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    return r;
}

// The corpus model diffusing with uniform noise (the discrete family; config.json's "uniform_noise").
fs::path uniform_corpus_model_dir() {
    static const fs::path dir = [] {
        const fs::path d = rudder::testing::corpus_model_dir().string() + "-uniform";
        fs::remove_all(d);
        fs::copy(rudder::testing::corpus_model_dir(), d);
        nlohmann::json config = rudder::read_json_file(d / "config.json");
        config["uniform_noise"] = {{"sigma_min", 1e-4}, {"sigma_max", 20.0}};
        std::ofstream(d / "config.json") << config.dump(2);
        return d;
    }();
    return dir;
}

// `family`: "continuous", "discrete" or "uniform" (the discrete family with uniform noise).
std::string recipe_text(const std::string& family, const std::string& controllers, int64_t samples = 16,
                        uint64_t seed = 1, const std::string& extra = "") {
    const bool continuous = family == "continuous", uniform = family == "uniform";
    const fs::path model = uniform ? uniform_corpus_model_dir() : rudder::testing::corpus_model_dir();
    return R"({"model": ")" + model.string() + R"(", "family": ")" + (uniform ? "discrete" : family) +
           R"(", "sampler": {"name": ")" + (continuous ? "ddim" : "analytic") + R"(", "steps": )" + "200" +
           R"(}, "samples": )" + std::to_string(samples) + R"(, "batch_size": 8, "max_length": 14, "seed": )" +
           std::to_string(seed) + extra + R"(, "controllers": [)" + controllers + "]}";
}

std::vector<SampleResult> generate(const std::string& text) {
    Generator g(rudder::parse_recipe(text, "."), registry());
    return g.generate();
}

// Whether a sample is exactly one of the corpus sentences (compared as token ids: decoding joins punctuation).
bool in_corpus(const SampleResult& sample) {
    static const std::set<std::vector<int64_t>> corpus = [] {
        const auto tok = rudder::WordTokenizer::load((rudder::testing::corpus_model_dir() / "vocab.txt").string());
        std::set<std::vector<int64_t>> out;
        for (const auto& s : rudder::testing::corpus_sentences()) out.insert(tok.encode(s));
        return out;
    }();
    return corpus.count(std::vector<int64_t>(sample.tokens.begin(), sample.tokens.begin() + sample.n_tokens)) > 0;
}

// Share of samples that every controller judged satisfied, and share that are corpus sentences.
struct Tally {
    double satisfied = 0, in_corpus = 0;
};
Tally tally(const std::vector<SampleResult>& samples) {
    Tally t;
    for (const auto& s : samples) {
        bool all = true;
        for (const auto& c : s.controls) all = all && c.verdict.satisfied == 1;
        t.satisfied += all ? 1 : 0;
        t.in_corpus += in_corpus(s) ? 1 : 0;
    }
    t.satisfied /= static_cast<double>(samples.size());
    t.in_corpus /= static_cast<double>(samples.size());
    return t;
}

class Generation : public ::testing::TestWithParam<std::string> {};

TEST_P(Generation, UnguidedSamplesAreCorpusSentences) {
    // Positions unmasked in the same discrete step are drawn independently from exact marginals, so a few samples
    // mix two sentences (measured 96-98% exact at 200 steps); 64 samples keep the estimate stable.
    const auto samples = generate(recipe_text(GetParam(), "", 64));
    ASSERT_EQ(samples.size(), 64u);
    EXPECT_GE(tally(samples).in_corpus, 0.9) << samples[0].text;
}

TEST_P(Generation, LengthSelectsSentencesOfThatLength) {
    const auto samples = generate(recipe_text(GetParam(), R"({"plugin": "length", "params": {"tokens": 6}})"));
    for (const auto& s : samples) {
        EXPECT_EQ(s.n_tokens, 6) << s.text;
        ASSERT_EQ(s.controls.size(), 1u);
        EXPECT_EQ(s.controls[0].label, "length");
        EXPECT_EQ(s.controls[0].verdict.satisfied, 1);
        EXPECT_DOUBLE_EQ(s.controls[0].verdict.score, 6.0);
    }
    const Tally t = tally(samples);
    EXPECT_EQ(t.satisfied, 1.0);
    EXPECT_GE(t.in_corpus, 0.9);
}

TEST_P(Generation, SpanPrefixSelectsMatchingSentences) {
    const auto samples = generate(recipe_text(GetParam(), R"({"plugin": "span", "params": {"prefix": "The Eagle"}})"));
    for (const auto& s : samples) EXPECT_EQ(s.text.rfind("The Eagle", 0), 0u) << s.text;
    const Tally t = tally(samples);
    EXPECT_EQ(t.satisfied, 1.0);
    EXPECT_GE(t.in_corpus, 0.9);
}

TEST_P(Generation, InfillingBetweenLeftAndRightContext) {
    const auto samples = generate(recipe_text(
        GetParam(),
        R"({"plugin": "span", "params": {"prefix": "Zizzi", "suffix": "food in the city centre .", "length": 9}})"));
    const Tally t = tally(samples);
    EXPECT_EQ(t.satisfied, 1.0);
    // Exactly one corpus sentence fits: "Zizzi serves English food in the city centre ."
    EXPECT_GE(t.in_corpus, 0.9) << samples[0].text;
}

TEST_P(Generation, LengthAndSpanComposed) {
    const auto samples = generate(recipe_text(GetParam(), R"({"plugin": "length", "params": {"tokens": 7}},
        {"plugin": "span", "params": {"words": [{"position": 2, "text": "a"}]}})"));
    for (const auto& s : samples) ASSERT_EQ(s.controls.size(), 2u);
    const Tally t = tally(samples);
    EXPECT_EQ(t.satisfied, 1.0);
    EXPECT_GE(t.in_corpus, 0.9) << samples[0].text;
}

TEST_P(Generation, SameSeedSameOutputOtherSeedOther) {
    const std::string ctl = R"({"plugin": "length", "params": {"tokens": 6}})";
    const auto a = generate(recipe_text(GetParam(), ctl, 8, 42));
    const auto b = generate(recipe_text(GetParam(), ctl, 8, 42));
    const auto c = generate(recipe_text(GetParam(), ctl, 8, 43));
    bool differs = false;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].tokens, b[i].tokens);
        differs = differs || a[i].tokens != c[i].tokens;
    }
    EXPECT_TRUE(differs);
}

// Found before sampling, when the generator is made, in every family.
TEST_P(Generation, ConflictingControllersAreNamed) {
    try {
        generate(recipe_text(GetParam(), R"({"plugin": "length", "params": {"tokens": 6}},
                                              {"plugin": "span", "params": {"prefix": "The", "suffix": ".", "length": 7}})"));
        FAIL() << "conflicting lengths were accepted";
    } catch (const rudder::RecipeError& e) {
        EXPECT_NE(std::string(e.what()).find("'length' and 'span'"), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(BothFamilies, Generation, ::testing::Values("discrete", "continuous", "uniform"));

// A fixed token that another controller's packed mask forbids (span's pad after 5 tokens, length's ban of pad before
// 6): found before any sampling, when the generator is made (validation), in both families, at both controllers'
// pointers, the token named in words.
TEST(GenerationErrors, FixedTokenAPackedMaskForbidsIsNamed) {
    for (const std::string family : {"continuous", "discrete"}) {
        try {
            generate(recipe_text(family, R"({"plugin": "length", "params": {"tokens": 6}},
                                            {"plugin": "span", "params": {"suffix": ".", "length": 5}})"));
            ADD_FAILURE() << family << ": a fixed pad that length forbids was accepted";
        } catch (const rudder::RecipeError& e) {
            ASSERT_EQ(e.issues().size(), 2u) << e.what();
            EXPECT_EQ(e.issues()[0].pointer, "/controllers/1");
            EXPECT_EQ(e.issues()[1].pointer, "/controllers/0");
            EXPECT_NE(
                e.issues()[0].message.find("'span' fixes the end of the text at position 5, which 'length' forbids"),
                std::string::npos)
                << e.what();
        }
    }
}

// Two controllers that fix different tokens at one position (length 3 and a longer prefix): found by validation.
TEST(GenerationErrors, ConflictingFixedTokensAreFoundBeforeSampling) {
    try {
        generate(recipe_text("discrete", R"({"plugin": "length", "params": {"tokens": 3}},
                                            {"plugin": "span", "params": {"prefix": "The Eagle is a pub"}})"));
        FAIL() << "length 3 with a 5-token prefix was accepted";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 2u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/controllers/0");
        EXPECT_EQ(e.issues()[1].pointer, "/controllers/1");
        EXPECT_NE(e.issues()[0].message.find(
                      "controllers 'length' and 'span' fix different tokens at position 3: the end of the text and"),
                  std::string::npos)
            << e.what();
    }
}

// Threshold and factor decoding take the steps their blocks need: the run's bound, which controllers and progress are
// told, is one step a position whatever `steps` says.
TEST(GenerationErrors, ParallelDecodingIsBoundByTheLength) {
    for (const char* sampler : {R"({"name": "llada", "steps": 8, "threshold": 0.9})",
                                R"({"name": "dream", "steps": 8, "block_length": 4, "threshold": 0.9})"}) {
        const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                                 R"(", "family": "discrete", "max_length": 12, "sampler": )" + sampler + "}";
        Generator g(rudder::parse_recipe(text, "."), registry());
        EXPECT_EQ(g.recipe().sampler.steps, 12) << sampler;  // an upper bound: one position a step
    }
}

// A temperature is 0 (the arg-max, where the sampler takes it) or at least 0.01: below that the scores divided by it
// overflow float32, and a temperature of 1e-38 once passed validation and failed the run with a 500 that blamed the
// controllers (issue 64).
TEST(GenerationErrors, TemperaturesBelowWhatASamplerComputesAreRefused) {
    const auto issue_of = [](const std::string& sampler) {
        const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                                 R"(", "family": "discrete", "max_length": 12, "sampler": )" + sampler + "}";
        try {
            Generator g(rudder::parse_recipe(text, "."), registry());
        } catch (const rudder::RecipeError& e) {
            for (const auto& i : e.issues())
                if (i.pointer == "/sampler/temperature") return i.message;
            return std::string("other issues only");
        }
        return std::string();
    };
    for (const char* tiny : {"1e-38", "1e-300", "0.009"}) {
        for (const char* name : {"analytic", "confidence", "llada"}) {
            const std::string message =
                issue_of(std::string(R"({"name": ")") + name + R"(", "steps": 12, "temperature": )" + tiny + "}");
            EXPECT_NE(message.find("expected 0 (the most probable token) or a number in [0.01, 100]"),
                      std::string::npos)
                << name << " " << tiny << ": " << message;
        }
    }
    for (const char* fine : {"0", "0.01", "1", "100"})
        EXPECT_EQ(issue_of(std::string(R"({"name": "analytic", "steps": 12, "temperature": )") + fine + "}"), "")
            << fine;
    EXPECT_NE(issue_of(R"({"name": "analytic", "steps": 12, "temperature": 101})"), "");
}

// Fast-dLLM's key/value caches need a network that keeps them (LLaDA's and Dream's checkpoints); the corpus model
// has none, and prompt guidance's second pass cannot share one.
TEST(GenerationErrors, AKeyValueCacheNeedsAModelThatKeepsOne) {
    const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                             R"(", "family": "discrete",
        "sampler": {"name": "llada", "steps": 8, "kv_cache": "dual", "prompt_guidance": 1}})";
    try {
        Generator g(rudder::parse_recipe(text, "."), registry());
        FAIL() << "a key/value cache on a model without one was accepted";
    } catch (const rudder::RecipeError& e) {
        std::map<std::string, std::string> by_pointer;
        for (const auto& i : e.issues()) by_pointer[i.pointer] = i.message;
        EXPECT_NE(by_pointer["/sampler/kv_cache"].find("keeps no key/value cache"), std::string::npos);
        EXPECT_NE(by_pointer["/sampler/prompt_guidance"].find("cache of its own"), std::string::npos);
    }
}

TEST(GenerationErrors, RecipeProblemsFoundWhenLoadingNameTheirPointer) {
    const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                             R"(", "family": "discrete", "sampler": {"name": "ddim"}, "device": "cuda",
        "weights": "int8", "controllers": [{"plugin": "lenght"}, {"plugin": "length", "params": {"tokens": "six"}},
                        {"plugin": "span", "params": {"sufix": "x"}}]})";
    try {
        Generator g(rudder::parse_recipe(text, "."), registry());
        FAIL() << "bad recipe accepted";
    } catch (const rudder::RecipeError& e) {
        std::map<std::string, std::string> by_pointer;
        for (const auto& i : e.issues()) by_pointer[i.pointer] = i.message;
        EXPECT_NE(by_pointer["/sampler/name"].find("'euler', 'analytic', 'first_hitting', 'confidence', 'llada', "
                                                   "'dream', 'mdlm', 'sedd', 'bd3lm' or 'maskgit'"),
                  std::string::npos)
            << by_pointer["/sampler/name"];
        EXPECT_NE(by_pointer["/controllers/0/plugin"].find("did you mean 'length'"), std::string::npos)
            << by_pointer["/controllers/0/plugin"];
        EXPECT_NE(by_pointer["/controllers/1/params"].find("/tokens"), std::string::npos);
        EXPECT_NE(by_pointer["/controllers/2/params"].find("/sufix"), std::string::npos);
        EXPECT_NE(by_pointer["/weights"].find("int8 weights apply to LLaDA and Dream checkpoints"), std::string::npos)
            << by_pointer["/weights"];
        if (!at::hasCUDA()) {
            EXPECT_NE(by_pointer["/device"].find("without CUDA"), std::string::npos);
        }
    }
}

TEST(GenerationErrors, NoiseScaleOnADiscreteModel) {
    // The sampler's name is left to the family default, so only the loaded model tells that noise_scale cannot apply.
    const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                             R"(", "family": "discrete", "sampler": {"noise_scale": 0.5}})";
    try {
        Generator g(rudder::parse_recipe(text, "."), registry());
        FAIL() << "noise_scale accepted for a discrete model";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u);
        EXPECT_EQ(e.issues()[0].pointer, "/sampler/noise_scale");
        EXPECT_NE(e.issues()[0].message.find("applies to continuous models"), std::string::npos) << e.what();
    }
}

// The confidence sampler on the exact corpus denoiser, in blocks, with top-k: hard constraints hold, and keeping the
// most confident draws of an exact posterior gives corpus sentences.
TEST(GenerationConfidence, BlocksKeepTheConstraintsAndGiveCorpusSentences) {
    const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                             R"(", "family": "discrete", "sampler": {"name": "confidence", "steps": 14,
                             "block_length": 7, "order": "margin", "top_k": 3}, "samples": 16, "batch_size": 8,
                             "max_length": 14, "seed": 3, "controllers": [{"plugin": "length", "params": {"tokens": 7}},
                             {"plugin": "span", "params": {"words": [{"position": 2, "text": "a"}]}}]})";
    const auto samples = generate(text);
    ASSERT_EQ(samples.size(), 16u);
    for (const auto& s : samples) EXPECT_EQ(s.n_tokens, 7) << s.text;
    const Tally t = tally(samples);
    EXPECT_EQ(t.satisfied, 1.0);
    EXPECT_GE(t.in_corpus, 0.9) << samples[0].text;
}

// Remasking (ReMDM) on the exact corpus denoiser: committed tokens are masked again and drawn anew, yet the hard
// constraints hold (a fixed word is never remasked; a redrawn position is constrained again) and the samples stay
// corpus sentences.
TEST(GenerationRemasking, HardConstraintsHoldWhileCommittedTokensAreRemasked) {
    const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                             R"(", "family": "discrete", "sampler": {"name": "analytic", "steps": 200,
                             "remask": {"strategy": "cap", "eta": 0.05}}, "samples": 16, "batch_size": 8,
                             "max_length": 14, "seed": 3, "controllers": [{"plugin": "length", "params": {"tokens": 7}},
                             {"plugin": "span", "params": {"words": [{"position": 2, "text": "a"}]}}]})";
    Generator g(rudder::parse_recipe(text, "."), registry());
    const auto samples = g.generate();
    ASSERT_EQ(samples.size(), 16u);
    EXPECT_GT(g.stats().remasked, 16) << "remasking masked almost nothing again";
    for (const auto& s : samples) EXPECT_EQ(s.n_tokens, 7) << s.text;
    const Tally t = tally(samples);
    EXPECT_EQ(t.satisfied, 1.0);
    EXPECT_GE(t.in_corpus, 0.9) << samples[0].text;
}

TEST(GenerationErrors, RemaskingTakesTheAnalyticSamplerAndAWindowFromNoisyToClean) {
    const auto issues_of = [](const std::string& sampler) {
        std::vector<rudder::RecipeIssue> issues;
        rudder::parse_recipe(R"({"model": "m", "sampler": )" + sampler + "}", ".", {}, &issues);
        std::map<std::string, std::string> by_pointer;
        for (const auto& issue : issues) by_pointer[issue.pointer] += issue.message;
        return by_pointer;
    };
    auto by_pointer = issues_of(R"({"name": "first_hitting", "remask": {"strategy": "cap"}})");
    EXPECT_NE(by_pointer["/sampler/remask"].find("applies to the analytic sampler only, not 'first_hitting'"),
              std::string::npos);
    by_pointer = issues_of(R"({"name": "analytic", "remask": {"strategy": "always", "eta": 2}})");
    EXPECT_FALSE(by_pointer["/sampler/remask/strategy"].empty());
    EXPECT_FALSE(by_pointer["/sampler/remask/eta"].empty());
    by_pointer = issues_of(R"({"name": "analytic", "remask": {"eta": 0.1, "from_t": 0.2, "to_t": 0.5, "from": 1}})");
    EXPECT_NE(by_pointer["/sampler/remask/strategy"].find("required"), std::string::npos);
    EXPECT_NE(by_pointer["/sampler/remask"].find("to_t (0.500000) must not exceed from_t (0.200000)"),
              std::string::npos);
    EXPECT_FALSE(by_pointer["/sampler/remask/from"].empty());
    EXPECT_TRUE(
        issues_of(R"({"name": "analytic", "remask": {"strategy": "rescale", "eta": 0.5, "to_t": 0.1}})").empty());
}

// Under uniform noise nothing is masked: samplers that order masked positions or mask committed tokens again are
// refused, naming the ones that apply.
TEST(GenerationErrors, UniformNoiseTakesTheAnalyticOrEulerSampler) {
    const auto issues_of = [](const std::string& sampler) {
        const std::string text = R"({"model": ")" + uniform_corpus_model_dir().string() +
                                 R"(", "max_length": 14, "sampler": )" + sampler + "}";
        std::map<std::string, std::string> by_pointer;
        try {
            Generator g(rudder::parse_recipe(text, "."), registry());
        } catch (const rudder::RecipeError& e) {
            for (const auto& issue : e.issues()) by_pointer[issue.pointer] += issue.message;
        }
        return by_pointer;
    };
    for (const std::string sampler : {R"({"name": "first_hitting"})", R"({"name": "confidence", "steps": 14})"}) {
        const auto by_pointer = issues_of(sampler);
        EXPECT_NE(by_pointer.at("/sampler/name").find("uniform noise"), std::string::npos)
            << by_pointer.at("/sampler/name");
        EXPECT_NE(by_pointer.at("/sampler/name").find("'analytic'"), std::string::npos);
    }
    EXPECT_NE(
        issues_of(R"({"name": "analytic", "remask": {"strategy": "cap"}})").at("/sampler/remask").find("uniform noise"),
        std::string::npos);
    EXPECT_NE(issues_of(R"({"name": "analytic", "prompt_guidance": 1})").at("/sampler/prompt_guidance").find("no mask"),
              std::string::npos);
    EXPECT_TRUE(issues_of(R"({"name": "euler", "steps": 50})").empty());
    EXPECT_TRUE(issues_of(R"({"name": "analytic", "steps": 50, "top_k": 3, "temperature": 0.8})").empty());
}

// Once the model is known, its process reads the sampler object and refuses, in its own words, the keys of other
// processes that a recipe naming no sampler could not be checked for before (they were once silently ignored).
TEST(GenerationErrors, KeysOfAnotherProcessAreRefusedOnceTheModelIsKnown) {
    const auto issues_of = [](const std::string& model, const std::string& family, const std::string& sampler) {
        const std::string text =
            R"({"model": ")" + model + R"(", )" + family + R"("max_length": 14, "sampler": )" + sampler + "}";
        std::map<std::string, std::string> by_pointer;
        try {
            Generator g(rudder::parse_recipe(text, "."), registry());
        } catch (const rudder::RecipeError& e) {
            for (const auto& issue : e.issues()) by_pointer[issue.pointer] += issue.message;
        }
        return by_pointer;
    };
    const std::string corpus = rudder::testing::corpus_model_dir().string();
    auto by_pointer = issues_of(corpus, R"("family": "discrete", )", R"({"eta": 0.5, "x0": "clamp"})");
    EXPECT_NE(by_pointer["/sampler/eta"].find("'eta' applies to continuous models; model '"), std::string::npos);
    EXPECT_NE(by_pointer["/sampler/x0"].find("is discrete"), std::string::npos) << by_pointer["/sampler/x0"];
    by_pointer = issues_of(corpus, R"("family": "continuous", )", R"({"top_k": 5, "cache": false})");
    EXPECT_NE(by_pointer["/sampler/top_k"].find("'top_k' applies to discrete models; model '"), std::string::npos)
        << by_pointer["/sampler/top_k"];
    EXPECT_NE(by_pointer["/sampler/cache"].find("'cache' applies to absorbing discrete models"), std::string::npos)
        << by_pointer["/sampler/cache"];
    by_pointer = issues_of(uniform_corpus_model_dir().string(), "", R"({"name": "euler", "cache": false})");
    EXPECT_NE(by_pointer["/sampler/cache"].find("uniform noise"), std::string::npos) << by_pointer["/sampler/cache"];
    by_pointer = issues_of(corpus, R"("family": "discrete", )", R"({"name": "ddim"})");
    EXPECT_NE(by_pointer["/sampler/name"].find("sampler 'ddim' is for continuous models"), std::string::npos);
    by_pointer = issues_of(corpus, R"("family": "continuous", )", R"({"name": "analytic"})");
    EXPECT_NE(by_pointer["/sampler/name"].find("sampler 'analytic' is for discrete models; model '"), std::string::npos)
        << by_pointer["/sampler/name"];
    EXPECT_NE(by_pointer["/sampler/name"].find("(use 'ddpm' or 'ddim')"), std::string::npos);
}

// What a generator runs is in its recipe: the sampler, its steps, and every setting with its default, as a recipe
// would write them (first hitting takes max_length steps and no "steps" key).
TEST(GenerationSettings, TheRecipeHoldsWhatRuns) {
    const std::string corpus = rudder::testing::corpus_model_dir().string();
    const auto sampler_of = [&](const std::string& family, const std::string& sampler) {
        const std::string text = R"({"model": ")" + corpus + R"(", "family": ")" + family +
                                 R"(", "max_length": 14, "sampler": )" + sampler + "}";
        return Generator(rudder::parse_recipe(text, "."), registry()).recipe().sampler;
    };
    const auto first_hitting = sampler_of("discrete", R"({"name": "first_hitting", "block_length": 7})");
    EXPECT_EQ(first_hitting.steps, 14);
    EXPECT_FALSE(first_hitting.settings.contains("steps"));
    EXPECT_EQ(first_hitting.settings.at("block_length"), 7);
    EXPECT_EQ(first_hitting.settings.at("cache"), true);
    const auto discrete = sampler_of("discrete", "{}");
    EXPECT_EQ(discrete.name, "analytic");
    EXPECT_EQ(discrete.settings.at("steps"), 200);
    EXPECT_FALSE(discrete.settings.contains("order"));
    const auto continuous = sampler_of("continuous", R"({"steps": 50})");
    EXPECT_EQ(continuous.name, "ddim");
    EXPECT_EQ(continuous.settings.at("eta"), 0.0);
    EXPECT_EQ(continuous.settings.at("x0"), "interpolate");
    // The settings as a recipe: the same run again.
    const std::string again = R"({"model": ")" + corpus + R"(", "family": "continuous", "max_length": 14, "seed": 3,
                                 "sampler": )" +
                              continuous.settings.dump() + "}";
    const std::string first = R"({"model": ")" + corpus + R"(", "family": "continuous", "max_length": 14, "seed": 3,
                                 "sampler": {"steps": 50}})";
    EXPECT_EQ(generate(again)[0].tokens, generate(first)[0].tokens);
}

TEST(GenerationErrors, ConfidenceNeedsAStepPerBlockAndABlockWithinTheLength) {
    const auto issues_of = [](const std::string& sampler) {
        const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                                 R"(", "family": "discrete", "max_length": 14, "sampler": )" + sampler + "}";
        try {
            Generator g(rudder::parse_recipe(text, "."), registry());
        } catch (const rudder::RecipeError& e) {
            std::map<std::string, std::string> by_pointer;
            for (const auto& i : e.issues()) by_pointer[i.pointer] = i.message;
            return by_pointer;
        }
        return std::map<std::string, std::string>{};
    };
    auto by_pointer = issues_of(R"({"name": "confidence", "steps": 3, "block_length": 2})");
    EXPECT_NE(by_pointer["/sampler/steps"].find("3 steps for 7 blocks"), std::string::npos)
        << by_pointer["/sampler/steps"];
    by_pointer = issues_of(R"({"name": "confidence", "steps": 30, "block_length": 20})");
    EXPECT_NE(by_pointer["/sampler/block_length"].find("longer than max_length 14"), std::string::npos);
    EXPECT_TRUE(issues_of(R"({"name": "confidence", "steps": 7, "block_length": 2})").empty());
}

// A copy of the corpus model whose config.json recommends `sampler` (the "sampler" entry, keyed by family).
std::filesystem::path corpus_model_recommending(const nlohmann::json& sampler, const std::string& tag) {
    const auto dir = rudder::testing::corpus_model_dir().string() + "-" + tag;
    std::filesystem::remove_all(dir);
    std::filesystem::copy(rudder::testing::corpus_model_dir(), dir);
    nlohmann::json config = rudder::read_json_file(std::filesystem::path(dir) / "config.json");
    config["sampler"] = sampler;
    std::ofstream(std::filesystem::path(dir) / "config.json") << config.dump(2);
    return dir;
}

TEST(RecommendedSampler, TakenWhenTheRecipeNamesNoSampler) {
    const auto dir =
        corpus_model_recommending({{"discrete", {{"name", "euler"}, {"temperature", 0.5}}},
                                   {"continuous", {{"name", "ddpm"}, {"x0", "clamp"}, {"noise_scale", 0.8}}}},
                                  "recommends");
    auto sampler_of = [&](const std::string& family, const std::string& sampler) {
        const std::string text =
            R"({"model": ")" + dir.string() + R"(", "family": ")" + family + R"(", "sampler": )" + sampler + "}";
        return Generator(rudder::parse_recipe(text, "."), registry()).recipe().sampler;
    };
    // What runs: the sampler, its steps and every setting, defaults included.
    const auto discrete = sampler_of("discrete", R"({"steps": 20})");
    EXPECT_EQ(discrete.name, "euler");
    EXPECT_DOUBLE_EQ(discrete.settings.at("temperature"), 0.5);
    EXPECT_EQ(discrete.steps, 20);
    EXPECT_EQ(discrete.settings.at("steps"), 20);
    // The recipe's own keys win over the recommendation.
    EXPECT_DOUBLE_EQ(sampler_of("discrete", R"({"temperature": 0.7})").settings.at("temperature"), 0.7);
    EXPECT_EQ(sampler_of("discrete", R"({"temperature": 0.7})").name, "euler");
    const auto continuous = sampler_of("continuous", "{}");
    EXPECT_EQ(continuous.name, "ddpm");
    EXPECT_EQ(continuous.settings.at("x0"), "clamp");
    EXPECT_DOUBLE_EQ(continuous.settings.at("noise_scale"), 0.8);
    // A recipe that names its sampler gets the built-in defaults for the rest.
    const auto named = sampler_of("continuous", R"({"name": "ddpm"})");
    EXPECT_EQ(named.settings.at("x0"), "interpolate");
    EXPECT_DOUBLE_EQ(named.settings.at("noise_scale"), 1.0);
    EXPECT_EQ(sampler_of("discrete", R"({"name": "analytic"})").settings.at("temperature"), 1.0);
}

TEST(RecommendedSampler, AClashWithTheRecipeNamesBoth) {
    const auto dir = corpus_model_recommending({{"continuous", {{"name", "ddpm"}}}}, "clash");
    const std::string text = R"({"model": ")" + dir.string() + R"(", "family": "continuous", "sampler": {"eta": 0.5}})";
    try {
        Generator g(rudder::parse_recipe(text, "."), registry());
        FAIL() << "eta accepted with the recommended ddpm";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/sampler/eta");
        EXPECT_NE(e.issues()[0].message.find("recommended"), std::string::npos) << e.what();
    }
}

// Temperature 0 with no sampler named: the arg-max where the model's sampler is discrete; refused, at its pointer and
// in the recommended sampler's words, where it is continuous (ddpm's temperature starts at 0.01).
TEST(RecommendedSampler, TemperatureZeroIsTheModelsSamplersToJudge) {
    const auto dir =
        corpus_model_recommending({{"continuous", {{"name", "ddpm"}}}, {"discrete", {{"name", "euler"}}}}, "zero");
    const auto text = [&](const char* family) {
        return R"({"model": ")" + dir.string() + R"(", "family": ")" + family + R"(", "sampler": {"temperature": 0}})";
    };
    Generator discrete(rudder::parse_recipe(text("discrete"), "."), registry());
    EXPECT_DOUBLE_EQ(discrete.recipe().sampler.settings.at("temperature"), 0.0);
    try {
        Generator g(rudder::parse_recipe(text("continuous"), "."), registry());
        FAIL() << "temperature 0 accepted by ddpm";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/sampler/temperature");
        EXPECT_NE(e.issues()[0].message.find("[0.01, 100]"), std::string::npos) << e.what();
    }
}

TEST(RecommendedSampler, AMisspeltKeyIsReportedOnce) {
    const auto dir = corpus_model_recommending({{"discrete", {{"name", "euler"}}}}, "misspelt");
    const std::string text =
        R"({"model": ")" + dir.string() + R"(", "family": "discrete", "sampler": {"temprature": 0.5}})";
    std::vector<rudder::RecipeIssue> issues;
    rudder::Recipe recipe = rudder::parse_recipe(text, ".", {}, &issues);
    try {
        Generator g(recipe, registry(), {}, issues);
        FAIL() << "a misspelt sampler key was accepted";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/sampler/temprature");
    }
}

TEST(RecommendedSampler, BadRecommendationsAreModelErrors) {
    const std::vector<std::pair<nlohmann::json, std::string>> cases = {
        {nlohmann::json::array(), "/sampler: expected an object keyed by family"},
        {{{"continous", nlohmann::json::object()}}, "/sampler/continous: unknown family"},
        {{{"discrete", {{"name", "analytic"}, {"steps", 10}}}}, "/sampler/discrete/steps: the number of steps"},
        {{{"discrete", {{"name", "ddpm"}}}}, "/sampler/discrete/name: 'ddpm' is not a discrete sampler"},
        {{{"discrete", {{"temperature", 0.5}}}}, "/sampler/discrete/name: required"},
        {{{"discrete", {{"name", "analytic"}, {"temprature", 0.5}}}}, "did you mean 'temperature'"},
        {{{"discrete", {{"name", "analytic"}, {"noise_scale", 0.5}}}}, "/sampler/discrete/noise_scale"},
    };
    int k = 0;
    for (const auto& [sampler, words] : cases) {
        const auto dir = corpus_model_recommending(sampler, "bad" + std::to_string(k++));
        try {
            rudder::load_model(dir, rudder::Family::discrete);
            ADD_FAILURE() << "accepted " << sampler.dump();
        } catch (const rudder::ModelError& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    }
}

TEST(GenerationErrors, UnknownModelSuggestsBundled) {
    try {
        Generator g(rudder::parse_recipe(R"({"model": "no-such-model"})", "."), registry(), {});
        FAIL();
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u);
        EXPECT_EQ(e.issues()[0].pointer, "/model");
        EXPECT_NE(e.issues()[0].message.find("no model named 'no-such-model'"), std::string::npos);
    }
}

// Found when the recipe is checked (the controller's begin() sees the model's vocabulary then), not by the run.
TEST(GenerationErrors, SpanWordOutsideTheVocabulary) {
    try {
        Generator g(
            rudder::parse_recipe(recipe_text("discrete", R"({"plugin": "span", "params": {"prefix": "Quux"}})"), "."),
            registry());
        FAIL() << "a word outside the vocabulary was accepted";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/controllers/0/params");
        EXPECT_NE(e.issues()[0].message.find("not in the model's vocabulary"), std::string::npos) << e.what();
    }
}

TEST(GenerationErrors, CancelFromProgress) {
    Generator g(rudder::parse_recipe(recipe_text("discrete", ""), "."), registry());
    int calls = 0;
    EXPECT_THROW(g.generate([&](const rudder::Progress&) { return ++calls < 5; }), rudder::Cancelled);
    EXPECT_EQ(calls, 5);
}

TEST(GenerationStats, DiscreteStepsWhereNothingUnmasksCallNoNetwork) {
    auto run = [](bool cache, int64_t& calls) {
        const std::string text = R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                                 R"(", "family": "discrete", "sampler": {"name": "analytic", "steps": 200, "cache": )" +
                                 (cache ? "true" : "false") + R"(}, "samples": 4, "max_length": 14, "seed": 3})";
        Generator g(rudder::parse_recipe(text, "."), registry());
        auto out = g.generate();
        calls = g.stats().denoiser_calls;
        EXPECT_EQ(g.stats().steps, 200);
        return out;
    };
    int64_t with_cache = 0, without = 0;
    const auto a = run(true, with_cache);
    const auto b = run(false, without);
    // 4 x 14 positions unmask over 200 steps: most steps unmask nothing, and such a step runs neither the network
    // nor the controllers, cache or not. A step that unmasks follows one that changed the tokens, so the cache
    // saves nothing more here.
    EXPECT_LT(with_cache, 100);
    EXPECT_EQ(with_cache, without);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens);
}

// A discrete denoiser written in the test: only its distributions are its own.
class TestDenoiser : public rudder::Denoiser {
public:
    explicit TestDenoiser(int64_t vocab) : Denoiser({rudder::Family::discrete, vocab}), vocab_(vocab) {}
    void to(const at::Device&) override {}

protected:
    int64_t vocab_;
};

// Bring your own denoiser: a model built in the program, not read from a folder. This one is certain of one
// sentence (log-probability 0 for its token at each position, -30 for every other).
class OneSentence final : public TestDenoiser {
public:
    OneSentence(std::vector<int64_t> ids, int64_t vocab) : TestDenoiser(vocab), ids_(std::move(ids)) {}
    rudder::DenoiserOutput denoise(const at::Tensor& x, double, const std::vector<std::string>&,
                                   const rudder::Evidence&) override {
        at::Tensor logits = at::full({x.size(0), x.size(1), vocab_}, -30.0f);
        for (int64_t i = 0; i < x.size(1); ++i)
            logits.select(1, i)
                .select(1, i < static_cast<int64_t>(ids_.size()) ? ids_[static_cast<size_t>(i)] : 0)
                .fill_(0.0f);
        return {logits, {}, {}, {}};
    }

private:
    std::vector<int64_t> ids_;
};

rudder::Model own_model(int64_t denoiser_vocab_extra = 0) {
    rudder::Model m;
    m.name = "own";
    m.family = rudder::Family::discrete;
    auto tok = std::make_shared<rudder::WordTokenizer>(rudder::WordTokenizer::from_words({"red", "green", "blue"}));
    m.denoiser = std::make_shared<OneSentence>(tok->encode("blue green red"), tok->vocab_size() + denoiser_vocab_extra);
    m.tokenizer = std::move(tok);
    return m;
}

const char* const kOwnRecipe = R"({"model": "not looked up", "sampler": {"name": "analytic", "steps": 8},
    "samples": 3, "max_length": 5, "controllers": [{"plugin": "span", "params": {"words": [{"position": 3,
    "text": "green"}]}}]})";

TEST(BringYourOwnDenoiser, GeneratesWithTheGivenModel) {
    Generator g(rudder::parse_recipe(kOwnRecipe, "."), own_model(), registry());
    EXPECT_EQ(g.recipe().model, "own");
    EXPECT_EQ(g.model().denoiser->vocab_size(), 6);
    const auto samples = g.generate();
    ASSERT_EQ(samples.size(), 3u);
    for (const auto& s : samples) {
        // The denoiser's sentence, with the span's word (found through the model's tokenizer) at position 3.
        EXPECT_EQ(s.text, "blue green red green");
        ASSERT_EQ(s.controls.size(), 1u);
        EXPECT_EQ(s.controls[0].verdict.satisfied, 1);
    }
}

TEST(BringYourOwnDenoiser, ModelThatDoesNotHoldTogetherIsAnIssueAtModel) {
    auto expect_model_issue = [](rudder::Model model, const std::string& recipe, const std::string& words) {
        try {
            Generator g(rudder::parse_recipe(recipe, "."), std::move(model), registry());
            ADD_FAILURE() << "accepted: " << words;
        } catch (const rudder::RecipeError& e) {
            ASSERT_EQ(e.issues().size(), 1u) << e.what();
            EXPECT_EQ(e.issues()[0].pointer, "/model");
            EXPECT_NE(e.issues()[0].message.find(words), std::string::npos) << e.what();
        }
    };
    expect_model_issue(own_model(1), kOwnRecipe, "the denoiser has 7 tokens of vocabulary, the tokenizer 6");
    rudder::Model no_denoiser = own_model();
    no_denoiser.denoiser.reset();
    expect_model_issue(std::move(no_denoiser), kOwnRecipe, "has no denoiser");
    expect_model_issue(own_model(), R"({"model": "x", "family": "continuous"})", "is not a continuous model");
}

// A denoiser whose second position depends on whether the first is visible: green 0.6 / blue 0.4 after "red", green
// 0.8 / blue 0.2 while the first position is masked. Everything else is (almost) impossible.
class PromptSensitive final : public TestDenoiser {
public:
    PromptSensitive(int64_t vocab, int64_t mask, int64_t green, int64_t blue)
        : TestDenoiser(vocab), mask_(mask), green_(green), blue_(blue) {}
    rudder::DenoiserOutput denoise(const at::Tensor& x, double, const std::vector<std::string>&,
                                   const rudder::Evidence&) override {
        at::Tensor logits = at::full({x.size(0), x.size(1), vocab_}, -30.0f);
        for (int64_t b = 0; b < x.size(0); ++b) {
            const bool seen = x[b][0].item<int64_t>() != mask_;
            logits[b][0][green_] = 0.0f;  // never drawn: a span fixes the first position
            logits[b][1][green_] = static_cast<float>(std::log(seen ? 0.6 : 0.8));
            logits[b][1][blue_] = static_cast<float>(std::log(seen ? 0.4 : 0.2));
        }
        return {at::log_softmax(logits, -1), {}, {}, {}};
    }

private:
    int64_t mask_, green_, blue_;
};

// Prompt guidance on the scores uncond + (w + 1)(cond - uncond): with w = 1, blue after "red" is drawn with
// probability 0.4^2 / 0.2 : 0.6^2 / 0.8, i.e. 0.8 / 1.25 = 0.64, against 0.4 without guidance. It costs a second
// network pass wherever a position is fixed, and is refused where it cannot apply.
TEST(PromptGuidance, ScoresAreTheUnconditionalPlusTheScaledDifference) {
    auto tok = std::make_shared<rudder::WordTokenizer>(rudder::WordTokenizer::from_words({"red", "green", "blue"}));
    const int64_t green = tok->encode("green")[0], blue = tok->encode("blue")[0];
    auto blue_share = [&](double w, int64_t& calls) {
        rudder::Model m;
        m.name = "prompt-sensitive";
        m.family = rudder::Family::discrete;
        m.denoiser = std::make_shared<PromptSensitive>(tok->vocab_size(), tok->mask_id(), green, blue);
        m.tokenizer = tok;
        const std::string recipe = R"({"model": "x", "sampler": {"name": "analytic", "steps": 4, "prompt_guidance": )" +
                                   std::to_string(w) +
                                   R"(}, "samples": 4000, "batch_size": 1000, "seed": 3, "max_length": 2,
            "controllers": [{"plugin": "span", "params": {"prefix": "red"}}]})";
        Generator g(rudder::parse_recipe(recipe, "."), std::move(m), registry());
        int64_t blues = 0;
        const auto samples = g.generate();
        for (const auto& s : samples) {
            EXPECT_EQ(s.tokens[0], tok->encode("red")[0]);
            blues += s.tokens[1] == blue;
        }
        calls = g.stats().denoiser_calls;
        return static_cast<double>(blues) / static_cast<double>(samples.size());
    };
    int64_t plain_calls = 0, guided_calls = 0;
    const double plain = blue_share(0.0, plain_calls), guided = blue_share(1.0, guided_calls);
    std::cout << "blue after red: " << plain << " unguided, " << guided << " with prompt guidance 1 (" << plain_calls
              << " and " << guided_calls << " network calls)" << std::endl;
    EXPECT_NEAR(plain, 0.4, 0.03);  // 4,000 draws: one standard error is 0.008
    EXPECT_NEAR(guided, 0.64, 0.03);
    EXPECT_GT(guided_calls, plain_calls);
    try {
        Generator g(rudder::parse_recipe(R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
                                             R"(", "family": "continuous", "sampler": {"prompt_guidance": 1}})",
                                         "."),
                    registry());
        ADD_FAILURE() << "prompt guidance accepted for a continuous model";
    } catch (const rudder::RecipeError& e) {
        ASSERT_EQ(e.issues().size(), 1u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/sampler/prompt_guidance");
    }

    for (const std::string& bad :
         {std::string(R"({"model": "x", "family": "discrete", "sampler": {"name": "ddim", "prompt_guidance": 1}})"),
          std::string(R"({"model": "x", "sampler": {"prompt_guidance": -1}})")}) {
        EXPECT_THROW(rudder::parse_recipe(bad, "."), rudder::RecipeError) << bad;
    }
}

// A controller that steers through candidate deltas only (CANDIDATES + ROWS, no LOGIT_DELTA) takes part in the
// PREDICT step: the forms fixture's candidate_bonus writing a NaN fails the run, naming candidate_delta.
TEST(GenerationForms, CandidateDeltaOnlyControllerTakesPart) {
    if (const char* forms = std::getenv("RUDDER_CONTROL_FORMS"); forms != nullptr && *forms != '\0')
        GTEST_SKIP() << "RUDDER_CONTROL_FORMS=" << forms << ": no controller gets candidates";
    static rudder::plugins::Registry fixtures({fs::path(RUDDER_TEST_PLUGIN_DIR), fs::path(RUDDER_TEST_FIXTURE_DIR)});
    Generator g(rudder::parse_recipe(
                    recipe_text("discrete", R"({"plugin": "candidate_bonus", "params": {"nan": true}})", 8), "."),
                fixtures);
    try {
        g.generate();
        FAIL() << "the candidate delta was not asked for";
    } catch (const rudder::plugins::PluginError& e) {
        EXPECT_NE(std::string(e.what()).find("NaN or Inf to candidate_delta"), std::string::npos) << e.what();
    }
}

// Particles (guidance.particles) on the exact corpus denoiser with the near_word fixture, whose reward is the latent's
// closeness to a word's embedding at position 0. Guidance with step size 0 leaves the latent as the sampler drew it, so
// any effect is the choice between particles.
rudder::plugins::Registry& with_near_word() {
    static rudder::plugins::Registry r({fs::path(RUDDER_TEST_PLUGIN_DIR), fs::path(RUDDER_TEST_FIXTURE_DIR)});
    return r;
}
const std::string kNearThe = R"({"plugin": "near_word", "params": {"word": "The"}})";

// 16 samples rewarded for beginning with "The", with these guidance settings; the run's counts into *stats.
std::vector<SampleResult> near_the(const std::string& family, const std::string& guidance,
                                   rudder::GenerationStats* stats) {
    Generator g(rudder::parse_recipe(recipe_text(family, kNearThe, 16, 1, R"(, "guidance": )" + guidance), "."),
                with_near_word());
    auto samples = g.generate();
    *stats = g.stats();
    return samples;
}

TEST(Particles, TheSampleIsTheParticleTheControlsRewardMost) {
    rudder::GenerationStats one_stats, eight_stats, resampled_stats;
    const Tally one = tally(near_the("continuous", R"({"step_size": 0})", &one_stats));
    const Tally eight = tally(near_the("continuous", R"({"step_size": 0, "particles": 8})", &eight_stats));
    const Tally resampled =
        tally(near_the("continuous", R"({"step_size": 0, "particles": 8, "resample_every": 20})", &resampled_stats));
    rudder::GenerationStats late_stats;
    const Tally late =
        tally(near_the("continuous", R"({"step_size": 0, "particles": 8, "resample_every": 199})", &late_stats));
    // 7 of the 24 sentences begin with "The": one sequence per sample finds it at about that rate, the best of eight
    // almost always (1 - (17/24)^8 = 94%).
    EXPECT_LE(one.satisfied, 0.5);
    EXPECT_GE(eight.satisfied, 0.9);
    // Resampled at the last step but one, where the reward tells the sentences apart, the particles are copies of
    // those that begin with "The": each row carried its own latent and constraints over.
    EXPECT_GE(late.satisfied, 0.9);
    // Choosing and resampling whole sequences keeps every sample a sentence of the corpus. (Resampling from step 20
    // on keeps fewer different particles: with DDIM's deterministic steps copies stay copies.)
    EXPECT_EQ(one.in_corpus, 1.0);
    EXPECT_EQ(eight.in_corpus, 1.0);
    EXPECT_EQ(resampled.in_corpus, 1.0);
    EXPECT_EQ(late.in_corpus, 1.0);
    // Eight sequences per sample cost eight times the network's work; resampling at steps 20, 40, ..., 180 of each
    // of the two batches of 8 samples.
    EXPECT_EQ(eight_stats.denoised_sequences, 8 * one_stats.denoised_sequences);
    EXPECT_EQ(one_stats.resamplings, 0);
    EXPECT_EQ(eight_stats.resamplings, 0);
    EXPECT_EQ(resampled_stats.resamplings, 2 * 9);
    EXPECT_EQ(late_stats.resamplings, 2);
}

TEST(Particles, NeedAContinuousModelGuidanceAndAReportedLogProbability) {
    auto issue_at = [](const std::string& text) -> std::string {
        try {
            Generator g(rudder::parse_recipe(text, "."), with_near_word());
            return "";
        } catch (const rudder::RecipeError& e) {
            return e.issues().empty() ? "" : e.issues()[0].pointer + ": " + e.issues()[0].message;
        }
    };
    EXPECT_NE(issue_at(recipe_text("uniform", kNearThe, 4, 1, R"(, "guidance": {"particles": 4})"))
                  .find("/guidance/particles: model 'rudder-test-corpus-"),
              std::string::npos);
    EXPECT_NE(
        issue_at(recipe_text("discrete", kNearThe, 4, 1, R"(, "guidance": {"particles": 4, "resample_every": 5})"))
            .find("/guidance/resample_every: discrete particles are only chosen between at the end"),
        std::string::npos);
    EXPECT_NE(
        issue_at(recipe_text("continuous", kNearThe, 4, 1, R"(, "guidance": {"particles": 4, "gradient_steps": 0})"))
            .find("/guidance/particles: particles are weighed by the controllers' log p(c | x)"),
        std::string::npos);
    EXPECT_NE(issue_at(recipe_text("discrete", R"({"plugin": "length", "params": {"tokens": 6}})", 4, 1,
                                   R"(, "guidance": {"particles": 4})"))
                  .find("/guidance/particles: particles are chosen by the controllers' log p(c | x), which only "
                        "controllers with the GRADIENT capability report; the recipe has none"),
              std::string::npos);
    EXPECT_NE(issue_at(recipe_text("continuous", kNearThe, 4, 1, R"(, "guidance": {"resample_every": 5})"))
                  .find("/guidance/resample_every: resampling needs more than one particle"),
              std::string::npos);
    // A controller that steers without saying how likely the control is gives the particles nothing to be weighed by.
    for (const std::string family : {"continuous", "discrete"}) {
        Generator g(rudder::parse_recipe(recipe_text(family, R"({"plugin": "near_word", "params": {"word": "The",
                                                     "report": false}})",
                                                     4, 1, R"(, "guidance": {"particles": 4})"),
                                         "."),
                    with_near_word());
        try {
            g.generate();
            ADD_FAILURE() << family << ": particles ran without a reward";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("controller 'near_word' steers without reporting log p(c | x)"),
                      std::string::npos)
                << e.what();
        }
    }
}

// Discrete particles: the sample is the particle whose reward was highest at the last step a controller scored
// (near_word's: whether position 0 holds "The"), as in the continuous family, and it is still a corpus sentence.
TEST(Particles, DiscreteSamplesAreTheParticleTheControlsRewardMost) {
    rudder::GenerationStats one_stats, eight_stats;
    const Tally one = tally(near_the("discrete", "{}", &one_stats));
    const Tally eight = tally(near_the("discrete", R"({"particles": 8})", &eight_stats));
    // Rewards are read before the step's draws, so a word drawn at the last scored step is not yet counted: a little
    // under the continuous family's share. Positions unmasked in one step are drawn independently, so a few samples
    // of the analytic sampler mix two sentences, with or without particles (UnguidedSamplesAreCorpusSentences).
    EXPECT_LE(one.satisfied, 0.5);
    EXPECT_GE(eight.satisfied, 0.85);
    EXPECT_GE(one.in_corpus, 0.8);
    EXPECT_GE(eight.in_corpus, 0.8);
    EXPECT_GT(eight_stats.denoised_sequences, 4 * one_stats.denoised_sequences);  // the cache skips fewer steps
}

}  // namespace

// Process isolation end to end: first-party controllers give the same samples in a process of their own, and a
// controller that crashes there fails the run with an error naming it, or is dropped ("on_failure": "continue"),
// while this process stays healthy: its next run succeeds.
namespace isolation {

rudder::plugins::Registry& with_fixtures() {
    static rudder::plugins::Registry r({fs::path(RUDDER_TEST_PLUGIN_DIR), fs::path(RUDDER_TEST_FIXTURE_DIR)});
    return r;
}

std::vector<SampleResult> run(const std::string& text) {
    Generator g(rudder::parse_recipe(text, "."), with_fixtures());
    return g.generate();
}

const std::string kFirstParty = R"({"plugin": "length", "params": {"tokens": 7}},
    {"plugin": "span", "params": {"prefix": "The Eagle"}})";

// ABI 1.2's packed masks end to end: allowed bits (tokens 1 and 2 only: the unknown word and the mask) against a
// fixed prefix, which the conflict names with the controller whose bits forbid it.
TEST(GenerationForms, AFixedTokenThatAllowedBitsExcludeNamesBothControllers) {
    if (const char* forms = std::getenv("RUDDER_CONTROL_FORMS"); forms != nullptr && *forms != '\0')
        GTEST_SKIP() << "RUDDER_CONTROL_FORMS=" << forms << ": rows_mask needs the 1.2 forms";
    try {
        run(recipe_text("discrete", R"({"plugin": "rows_mask", "name": "allow", "params": {"write": "allow"}},
                                      {"plugin": "span", "params": {"prefix": "The"}})",
                        8));
        ADD_FAILURE() << "the recipe was accepted";
    } catch (const rudder::RecipeError& e) {  // found before sampling
        EXPECT_NE(std::string(e.what()).find("controller 'span' fixes \"The\" at position 0, which 'allow' forbids"),
                  std::string::npos)
            << e.what();
    }
}

TEST(GenerationIsolation, FirstPartyControllersGiveTheSameSamplesInAProcessOfTheirOwn) {
    for (const std::string family : {"discrete", "continuous"}) {
        const auto in_process = run(recipe_text(family, kFirstParty, 8));
        const auto process = run(recipe_text(family, kFirstParty, 8, 1, R"(, "isolation": "process")"));
        ASSERT_EQ(in_process.size(), process.size());
        for (size_t i = 0; i < process.size(); ++i) {
            EXPECT_EQ(process[i].tokens, in_process[i].tokens) << family << " sample " << i;
            ASSERT_EQ(process[i].controls.size(), 2u);
            for (size_t k = 0; k < 2; ++k) {
                EXPECT_EQ(process[i].controls[k].verdict.satisfied, in_process[i].controls[k].verdict.satisfied);
                EXPECT_EQ(process[i].controls[k].verdict.detail, in_process[i].controls[k].verdict.detail);
            }
        }
    }
}

std::string faulty(const std::string& fault, const std::string& more = "") {
    return R"({"plugin": "faulty", "name": "crashy", "isolation": "process", "params": {"fault": ")" + fault +
           R"(", "at_step": 3})" + more + "}";
}

TEST(GenerationIsolation, ACrashFailsTheRunNamingThePluginAndTheNextRunSucceeds) {
    for (const std::string fault : {"segv", "abort", "exit", "stack", "heap"}) {
        try {
            run(recipe_text("discrete", faulty(fault) + "," + kFirstParty, 8));
            ADD_FAILURE() << fault << ": the run did not fail";
        } catch (const rudder::plugins::PluginError& e) {
            EXPECT_NE(std::string(e.what()).find("controller 'crashy' (faulty, rudder_faulty.so): step did not "
                                                 "complete at step "),
                      std::string::npos)
                << e.what();
        }
        const auto next = run(recipe_text("discrete", kFirstParty, 8));  // same process, healthy
        EXPECT_EQ(next.size(), 8u);
    }
}

TEST(GenerationIsolation, AHangIsKilledAtTheTimeLimit) {
    try {
        run(recipe_text("discrete", faulty("hang", R"(, "time_limit": 0.5)"), 8));
        ADD_FAILURE() << "the run did not fail";
    } catch (const rudder::plugins::PluginError& e) {
        // At step 3 or the first step after it that unmasks a position (a step that unmasks none calls no controller).
        EXPECT_NE(std::string(e.what()).find("did not return within its time limit of 0.5 s at step "),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(run(recipe_text("discrete", kFirstParty, 8)).size(), 8u);
}

TEST(GenerationIsolation, OnFailureContinueDropsTheControllerAndTheRunGoesOn) {
    const auto with =
        run(recipe_text("discrete", faulty("segv", R"(, "on_failure": "continue")") + "," + kFirstParty, 8));
    const auto without = run(recipe_text("discrete", kFirstParty, 8));
    ASSERT_EQ(with.size(), 8u);
    for (size_t i = 0; i < with.size(); ++i) {
        ASSERT_EQ(with[i].controls.size(), 3u);
        EXPECT_EQ(with[i].controls[0].label, "crashy");
        EXPECT_EQ(with[i].controls[0].verdict.satisfied, -1);
        EXPECT_NE(
            with[i].controls[0].verdict.detail.find("\"dropped\":\"controller 'crashy' (faulty, rudder_faulty.so): "
                                                    "step did not complete at step "),
            std::string::npos)
            << with[i].controls[0].verdict.detail;
        EXPECT_EQ(with[i].controls[1].verdict.satisfied, without[i].controls[0].verdict.satisfied);
    }
}

TEST(GenerationIsolation, TheNextRunOfTheSameGeneratorStartsADeadControllerAgain) {
    // "once": the fault happens in the first run only. The first run drops the controller (on_failure continue), the
    // second run of the same Generator starts a new process for it and it takes part again.
    const fs::path marker = fs::temp_directory_path() / ("rudder_isolation_once_" + std::to_string(::getpid()));
    fs::remove(marker);
    const std::string crashy =
        R"({"plugin": "faulty", "name": "crashy", "isolation": "process", "on_failure": "continue",
        "params": {"fault": "segv", "at_step": 3, "once": ")" +
        marker.string() + R"("}})";
    Generator g(rudder::parse_recipe(recipe_text("discrete", crashy + "," + kFirstParty, 8), "."), with_fixtures());
    const auto first = g.generate();
    ASSERT_EQ(first.size(), 8u);
    EXPECT_EQ(first[0].controls[0].verdict.satisfied, -1);
    EXPECT_NE(first[0].controls[0].verdict.detail.find("\"dropped\""), std::string::npos);
    const auto second = g.generate();
    ASSERT_EQ(second.size(), 8u);
    for (const auto& sample : second) {
        EXPECT_EQ(sample.controls[0].verdict.satisfied, 1) << sample.controls[0].verdict.detail;
    }
    fs::remove(marker);
}

}  // namespace isolation
