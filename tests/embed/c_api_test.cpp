// The C embedding API as an application uses it: this test sees only rudder.h and librudder.so (Rudder::host),
// never the C++ runtime. Models: the bundled e2e-corpus, found by librudder.so from its own location.
#include <rudder/rudder.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// length + span on e2e-corpus: every sample has `tokens` tokens and starts with "The Eagle".
std::string recipe(const std::string& family, int64_t tokens = 9, uint64_t seed = 3, const std::string& extra = "") {
    return R"({"model": "e2e-corpus", "family": ")" + family + R"(", "sampler": {"steps": 40}, "seed": )" +
           std::to_string(seed) + R"(, "samples": 3, "batch_size": 2, "max_length": 16, "controllers": [
             {"plugin": "length", "params": {"tokens": )" +
           std::to_string(tokens) + R"(}},
             {"plugin": "span", "params": {"prefix": "The Eagle"}})" +
           extra + "]}";
}

struct GeneratorDeleter {
    void operator()(rudder_generator* g) const { rudder_generator_free(g); }
};
struct ResultsDeleter {
    void operator()(rudder_results* r) const { rudder_results_free(r); }
};
using Generator = std::unique_ptr<rudder_generator, GeneratorDeleter>;
using Results = std::unique_ptr<rudder_results, ResultsDeleter>;

Generator create(const std::string& recipe_json, const rudder_options* options = nullptr) {
    rudder_generator* gen = nullptr;
    const rudder_status status = rudder_generator_create(recipe_json.c_str(), options, &gen);
    EXPECT_EQ(status, RUDDER_OK) << rudder_last_error();
    return Generator(gen);
}

Results generate(rudder_generator* gen, const rudder_generate_options* options = nullptr) {
    rudder_results* res = nullptr;
    const rudder_status status = rudder_generate(gen, options, &res);
    EXPECT_EQ(status, RUDDER_OK) << rudder_generator_last_error(gen);
    return Results(res);
}

// Texts and tokens of every sample, for comparing runs.
std::vector<std::string> fingerprint(const rudder_results* res) {
    std::vector<std::string> out;
    for (size_t i = 0; i < rudder_results_count(res); ++i) {
        size_t n = 0;
        const int64_t* ids = rudder_results_tokens(res, i, &n);
        std::string line = rudder_results_text(res, i);
        for (size_t k = 0; k < n; ++k) line += " " + std::to_string(ids[k]);
        out.push_back(line);
    }
    return out;
}

TEST(CApi, GeneratesWithEachControllersVerdict) {
    for (const std::string family : {"discrete", "continuous"}) {
        Generator gen = create(recipe(family));
        ASSERT_TRUE(gen);
        Results res = generate(gen.get());
        ASSERT_TRUE(res);
        ASSERT_EQ(rudder_results_count(res.get()), 3u);
        ASSERT_EQ(rudder_results_verdict_count(res.get()), 2u);
        for (size_t i = 0; i < 3; ++i) {
            EXPECT_THAT(rudder_results_text(res.get(), i), ::testing::StartsWith("The Eagle ")) << family;
            size_t n = 0;
            ASSERT_NE(rudder_results_tokens(res.get(), i, &n), nullptr);
            EXPECT_EQ(n, 9u);
            const rudder_verdict_info* length = rudder_results_verdict(res.get(), i, 0);
            const rudder_verdict_info* span = rudder_results_verdict(res.get(), i, 1);
            ASSERT_TRUE(length != nullptr && span != nullptr);
            EXPECT_STREQ(length->label, "length");
            EXPECT_EQ(length->satisfied, 1);
            EXPECT_TRUE(length->has_score);
            EXPECT_DOUBLE_EQ(length->score, 9.0);
            EXPECT_STREQ(span->label, "span");
            EXPECT_EQ(span->satisfied, 1);
            EXPECT_STREQ(span->detail, "");
        }
        EXPECT_EQ(rudder_results_verdict(res.get(), 3, 0), nullptr);
        EXPECT_EQ(rudder_results_verdict(res.get(), 0, 2), nullptr);
        EXPECT_EQ(rudder_results_text(res.get(), 3), nullptr);
    }
}

