#include <gtest/gtest.h>

#include <rudder/rudder_json.hpp>

#include <rudder/runtime/recipe.hpp>

namespace {

using rudder::parse_recipe;
using rudder::RecipeError;

// The issues a recipe text produces, as "pointer: message" lines.
std::vector<rudder::RecipeIssue> issues_of(const std::string& text) {
    try {
        parse_recipe(text, ".");
    } catch (const RecipeError& e) {
        return e.issues();
    }
    return {};
}

bool has_issue(const std::vector<rudder::RecipeIssue>& issues, const std::string& pointer, const std::string& words) {
    for (const auto& i : issues)
        if (i.pointer == pointer && i.message.find(words) != std::string::npos) return true;
    return false;
}

TEST(Recipe, DesignExampleParses) {
    const auto r = parse_recipe(R"json({
      "model": "e2e-continuous",
      "sampler": { "name": "ddim", "steps": 200 },
      "seed": 7, "samples": 8, "max_length": 64,
      "guidance": { "gradient_steps": 3, "step_size": 0.1, "fluency_weight": 0.01 },
      "controllers": [
        { "plugin": "length", "params": { "tokens": 14 } },
        { "plugin": "syntax_tree", "weight": 2.0, "active": { "from_t": 1.0, "to_t": 0.05 },
          "params": { "tree": "(S (NP (NNP Aromi)) (VP (VBZ is) (NP (DT a) (NN pub))))" } },
        { "plugin": "cfg", "params": { "condition": "food[Italian], area[riverside]", "scale": 2.0 } }
      ]
    })json",
                                "/recipes");
    EXPECT_EQ(r.model, "e2e-continuous");
    EXPECT_EQ(r.sampler.name, "ddim");
    EXPECT_EQ(r.sampler.steps, 200);
    EXPECT_EQ(r.seed, 7u);
    EXPECT_EQ(r.samples, 8);
    EXPECT_EQ(r.guidance.gradient_steps, 3);
    ASSERT_EQ(r.controllers.size(), 3u);
    EXPECT_EQ(r.controllers[0].name, "length");
    EXPECT_EQ(r.controllers[1].weight, 2.0);
    EXPECT_DOUBLE_EQ(r.controllers[1].active.to_t, 0.05);
    EXPECT_EQ(r.controllers[0].params.at("tokens"), 14);
    EXPECT_EQ(r.base_dir, "/recipes");
}

TEST(Recipe, DefaultsWhenOmitted) {
    const auto r = parse_recipe(R"({"model": "m"})", ".");
    EXPECT_EQ(r.samples, 1);
    EXPECT_EQ(r.max_length, 0);  // the model's, decided when the model is loaded
    EXPECT_EQ(r.device, "cpu");
    EXPECT_TRUE(r.sampler.name.empty());  // the model's family picks it
    EXPECT_TRUE(r.controllers.empty());
}

TEST(Recipe, UnknownKeysSuggestTheRightOne) {
    const auto issues = issues_of(R"({"model": "m", "sampler": {"stpes": 10}, "controlers": []})");
    EXPECT_TRUE(has_issue(issues, "/sampler/stpes", "did you mean 'steps'?"));
    EXPECT_TRUE(has_issue(issues, "/controlers", "did you mean 'controllers'?"));
}

TEST(Recipe, EveryProblemIsReportedWithItsPointer) {
    const auto issues = issues_of(R"({
      "sampler": {"name": "ddmi", "steps": 0, "temperature": 0},
      "samples": "eight", "max_length": -3, "device": "tpu",
      "controllers": [ {"weight": "x"}, {"plugin": "length", "active": {"from_t": 0.2, "to_t": 0.5}, "time_limit": -1}, 5 ]
    })");
    EXPECT_TRUE(has_issue(issues, "/model", "required"));
    EXPECT_TRUE(has_issue(issues, "/sampler/name", "did you mean \"ddim\"?"));
    EXPECT_TRUE(has_issue(issues, "/sampler/steps", "expected an integer in [1, 100000]"));
    EXPECT_FALSE(has_issue(issues, "/sampler/temperature", "")) << "0 is the discrete samplers' arg-max";
    EXPECT_TRUE(has_issue(issues, "/samples", "got \"eight\""));
    EXPECT_TRUE(has_issue(issues, "/max_length", "got -3"));
    EXPECT_TRUE(has_issue(issues, "/device", "'cpu', 'cuda'"));
    EXPECT_TRUE(has_issue(issues, "/controllers/0/plugin", "required"));
    EXPECT_TRUE(has_issue(issues, "/controllers/0/weight", "expected a number"));
    EXPECT_TRUE(has_issue(issues, "/controllers/1/active", "must not exceed from_t"));
    EXPECT_TRUE(has_issue(issues, "/controllers/1/time_limit", "expected a number in [0, 86400], got -1"));
    EXPECT_TRUE(has_issue(issues, "/controllers/2", "expected an object"));
    EXPECT_EQ(issues.size(), 11u);
}

