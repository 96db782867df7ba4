// The maskgit sampler (host/runtime/src/absorbing/maskgit_sampler.cpp) on the exact corpus denoiser: the cosine
// schedule's commits per step, hard constraints, its settings and their refusals.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "corpus_fixture.hpp"
#include <rudder/runtime/generator.hpp>

namespace {

using rudder::Generator;
namespace fs = std::filesystem;

rudder::plugins::Registry& registry() {
    static rudder::plugins::Registry r({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    return r;
}

std::string recipe(const std::string& sampler, const std::string& controllers = "", int64_t samples = 8) {
    return R"({"model": ")" + rudder::testing::corpus_model_dir().string() +
           R"(", "family": "discrete", "max_length": 14, "seed": 5, "batch_size": 8, "samples": )" +
           std::to_string(samples) + R"(, "sampler": )" + sampler + R"(, "controllers": [)" + controllers + "]}";
}

// 14 positions in 4 steps: masked after each step floor(14 cos(pi k / 8)) = 12, 9, 5, then none, so the draws are
// 14 + 12 + 9 + 5 = 40 a sequence (a linear schedule would leave 10, 7, 3: 34).
TEST(Maskgit, CommitsTheCosineSchedulesCountEachStep) {
    Generator g(rudder::parse_recipe(recipe(R"({"name": "maskgit", "steps": 4})"), "."), registry());
    const auto samples = g.generate();
    ASSERT_EQ(samples.size(), 8u);
    EXPECT_EQ(g.stats().steps, 4);
    EXPECT_EQ(g.stats().rows_drawn, 8 * 40);
    for (const auto& s : samples) EXPECT_GT(s.n_tokens, 0) << s.text;
}

TEST(Maskgit, HardConstraintsHoldAndSamplesAreCorpusSentences) {
    const std::string controllers = R"({"plugin": "length", "params": {"tokens": 7}},
        {"plugin": "span", "params": {"words": [{"position": 2, "text": "a"}]}})";
    Generator g(rudder::parse_recipe(recipe(R"({"name": "maskgit", "steps": 14})", controllers, 16), "."), registry());
    const auto samples = g.generate();
    ASSERT_EQ(samples.size(), 16u);
    for (const auto& s : samples) {
        EXPECT_EQ(s.n_tokens, 7) << s.text;
        for (const auto& c : s.controls) EXPECT_EQ(c.verdict.satisfied, 1) << c.label << ": " << s.text;
    }
}

TEST(Maskgit, SettingsAndTheirRefusals) {
    const auto settings =
        Generator(rudder::parse_recipe(recipe(R"({"name": "maskgit"})"), "."), registry()).recipe().sampler.settings;
    EXPECT_EQ(settings.at("steps"), 12);
    EXPECT_EQ(settings.at("choice_temperature"), 4.5);
    const auto issues_of = [](const std::string& sampler) {
        std::vector<rudder::RecipeIssue> issues;
        rudder::parse_recipe(R"({"model": "m", "sampler": )" + sampler + "}", ".", {}, &issues);
        std::map<std::string, std::string> by_pointer;
        for (const auto& issue : issues) by_pointer[issue.pointer] += issue.message;
        return by_pointer;
    };
    EXPECT_NE(issues_of(R"({"name": "maskgit", "choice_temperature": -1})")["/sampler/choice_temperature"].find("-1"),
              std::string::npos);
    EXPECT_EQ(issues_of(R"({"name": "analytic", "choice_temperature": 1})")["/sampler/choice_temperature"],
              "'choice_temperature' applies to the maskgit sampler only, not 'analytic'");
}

}  // namespace