TEST(CApi, JsonIsTheCliLine) {
    Generator gen = create(recipe("discrete"));
    Results res = generate(gen.get());
    const std::string line = rudder_results_json(res.get(), 1);
    EXPECT_THAT(line, ::testing::StartsWith(R"({"controls":{"length":{"satisfied":true,"score":9.0},)"
                                            R"("span":{"satisfied":true,"score":1.0}},"index":1,"text":"The Eagle )"));
    EXPECT_THAT(line, HasSubstr(R"("tokens":[)"));
    EXPECT_EQ(rudder_results_json(res.get(), 3), nullptr);
}

TEST(CApi, SameSeedSameSamplesAndOverridesApplyPerCall) {
    Generator gen = create(recipe("discrete"));
    const auto first = fingerprint(generate(gen.get()).get());
    EXPECT_EQ(fingerprint(generate(gen.get()).get()), first);

    rudder_generate_options options = rudder_default_generate_options();
    options.samples = 5;
    options.override_seed = 1;
    options.seed = 99;
    const auto other = fingerprint(generate(gen.get(), &options).get());
    EXPECT_EQ(other.size(), 5u);
    EXPECT_NE(std::vector<std::string>(other.begin(), other.begin() + 3), first);
    EXPECT_EQ(fingerprint(generate(gen.get()).get()), first) << "an override lasts one call";
}

TEST(CApi, FromFileResolvesRelativeToTheFile) {
    const std::string path = ::testing::TempDir() + "rudder_c_api_recipe.json";
    std::ofstream(path) << recipe("discrete");
    rudder_generator* gen = nullptr;
    ASSERT_EQ(rudder_generator_create_from_file(path.c_str(), nullptr, &gen), RUDDER_OK) << rudder_last_error();
    Generator owner(gen);
    EXPECT_EQ(rudder_results_count(generate(gen).get()), 3u);
}

TEST(CApi, InvalidRecipeListsEveryProblemWithItsPointer) {
    rudder_generator* gen = reinterpret_cast<rudder_generator*>(0x1);
    const std::string bad = R"({"model": "e2e-corpus", "sampler": {"stpes": 5},
                               "controllers": [{"plugin": "lenght"}, {"plugin": "span", "params": {"suffix": "x"}}]})";
    EXPECT_EQ(rudder_generator_create(bad.c_str(), nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_EQ(gen, nullptr);
    const std::string message = rudder_last_error();
    EXPECT_THAT(message, HasSubstr("invalid recipe (3 problems)"));
    EXPECT_THAT(message, HasSubstr("/sampler/stpes: unknown key 'stpes'; did you mean 'steps'?"));
    EXPECT_THAT(message, HasSubstr("/controllers/0/plugin: "));
    EXPECT_THAT(message, HasSubstr("did you mean 'length'?"));
    EXPECT_THAT(message, HasSubstr("/controllers/1/params: "));

    EXPECT_EQ(rudder_generator_create("not json", nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("not valid JSON"));
    EXPECT_EQ(rudder_generator_create_from_file("/nonexistent/recipe.json", nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("cannot read recipe file '/nonexistent/recipe.json'"));
}

TEST(CApi, ArgumentErrorsAreStatusesNotCrashes) {
    rudder_generator* gen = nullptr;
    EXPECT_EQ(rudder_generator_create(recipe("discrete").c_str(), nullptr, nullptr), RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(rudder_generator_create_from_file(nullptr, nullptr, &gen), RUDDER_ERR_INVALID_ARGUMENT);
    rudder_options zeroed{};  // not from rudder_default_options(): struct_size 0
    EXPECT_EQ(rudder_generator_create(recipe("discrete").c_str(), &zeroed, &gen), RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(rudder_last_error(), HasSubstr("rudder_default_options()"));

    Generator ok = create(recipe("discrete"));
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(ok.get(), nullptr, nullptr), RUDDER_ERR_INVALID_ARGUMENT);
    rudder_generate_options options = rudder_default_generate_options();
    options.samples = -2;
    EXPECT_EQ(rudder_generate(ok.get(), &options, &res), RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(res, nullptr);
    EXPECT_THAT(rudder_generator_last_error(ok.get()), HasSubstr("samples must be"));
    EXPECT_THAT(rudder_last_error(), HasSubstr("samples must be"));
}

TEST(CApi, ConfiguredLimitsRefuseLargerRequestsUpFront) {
    rudder_limits limits{};
    limits.struct_size = sizeof limits;
    limits.max_batch_size = 1;
    limits.max_steps = 10;
    limits.max_samples = 4;
    limits.max_length = 8;
    rudder_generator* gen = nullptr;
    // recipe(): 3 samples, batch 2, 40 steps, max_length 16.
    const std::string text = recipe("discrete");
    EXPECT_EQ(rudder_generator_create_limited(text.c_str(), nullptr, nullptr, &limits, &gen),
              RUDDER_ERR_INVALID_RECIPE);
    EXPECT_EQ(gen, nullptr);
    const std::string message = rudder_last_error();
    EXPECT_THAT(message, HasSubstr("/batch_size"));
    EXPECT_THAT(message, HasSubstr("/sampler/steps"));
    EXPECT_THAT(message, HasSubstr("/max_length"));
    EXPECT_THAT(message, Not(HasSubstr("/samples")));

    limits.max_batch_size = limits.max_steps = limits.max_length = 0;  // their defaults again
    ASSERT_EQ(rudder_generator_create_limited(text.c_str(), nullptr, nullptr, &limits, &gen), RUDDER_OK)
        << rudder_last_error();
    Generator limited(gen);
    rudder_generate_options more = rudder_default_generate_options();
    more.samples = 5;
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(limited.get(), &more, &res), RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(rudder_generator_last_error(limited.get()),
                HasSubstr("samples must be 0 (the recipe's) or 1 to 4, got 5"));
    more.samples = 4;
    EXPECT_EQ(rudder_results_count(generate(limited.get(), &more).get()), 4u);

    limits.max_length = -1;
    EXPECT_EQ(rudder_generator_create_limited(text.c_str(), nullptr, nullptr, &limits, &gen),
              RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(rudder_last_error(), HasSubstr("rudder_limits.max_length is -1"));
    EXPECT_EQ(rudder_generator_create_limited(nullptr, nullptr, nullptr, nullptr, &gen), RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(rudder_generator_create_limited(text.c_str(), "x.json", nullptr, nullptr, &gen),
              RUDDER_ERR_INVALID_ARGUMENT);

    // Without max_length the model's length is used, and it too must be within the limit.
    limits.max_length = 8;
    EXPECT_EQ(
        rudder_generator_create_limited(R"({"model": "e2e-corpus", "family": "discrete", "sampler": {"steps": 5}})",
                                        nullptr, nullptr, &limits, &gen),
        RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(),
                HasSubstr("/max_length: model 'e2e-corpus' handles 64 positions, over the limit of 8"));

    // A caller built against an older rudder_limits passes a shorter struct: the members it lacks keep defaults.
    rudder_limits shorter{};
    shorter.struct_size = offsetof(rudder_limits, max_batch_size);
    shorter.max_batch_size = 1;  // beyond the caller's struct: never read
    ASSERT_EQ(rudder_generator_create_limited(text.c_str(), nullptr, nullptr, &shorter, &gen), RUDDER_OK)
        << rudder_last_error();
    rudder_generator_free(gen);

    // A zeroed struct: the message says how to fill it (rudder_limits has no defaults function).
    rudder_limits zeroed{};
    EXPECT_EQ(rudder_generator_create_limited(text.c_str(), nullptr, nullptr, &zeroed, &gen),
              RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(rudder_last_error(), HasSubstr("set struct_size = sizeof(rudder_limits)"));
    EXPECT_THAT(rudder_last_error(), Not(HasSubstr("rudder_default_limits")));
}

TEST(CApi, LastErrorIsPerThread) {
    rudder_generator* gen = nullptr;
    ASSERT_EQ(rudder_generator_create("[1]", nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    const std::string mine = rudder_last_error();
    std::string theirs = "unset";
    std::thread([&] { theirs = rudder_last_error(); }).join();
    EXPECT_EQ(theirs, "");
    EXPECT_EQ(rudder_last_error(), mine);
}

TEST(CApi, OptionsReplaceTheModelAndAddSearchFolders) {
    // The recipe names no model: the option gives one (here a directory, as a path).
    const std::string no_model = R"({"family": "discrete", "sampler": {"steps": 20}, "samples": 1, "max_length": 12,
                                     "controllers": [{"plugin": "good", "weight": 0.001}]})";
    rudder_options options = rudder_default_options();
    options.model = RUDDER_TEST_MODEL_DIR;
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;
    Generator gen = create(no_model, &options);
    ASSERT_TRUE(gen);
    Results res = generate(gen.get());
    ASSERT_EQ(rudder_results_verdict_count(res.get()), 1u);
    EXPECT_STREQ(rudder_results_verdict(res.get(), 0, 0)->label, "good");
    EXPECT_THAT(rudder_results_verdict(res.get(), 0, 0)->detail, HasSubstr("\"n_tokens\""));

    rudder_generator* missing = nullptr;
    EXPECT_EQ(rudder_generator_create(no_model.c_str(), nullptr, &missing), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("/model"));
}

TEST(CApi, ALibraryThatCrashesOrHangsOnThePluginPathDoesNotStopAGenerator) {
    // Issue 20, item 12: libraries that abort, exit, hang or claim 10^8 controllers while loading sit on the path;
    // they are scanned in a child process, and the generator loads only the library its recipe uses.
    ::setenv("RUDDER_PLUGIN_SCAN_TIMEOUT", "3", 1);
    const std::string recipe_text = R"({"family": "discrete", "sampler": {"steps": 5}, "samples": 1, "max_length": 12,
                                        "controllers": [{"plugin": "good", "weight": 0.001}]})";
    const std::string path = std::string(RUDDER_TEST_BROKEN_FIXTURE_DIR) + ":" + RUDDER_TEST_FIXTURE_DIR;
    rudder_options options = rudder_default_options();
    options.model = RUDDER_TEST_MODEL_DIR;
    options.plugin_path = path.c_str();
    Generator gen = create(recipe_text, &options);
    ASSERT_TRUE(gen) << rudder_last_error();
    Results res = generate(gen.get());
    ASSERT_EQ(rudder_results_verdict_count(res.get()), 1u);
    EXPECT_STREQ(rudder_results_verdict(res.get(), 0, 0)->label, "good");
    ::unsetenv("RUDDER_PLUGIN_SCAN_TIMEOUT");
}

struct ProgressLog {
    std::vector<rudder_progress> calls;
    std::vector<std::vector<std::string>> texts;
    int64_t cancel_at = -1;  // cancel when this many calls were made
};

int32_t record_progress(const rudder_progress* p, void* user_data) {
    auto* log = static_cast<ProgressLog*>(user_data);
    log->calls.push_back(*p);
    log->texts.emplace_back(p->texts, p->texts + p->n_texts);
    return static_cast<int64_t>(log->calls.size()) == log->cancel_at ? 1 : 0;
}

TEST(CApi, ProgressReportsEveryStepAndTheCurrentText) {
    Generator gen = create(recipe("discrete"));
    ProgressLog log;
    rudder_generate_options options = rudder_default_generate_options();
    options.on_progress = record_progress;
    options.user_data = &log;
    options.progress_text = 1;
    Results res = generate(gen.get(), &options);
    ASSERT_EQ(log.calls.size(), 80u);  // 2 batches (2 + 1 samples) x 40 steps
    EXPECT_EQ(log.calls[0].step, 1);
    EXPECT_EQ(log.calls[0].steps, 40);
    EXPECT_EQ(log.calls[0].batches, 2);
    EXPECT_EQ(log.calls[0].samples_total, 3);
    EXPECT_LT(log.calls[0].t, 1.0);
    EXPECT_EQ(log.calls[79].batch, 1);
    EXPECT_EQ(log.calls[79].samples_done, 2);
    EXPECT_LT(log.calls[79].t, 0.05);
    ASSERT_EQ(log.texts[0].size(), 2u);
    ASSERT_EQ(log.texts[79].size(), 1u);
    // The fixed prefix shows from the first step; the last step's best guess is the result.
    EXPECT_THAT(log.texts[0][0], ::testing::StartsWith("The Eagle"));
    EXPECT_EQ(log.texts[39][1], rudder_results_text(res.get(), 1));
    EXPECT_EQ(log.texts[79][0], rudder_results_text(res.get(), 2));

    ProgressLog quiet;  // without progress_text no decoding happens
    options.user_data = &quiet;
    options.progress_text = 0;
    generate(gen.get(), &options);
    EXPECT_EQ(quiet.calls.size(), 80u);
    EXPECT_EQ(quiet.calls[0].texts, nullptr);
    EXPECT_EQ(quiet.calls[0].n_texts, 0);
}

TEST(CApi, CancelStopsTheRunAndTheGeneratorStaysUsable) {
    Generator gen = create(recipe("continuous"));
    const auto expected = fingerprint(generate(gen.get()).get());
    ProgressLog log;
    log.cancel_at = 7;
    rudder_generate_options options = rudder_default_generate_options();
    options.on_progress = record_progress;
    options.user_data = &log;
    rudder_results* res = reinterpret_cast<rudder_results*>(0x1);
    EXPECT_EQ(rudder_generate(gen.get(), &options, &res), RUDDER_ERR_CANCELLED);
    EXPECT_EQ(res, nullptr);
    EXPECT_EQ(log.calls.size(), 7u);
    EXPECT_THAT(rudder_generator_last_error(gen.get()), HasSubstr("cancelled"));
    EXPECT_EQ(fingerprint(generate(gen.get()).get()), expected);
    EXPECT_STREQ(rudder_generator_last_error(gen.get()), "");
}

TEST(CApi, ACancelledRunCanKeepTheSamplesItFinished) {
    Generator gen = create(recipe("discrete"));
    const Results full = generate(gen.get());
    ProgressLog log;
    log.cancel_at = 50;  // within the second batch of two: the first batch's two samples are finished
    rudder_generate_options options = rudder_default_generate_options();
    options.on_progress = record_progress;
    options.user_data = &log;
    ASSERT_EQ(rudder_generator_keep_partial(gen.get(), 1), RUDDER_OK);
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(gen.get(), &options, &res), RUDDER_ERR_CANCELLED);
    const Results partial(res);
    ASSERT_NE(partial.get(), nullptr);
    ASSERT_EQ(rudder_results_count(partial.get()), 2u);
    for (size_t i = 0; i < 2; ++i)
        EXPECT_STREQ(rudder_results_text(partial.get(), i), rudder_results_text(full.get(), i));
}

// API 1.3: a cancel from another thread stops a call blocked in a controller's process at once, whatever its
// time_limit (here none), and the next call starts a new process for it.
TEST(CApi, CancelFromAnotherThreadStopsAStepBlockedInAControllersProcess) {
    rudder_options options = rudder_default_options();
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;
    const std::string marker = ::testing::TempDir() + "rudder_c_api_hang_once_" + std::to_string(::getpid());
    std::remove(marker.c_str());
    Generator gen = create(recipe("discrete", 9, 3,
                                  R"(, {"plugin": "faulty", "isolation": "process", "time_limit": 0,
                                        "params": {"fault": "hang", "at_step": 2, "once": ")" +
                                      marker + R"("}})"),
                           &options);
    ASSERT_TRUE(gen) << rudder_last_error();
    ASSERT_EQ(rudder_generator_keep_partial(gen.get(), 1), RUDDER_OK);
    std::thread canceller([&] {
        // Cancels once the step hangs (the plugin leaves its marker just before).
        while (::access(marker.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        EXPECT_EQ(rudder_generator_cancel(gen.get()), RUDDER_OK);
    });
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(gen.get(), nullptr, &res), RUDDER_ERR_CANCELLED);
    canceller.join();
    const Results partial(res);
    EXPECT_EQ(rudder_results_count(partial.get()), 0u);
    EXPECT_THAT(rudder_generator_last_error(gen.get()), HasSubstr("cancelled"));
    EXPECT_EQ(rudder_generator_cancel(nullptr), RUDDER_ERR_INVALID_ARGUMENT);
    Results next = generate(gen.get());
    EXPECT_EQ(rudder_results_count(next.get()), 3u);
    std::remove(marker.c_str());
}

// A recipe file that is a FIFO would block the open for ever, /dev/zero would be read until memory runs out: both are
// refused at once, as is recipe text over 16 MiB.
TEST(CApi, RecipesThatAreNotRegularFilesOrTooLargeAreRefusedAtOnce) {
    const std::string fifo = ::testing::TempDir() + "rudder_c_api_fifo_" + std::to_string(::getpid());
    std::remove(fifo.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::atomic<bool> returned{false};
    std::thread unblock([&] {  // were the open to block (the old behaviour), a writer comes after 10 s
        for (int i = 0; i < 1000 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (!returned) std::ofstream(fifo).put(' ');
    });
    rudder_generator* gen = nullptr;
    EXPECT_EQ(rudder_generator_create_from_file(fifo.c_str(), nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    returned = true;
    unblock.join();
    EXPECT_THAT(rudder_last_error(), HasSubstr("recipe file '" + fifo + "' is a FIFO: only regular files are read"));
    std::remove(fifo.c_str());

    EXPECT_EQ(rudder_generator_create_from_file("/dev/zero", nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("recipe file '/dev/zero' is a character device"));

    const std::string huge = "{\"model\": \"e2e-corpus\", \"pad\": \"" + std::string(17 << 20, 'x') + "\"}";
    EXPECT_EQ(rudder_generator_create(huge.c_str(), nullptr, &gen), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("the recipe is larger than 16 MiB"));

    // A model name of 10 MB, given as the option that replaces the recipe's.
    rudder_options options = rudder_default_options();
    const std::string long_name(10000000, 'm');
    options.model = long_name.c_str();
    EXPECT_EQ(rudder_generator_create(recipe("discrete").c_str(), &options, &gen), RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("a model name or path of 10000000 bytes is over the limit of 4096"));
    EXPECT_LT(std::string(rudder_last_error()).size(), 2000u);
}

struct FreeAttempt {
    rudder_generator* gen;
    std::string message;
};

int32_t free_own_generator(const rudder_progress*, void* user_data) {
    auto* attempt = static_cast<FreeAttempt*>(user_data);
    rudder_generator_free(attempt->gen);  // refused: the call is running
    attempt->message = rudder_last_error();
    return 1;
}

TEST(CApi, FreeingAGeneratorFromItsOwnCallbackIsRefused) {
    Generator gen = create(recipe("discrete"));
    FreeAttempt attempt{gen.get(), ""};
    rudder_generate_options options = rudder_default_generate_options();
    options.on_progress = free_own_generator;
    options.user_data = &attempt;
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(gen.get(), &options, &res), RUDDER_ERR_CANCELLED);
    EXPECT_THAT(attempt.message, HasSubstr("busy"));
    EXPECT_TRUE(generate(gen.get())) << "the generator was freed under its own call";
}

int32_t generate_again(const rudder_progress*, void* user_data) {
    auto* gen = static_cast<rudder_generator*>(user_data);
    rudder_results* res = nullptr;
    const rudder_status status = rudder_generate(gen, nullptr, &res);
    return status == RUDDER_ERR_BUSY && res == nullptr ? 1 : 0;  // cancel once the nested call was refused
}

TEST(CApi, ASecondCallOnABusyGeneratorIsRefused) {
    Generator gen = create(recipe("discrete"));
    rudder_generate_options options = rudder_default_generate_options();
    options.on_progress = generate_again;
    options.user_data = gen.get();
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(gen.get(), &options, &res), RUDDER_ERR_CANCELLED) << "the nested call was not refused";
}

// Contributions that would empty every sample with success: each stops the run naming the controller.
TEST(CApi, ContributionsThatCannotMakeADistributionAreFailuresNamingTheController) {
    rudder_options options = rudder_default_options();
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;
    auto with = [](const std::string& controller) {
        return R"({"model": "e2e-corpus", "family": "discrete", "sampler": {"steps": 10}, "max_length": 8,
                   "controllers": [)" +
               controller + "]}";
    };
    // 3e38 is finite, ten times it is not: the run stops.
    Generator gen = create(with(R"({"plugin": "nan", "weight": 10, "params": {"huge": true}})"), &options);
    ASSERT_TRUE(gen) << rudder_last_error();
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(gen.get(), nullptr, &res), RUDDER_ERR_GENERATION_FAILED);
    EXPECT_THAT(rudder_generator_last_error(gen.get()), HasSubstr("'nan' (weight 10)"));
    // The mask token (id 2) fixed, which the sample would decode to nothing: a hard constraint, found when the
    // generator is made.
    rudder_generator* masked = nullptr;
    EXPECT_EQ(rudder_generator_create(with(R"({"plugin": "hard", "params": {"fix": 2}})").c_str(), &options, &masked),
              RUDDER_ERR_INVALID_RECIPE);
    EXPECT_EQ(masked, nullptr);
    EXPECT_THAT(rudder_last_error(), HasSubstr("'hard' fixes the mask token (id 2) at position 0"));
    // The same huge delta at weight 1 is within float32: the run goes through.
    Generator fine = create(recipe("discrete", 9, 3, R"(, {"plugin": "nan", "params": {"huge": true}})"), &options);
    ASSERT_TRUE(fine) << rudder_last_error();
    EXPECT_TRUE(generate(fine.get()));
}

TEST(CApi, AControllerFailureIsAStatusAndTheGeneratorStaysUsable) {
    rudder_options options = rudder_default_options();
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;
    Generator gen =
        create(recipe("discrete", 9, 3, R"(, {"plugin": "throws", "params": {"throw_in":"step"}})"), &options);
    ASSERT_TRUE(gen);
    rudder_results* res = nullptr;
    for (int attempt = 0; attempt < 2; ++attempt) {
        EXPECT_EQ(rudder_generate(gen.get(), nullptr, &res), RUDDER_ERR_GENERATION_FAILED);
        EXPECT_EQ(res, nullptr);
        EXPECT_THAT(rudder_generator_last_error(gen.get()), HasSubstr("throws"));
    }
    // Two controllers fixing different tokens at one position: found when the generator is made, naming both.
    rudder_generator* conflict = nullptr;
    EXPECT_EQ(rudder_generator_create(
                  recipe("discrete", 9, 3, R"(, {"plugin": "span", "params": {"prefix": "Aromi"}})").c_str(), nullptr,
                  &conflict),
              RUDDER_ERR_INVALID_RECIPE);
    EXPECT_THAT(rudder_last_error(), HasSubstr("'span' and 'span_2'"));
}

TEST(CApi, AControllerThatCrashesInAProcessOfItsOwnFailsTheCallAndTheNextCallSucceeds) {
    rudder_options options = rudder_default_options();
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;
    // "faulty" takes its process down with abort() at step 2, once: the marker file it leaves lets the next run go.
    const std::string marker = ::testing::TempDir() + "rudder_c_api_crash_once_" + std::to_string(::getpid());
    std::remove(marker.c_str());
    Generator gen = create(
        recipe(
            "discrete", 9, 3,
            R"(, {"plugin": "faulty", "isolation": "process", "params": {"fault": "abort", "at_step": 2, "once": ")" +
                marker + R"("}})"),
        &options);
    ASSERT_TRUE(gen) << rudder_last_error();
    rudder_results* res = nullptr;
    EXPECT_EQ(rudder_generate(gen.get(), nullptr, &res), RUDDER_ERR_GENERATION_FAILED);
    EXPECT_EQ(res, nullptr);
    EXPECT_THAT(rudder_generator_last_error(gen.get()),
                HasSubstr("controller 'faulty' (faulty, rudder_faulty.so): step did not complete at step "));
    EXPECT_THAT(rudder_generator_last_error(gen.get()), HasSubstr("killed by signal 6"));
    // The same generator: the controller runs in a new process and the call succeeds.
    Results next = generate(gen.get());
    ASSERT_TRUE(next);
    EXPECT_EQ(rudder_results_count(next.get()), 3u);
    std::remove(marker.c_str());
}

struct Captured {
    std::mutex mutex;
    std::vector<std::string> messages;
};
void capture_log(int32_t, const char* message, void* user_data) {
    auto* captured = static_cast<Captured*>(user_data);
    std::lock_guard<std::mutex> lock(captured->mutex);
    captured->messages.emplace_back(message);
}

TEST(CApi, LogMessagesGoToTheApplicationsCallback) {
    Captured captured;
    ASSERT_EQ(rudder_set_log(capture_log, &captured, RUDDER_LOG_LEVEL_DEBUG), RUDDER_OK);
    rudder_options options = rudder_default_options();
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;  // holds files the registry rejects, and says so at debug level
    create(recipe("discrete"), &options);
    ASSERT_EQ(rudder_set_log(nullptr, nullptr, RUDDER_LOG_LEVEL_WARN), RUDDER_OK);
    std::lock_guard<std::mutex> lock(captured.mutex);
    bool rejected = false;
    for (const auto& m : captured.messages)
        rejected = rejected || m.find("not_a_library.so rejected") != std::string::npos;
    EXPECT_TRUE(rejected) << captured.messages.size() << " messages";
}

TEST(CApi, ComputeThreadsAreACapThatDoesNotChangeTheSamples) {
    EXPECT_EQ(rudder_set_compute_threads(-1), RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(rudder_last_error(), HasSubstr("max_threads must be >= 0"));
    std::vector<std::vector<std::string>> runs;
    for (const int32_t threads : {1, 0}) {  // one thread, then every core the load leaves free
        ASSERT_EQ(rudder_set_compute_threads(threads), RUDDER_OK);
        for (const std::string family : {"discrete", "continuous"}) {
            Generator gen = create(recipe(family));
            runs.push_back(fingerprint(generate(gen.get()).get()));
        }
    }
    EXPECT_EQ(runs[0], runs[2]);
    EXPECT_EQ(runs[1], runs[3]);
}

TEST(CApi, GeneratorsOnSeveralThreadsGiveTheSequentialResults) {
    // Four generators of both families and different seeds, each with the "good" fixture too: it is not
    // THREAD_SAFE and fails a step that overlaps another of its steps, so the host must serialise it across
    // generators (each generator loads the library through its own registry).
    rudder_options options = rudder_default_options();
    options.plugin_path = RUDDER_TEST_FIXTURE_DIR;
    const std::string good = R"(, {"plugin": "good", "weight": 0.001})";
    const std::vector<std::string> recipes = {recipe("discrete", 9, 1, good), recipe("continuous", 8, 2, good),
                                              recipe("discrete", 10, 3, good), recipe("continuous", 9, 4, good)};
    std::vector<std::vector<std::string>> sequential;
    for (const auto& r : recipes) {
        Generator gen = create(r, &options);
        sequential.push_back(fingerprint(generate(gen.get()).get()));
    }

    std::vector<std::vector<std::string>> concurrent(recipes.size());
    std::vector<std::string> errors(recipes.size());
    std::vector<std::thread> threads;
    for (size_t k = 0; k < recipes.size(); ++k)
        threads.emplace_back([&, k] {
            // Create, generate twice and free on this thread, while the others do the same.
            rudder_generator* gen = nullptr;
            if (rudder_generator_create(recipes[k].c_str(), &options, &gen) != RUDDER_OK) {
                errors[k] = rudder_last_error();
                return;
            }
            for (int run = 0; run < 2; ++run) {
                rudder_results* res = nullptr;
                if (rudder_generate(gen, nullptr, &res) != RUDDER_OK) {
                    errors[k] = rudder_generator_last_error(gen);
                    break;
                }
                const auto print = fingerprint(res);
                if (run == 0) concurrent[k] = print;
                if (run == 1 && print != concurrent[k]) errors[k] = "second run differs";
                rudder_results_free(res);
            }
            rudder_generator_free(gen);
        });
    for (auto& thread : threads) thread.join();
    for (size_t k = 0; k < recipes.size(); ++k) {
        EXPECT_EQ(errors[k], "") << "generator " << k;
        EXPECT_EQ(concurrent[k], sequential[k]) << "generator " << k;
    }
}

TEST(CApi, ResultsAreReadableFromAnyThreadAfterTheGeneratorIsGone) {
    Results res;
    {
        Generator gen = create(recipe("discrete"));
        res = generate(gen.get());
    }
    std::vector<std::string> seen(3);
    std::vector<std::thread> threads;
    for (size_t k = 0; k < 3; ++k) threads.emplace_back([&, k] { seen[k] = rudder_results_json(res.get(), k); });
    for (auto& thread : threads) thread.join();
    for (size_t k = 0; k < 3; ++k) EXPECT_THAT(seen[k], HasSubstr(rudder_results_text(res.get(), k)));
}

}  // namespace