TEST(Recipe, IsolationPerControllerAndForAll) {
    const auto r = rudder::parse_recipe(R"({"model": "m", "isolation": "process", "controllers": [
        {"plugin": "length"}, {"plugin": "span", "isolation": "in_process", "on_failure": "continue"}]})",
                                        ".");
    ASSERT_TRUE(r.isolation.has_value());
    EXPECT_EQ(*r.isolation, "process");
    EXPECT_EQ(r.controllers[0].isolation, "");  // the recipe's
    EXPECT_EQ(r.controllers[0].on_failure, "fail");
    EXPECT_EQ(r.controllers[1].isolation, "in_process");
    EXPECT_EQ(r.controllers[1].on_failure, "continue");
    EXPECT_FALSE(rudder::parse_recipe(R"({"model": "m"})", ".").isolation.has_value());  // the host's default

    const auto issues = issues_of(R"({"model": "m", "isolation": "proces", "controllers": [
        {"plugin": "length", "isolation": "sandbox", "on_failure": "contine"}]})");
    EXPECT_TRUE(has_issue(issues, "/isolation",
                          "expected one of \"in_process\", \"process\", got \"proces\"; did "
                          "you mean \"process\"?"));
    EXPECT_TRUE(has_issue(issues, "/controllers/0/isolation", "got \"sandbox\""));
    EXPECT_TRUE(has_issue(issues, "/controllers/0/on_failure", "did you mean \"continue\"?"));
    EXPECT_EQ(issues.size(), 3u);
}

TEST(Recipe, WeightsAreStoredOrInt8) {
    EXPECT_EQ(rudder::parse_recipe(R"({"model": "m"})", ".").weights, "stored");
    EXPECT_EQ(rudder::parse_recipe(R"({"model": "m", "weights": "int8"})", ".").weights, "int8");
    const auto issues = issues_of(R"({"model": "m", "weights": "int4"})");
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_TRUE(has_issue(issues, "/weights", "expected one of \"stored\", \"int8\", got \"int4\""));
}

TEST(Recipe, SyntaxErrorsGiveLineAndColumn) {
    const auto issues = issues_of("{\n  \"model\": \"m\",\n  \"samples\": 3,,\n}");
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_NE(issues[0].message.find("line 3"), std::string::npos) << issues[0].message;
}

// Found by fuzz_recipe: the parser throws out_of_range, not parse_error, for a number beyond double's range, and
// that escaped parse_recipe.
TEST(Recipe, ANumberBeyondDoublesRangeIsARecipeError) {
    const auto issues = issues_of(R"({"model": "m", "seed": 41e308})");
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_NE(issues[0].message.find("not valid JSON"), std::string::npos) << issues[0].message;
    EXPECT_NE(issues[0].message.find("number overflow"), std::string::npos) << issues[0].message;
}

TEST(Recipe, LimitsRefuseAbsurdRequestsUpFront) {
    rudder::RecipeLimits limits;
    limits.max_batch_size = 64;
    try {
        parse_recipe(R"({"model": "m", "batch_size": 65})", ".", limits);
        FAIL() << "batch above the limit accepted";
    } catch (const RecipeError& e) {
        EXPECT_TRUE(has_issue(e.issues(), "/batch_size", "[1, 64]"));
    }
}

TEST(Recipe, DefaultsOverALimitAreCappedOrMustBeGiven) {
    rudder::RecipeLimits limits;
    limits.max_batch_size = 4;  // the default batch of 16 only groups samples: capped
    limits.max_steps = 50;      // the default 200 steps change the result: the recipe must say
    EXPECT_EQ(parse_recipe(R"({"model": "m", "sampler": {"steps": 50}})", ".", limits).batch_size, 4);
    try {
        parse_recipe(R"({"model": "m"})", ".", limits);
        FAIL() << "default steps over the limit accepted";
    } catch (const RecipeError& e) {
        EXPECT_TRUE(has_issue(e.issues(), "/sampler/steps", "the default of 200 steps is over the limit of 50"));
    }
    limits.max_length = 32;
    EXPECT_EQ(parse_recipe(R"({"model": "m", "sampler": {"steps": 5}})", ".", limits).max_length_limit, 32);
}

TEST(Recipe, EtaOnlyForDdim) {
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "ddpm", "eta": 0.5}})"), "/sampler/eta",
                          "ddim sampler only"));
    EXPECT_NO_THROW(parse_recipe(R"({"model": "m", "sampler": {"name": "ddim", "eta": 0.5}})", "."));
}

TEST(Recipe, NoiseScaleOnlyForContinuousSamplersAndInRange) {
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "analytic", "noise_scale": 0.5}})"),
                          "/sampler/noise_scale", "continuous samplers (ddpm, ddim) only"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "ddpm", "noise_scale": 3}})"),
                          "/sampler/noise_scale", "in [0, 2]"));
    EXPECT_DOUBLE_EQ(parse_recipe(R"({"model": "m", "sampler": {"name": "ddpm", "noise_scale": 0.8}})", ".")
                         .sampler.settings.at("noise_scale"),
                     0.8);
}

TEST(Recipe, ConfidenceSettingsAndTruncationAreChecked) {
    const rudder::Recipe r =
        parse_recipe(R"({"model": "m", "sampler": {"name": "confidence", "steps": 32, "order": "margin",
                                     "block_length": 8, "top_k": 5, "top_p": 0.9}})",
                     ".");
    EXPECT_EQ(r.sampler.name, "confidence");
    EXPECT_EQ(r.sampler.steps, 32);
    EXPECT_EQ(r.sampler.settings.at("order"), "margin");  // the settings as written; the process reads them
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "analytic", "order": "margin"}})"),
                          "/sampler/order", "confidence sampler only, not 'analytic'"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"block_length": 4}})"), "/sampler/block_length",
                          "first_hitting, confidence, llada and dream samplers only (name it)"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "confidence", "order": "greedy"}})"),
                          "/sampler/order", "probability"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "ddim", "top_k": 3}})"), "/sampler/top_k",
                          "discrete samplers only"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "analytic", "top_p": 0}})"), "/sampler/top_p",
                          "above 0"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "analytic", "top_p": 1.5}})"),
                          "/sampler/top_p", "[0, 1]"));
}

// The authors' samplers' keys (docs/checkpoints.md, "The authors' samplers"): temperature 0 is theirs by default and
// the arg-max; LLaDA draws from the whole distribution; Fast-dLLM's two rules are one or the other.
TEST(Recipe, TheAuthorsSamplersTakeTheirOwnKeys) {
    const rudder::Recipe llada = parse_recipe(
        R"({"model": "m", "sampler": {"name": "llada", "steps": 8, "block_length": 4, "remasking": "random"}})", ".");
    EXPECT_EQ(llada.sampler.name, "llada");
    EXPECT_TRUE(issues_of(R"({"model": "m", "sampler": {"name": "dream", "alg": "entropy", "alg_temp": 0.5,
                                                       "eps": 0.01, "top_p": 0.9, "top_k": 20, "temperature": 0}})")
                    .empty());
    EXPECT_TRUE(issues_of(R"({"model": "m", "sampler": {"name": "analytic", "temperature": 0}})").empty());
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "llada", "top_k": 5}})"), "/sampler/top_k",
                          "LLaDA's generate() draws from the whole distribution"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "llada", "remasking": "lowest"}})"),
                          "/sampler/remasking", "low_confidence"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "dream", "alg": "greedy"}})"), "/sampler/alg",
                          "maskgit_plus"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "dream", "factor": 1}})"), "/sampler/factor",
                          "llada sampler only"));
    EXPECT_TRUE(
        issues_of(R"({"model": "m", "sampler": {"name": "dream", "block_length": 8, "threshold": 0.9}})").empty());
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "llada", "threshold": 0.9, "factor": 1}})"),
                          "/sampler/factor", "give one"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "confidence", "alg": "entropy"}})"),
                          "/sampler/alg", "dream sampler only"));
}

// Keys are checked against the sampler named, whichever process reads them; a value is checked by every process that
// reads its key while no sampler is named, and reported once.
TEST(Recipe, EachKeyAppliesToItsSamplers) {
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "analytic", "x0": "clamp"}})"), "/sampler/x0",
                          "continuous samplers (ddpm, ddim) only, not 'analytic'"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "ddpm", "cache": false}})"), "/sampler/cache",
                          "discrete samplers only, not 'ddpm'"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "euler", "cache": "no"}})"), "/sampler/cache",
                          "expected"));
    // Temperature 0 is the discrete samplers' arg-max: no sampler named, some room takes it (the model's room reads it
    // again once the model is known); -1 no room takes, reported once, in the widest room's words.
    EXPECT_TRUE(issues_of(R"({"model": "m", "sampler": {"temperature": 0}})").empty());
    const auto issues = issues_of(R"({"model": "m", "sampler": {"temperature": -1}})");
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_EQ(issues[0].pointer, "/sampler/temperature");
    EXPECT_NE(issues[0].message.find("[0, 100]"), std::string::npos) << issues[0].message;
    EXPECT_TRUE(issues_of(R"({"model": "m", "sampler": {"eta": 0.5, "top_k": 3, "noise_scale": 0.5}})").empty());
}

TEST(Recipe, FirstHittingTakesNoStepsAndCandidatesAreBounded) {
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "sampler": {"name": "first_hitting", "steps": 50}})"),
                          "/sampler/steps", "one step per position"));
    EXPECT_EQ(parse_recipe(R"({"model": "m", "sampler": {"name": "first_hitting"}})", ".").sampler.name,
              "first_hitting");
    EXPECT_EQ(parse_recipe(R"({"model": "m"})", ".").candidates, 64);
    EXPECT_EQ(parse_recipe(R"({"model": "m", "candidates": 8})", ".").candidates, 8);
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "candidates": 0})"), "/candidates", "in [1, 4096]"));
}

TEST(Recipe, ControllerLabelsAreUnique) {
    const auto r = parse_recipe(R"({"model": "m", "controllers": [
        {"plugin": "span", "params": {}}, {"plugin": "span"}, {"plugin": "./x/rudder_span.so", "name": "own"}]})",
                                ".");
    EXPECT_EQ(r.controllers[0].name, "span");
    EXPECT_EQ(r.controllers[1].name, "span_2");
    EXPECT_EQ(r.controllers[2].name, "own");
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "controllers": [{"plugin": "a", "name": "x"},
                                                                     {"plugin": "b", "name": "x"}]})"),
                          "/controllers/1/name", "used by another"));
}

TEST(Recipe, APluginPinIsSixtyFourHexDigitsKeptInLowerCase) {
    const std::string digest(64, 'A');
    const auto r = parse_recipe(R"({"model": "m", "controllers": [{"plugin": "span", "sha256": ")" + digest + R"("},
                                                                  {"plugin": "length"}]})",
                                ".");
    EXPECT_EQ(r.controllers[0].sha256, std::string(64, 'a'));
    EXPECT_EQ(r.controllers[1].sha256, "");
    for (const std::string& bad : {std::string(63, 'a'), std::string(65, 'a'), std::string(63, 'a') + "g"})
        EXPECT_TRUE(
            has_issue(issues_of(R"({"model": "m", "controllers": [{"plugin": "span", "sha256": ")" + bad + R"("}]})"),
                      "/controllers/0/sha256", "64 hex digits"))
            << bad;
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "controllers": [{"plugin": "span", "sha256": 12}]})"),
                          "/controllers/0/sha256", "expected a string"));
}

TEST(Recipe, MissingFileIsARecipeError) { EXPECT_THROW(rudder::load_recipe("/nonexistent/recipe.json"), RecipeError); }

TEST(Recipe, ClosestMatch) {
    using rudder::json_input::closest_match;
    EXPECT_EQ(closest_match("lenght", {"length", "span"}), "length");
    EXPECT_EQ(closest_match("spa", {"length", "span"}), "span");
    EXPECT_EQ(closest_match("ddmi", {"ddpm", "ddim"}), "ddim");  // a swap is one edit
    EXPECT_EQ(closest_match("zzzzzz", {"length", "span"}), "");
}

// A recipe nested 100,000 arrays deep (200 KB) used to overflow the stack while it was copied (exit 139).
TEST(Recipe, DeepNestingIsRefusedWhileParsing) {
    const int n = 100000;
    const std::string text = R"({"model": "m", "controllers": [{"plugin": "length", "params": {"tokens": 5, "x": )" +
                             std::string(n, '[') + std::string(n, ']') + "}}]}";
    const auto issues = issues_of(text);
    EXPECT_TRUE(has_issue(issues, "", "nested deeper than 100 levels")) << (issues.empty() ? "" : issues[0].message);
}

// A key given twice was silently the last; a NUL cut error messages short; a bidirectional override makes a name
// display as another. Each is refused with the place it is at.
TEST(Recipe, DuplicateKeysNulsAndBidiOverridesAreRefusedWithAPointer) {
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "a", "samples": 2, "model": "b"})"), "/model", "given twice"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m", "controllers": [{"plugin": "length"},
                                       {"plugin": "length", "params": {"tokens": 5, "tokens": 6}}]})"),
                          "/controllers/1/params/tokens", "given twice"));
    EXPECT_TRUE(has_issue(issues_of(R"({"model": "m\u0000x"})"), "/model", "NUL"));
    EXPECT_TRUE(has_issue(
        issues_of(R"({"model": "m", "controllers": [{"plugin": "span", "params": {"prefix": ["a", "b\u0000"]}}]})"),
        "/controllers/0/params/prefix/1", "NUL"));
    EXPECT_TRUE(
        has_issue(issues_of("{\"model\": \"m\", \"controllers\": [{\"plugin\": \"length\", \"label\": \"ok\xE2\x80\xAE"
                            "evil\"}]}"),
                  "/controllers/0/label", "U+202E"));
    EXPECT_TRUE(has_issue(issues_of("{\"mo\xE2\x81\xA6"
                                    "del\": \"m\"}"),
                          "", "U+2066"));
    // The same characters elsewhere in a name are fine, and so are other escapes.
    EXPECT_TRUE(issues_of(R"({"model": "m\u00e9\n", "samples": 2})").empty());
}

// A recipe is read once, as a JsonDocument: a controller's params keep the text's key order (a schema's properties
// are written in the order it gives them), from text and from a parsed document alike; unknown keys are still
// reported in sorted order and values shown with sorted keys, as they were when the document was sorted.
TEST(Recipe, ParamsKeepTheTextsKeyOrderAndMessagesDoNotChange) {
    const std::string text = R"({"model": "m", "controllers": [{"plugin": "json_schema",
        "params": {"schema": {"properties": {"zeta": {}, "alpha": {"b": 1, "a": 2}}}, "start": 3}}]})";
    const auto r = parse_recipe(text, ".");
    ASSERT_EQ(r.controllers.size(), 1u);
    EXPECT_EQ(r.controllers[0].params.dump(),
              R"({"schema":{"properties":{"zeta":{},"alpha":{"b":1,"a":2}}},"start":3})");
    const auto doc = rudder::json_input::parse_document(text);
    EXPECT_EQ(rudder::parse_recipe_document(doc, ".").controllers[0].params.dump(), r.controllers[0].params.dump());

    const auto issues = issues_of(R"({"model": "m", "zz": 1, "aa": 2, "guidance": {"y": 1, "b": 2}})");
    ASSERT_EQ(issues.size(), 4u);
    EXPECT_EQ(issues[0].pointer, "/guidance/b");
    EXPECT_EQ(issues[1].pointer, "/guidance/y");
    EXPECT_EQ(issues[2].pointer, "/aa");
    EXPECT_EQ(issues[3].pointer, "/zz");
    EXPECT_TRUE(
        has_issue(issues_of(R"({"model": "m", "samples": {"b": 1, "a": 2}})"), "/samples", R"(got {"a":2,"b":1})"));
}

// 16,000 identical controllers took 17 s to label (a quadratic search for a free suffix); now they are capped, and
// labelling those within the cap is linear.
TEST(Recipe, ControllersAreCappedAndLabelledOnce) {
    auto recipe_of = [](int n) {
        std::string text = R"({"model": "m", "controllers": [)";
        for (int i = 0; i < n; ++i)
            text += std::string(i ? "," : "") + R"({"plugin": "length", "params": {"tokens": 5}})";
        return text + "]}";
    };
    const auto r = parse_recipe(recipe_of(256), ".");
    ASSERT_EQ(r.controllers.size(), 256u);
    EXPECT_EQ(r.controllers[0].name, "length");
    EXPECT_EQ(r.controllers[1].name, "length_2");
    EXPECT_EQ(r.controllers[255].name, "length_256");
    EXPECT_TRUE(has_issue(issues_of(recipe_of(4000)), "/controllers", "4000 controllers, over the limit of 256"));
    rudder::RecipeLimits more;
    more.max_controllers = 4000;
    EXPECT_EQ(parse_recipe(recipe_of(4000), ".", more).controllers.back().name, "length_4000");
}

}  // namespace
