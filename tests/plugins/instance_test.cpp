// The guarded instance: outputs arrive with the right values, every plugin misbehaviour becomes a PluginError that
// names the controller, the run services follow their C protocol, and the library outlives what it made.
#include "test_support.hpp"

#include <rudder/plugins/plugin_calls.hpp>

#include <gmock/gmock.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <thread>

namespace rudder::plugins::testing {
namespace {

using ::testing::HasSubstr;

// Expected "good" delta: 100 b + i + v / 100.
at::Tensor good_delta(const RunShape& shape) {
    const auto b = at::arange(shape.batch_size, at::kFloat).view({-1, 1, 1});
    const auto i = at::arange(shape.seq_len, at::kFloat).view({1, -1, 1});
    const auto v = at::arange(shape.vocab_size, at::kFloat).view({1, 1, -1});
    return 100 * b + i + v / 100;
}

TEST(ControllerInstance, GoodDeltaArrivesWithTheRightValues) {
    ControllerInstance good(fixture_type("good"), "{}", "g");
    EXPECT_EQ(good.label(), "g");
    EXPECT_TRUE(good.has(RUDDER_CAP_LOGIT_DELTA));
    const RunShape shape = discrete_shape();
    good.begin(shape, nullptr);
    for (int32_t step = 0; step < 3; ++step) {  // repeated steps get fresh, zeroed buffers
        const StepOutputs out = good.step(step_inputs(shape, step));
        ASSERT_TRUE(out.logit_delta.defined());
        EXPECT_EQ(out.logit_delta.sizes(), (std::vector<int64_t>{2, 3, 8}));
        EXPECT_EQ(out.logit_delta.scalar_type(), at::kFloat);
        EXPECT_TRUE(out.logit_delta.device().is_cpu());
        EXPECT_TRUE(at::allclose(out.logit_delta, good_delta(shape)));
        EXPECT_FALSE(out.grad.defined());
        EXPECT_FALSE(out.log_prob.defined());
        EXPECT_FALSE(out.fixed_tokens.defined());
        EXPECT_FALSE(out.forbidden.defined());
    }
}

TEST(ControllerInstance, GoodVerdictIsCopied) {
    ControllerInstance good(fixture_type("good"), "{}", "g");
    const Verdict verdict = good.evaluate(4, {1, 2, 3, 0}, 3, "the cat sat");
    EXPECT_EQ(verdict.satisfied, 1);
    EXPECT_TRUE(verdict.has_score);
    EXPECT_DOUBLE_EQ(verdict.score, 0.5);
    EXPECT_EQ(verdict.detail, "{\"n_tokens\":3,\"text\":\"the cat sat\"}");
    EXPECT_THROW(good.evaluate(0, {1, 2}, 3, "x"), std::invalid_argument);
}

TEST(ControllerInstance, WithoutEvaluateTheVerdictIsCannotTell) {
    ControllerInstance hard(fixture_type("hard"), "{}", "h");
    const Verdict verdict = hard.evaluate(0, {5, 1, 2}, 3, "a the cat");
    EXPECT_EQ(verdict.satisfied, -1);
    EXPECT_FALSE(verdict.has_score);
    EXPECT_EQ(verdict.detail, "");
}

TEST(ControllerInstance, HelperDefaultEvaluateLeavesTheVerdictUnknown) {
    ControllerInstance nan(fixture_type("nan"), "{}", "n");  // declares EVALUATE through the helper, overrides nothing
    const Verdict verdict = nan.evaluate(0, {1}, 1, "the");
    EXPECT_EQ(verdict.satisfied, -1);
    EXPECT_FALSE(verdict.has_score);
}

TEST(ControllerInstance, NaNIsRefusedNamingTheController) {
    ControllerInstance nan(fixture_type("nan"), "{}", "my_nan");
    nan.begin(discrete_shape(), nullptr);
    EXPECT_EQ(plugin_error_of([&] { nan.step(step_inputs(discrete_shape(), 3)); }),
              "controller 'my_nan' (nan, rudder_nan.so): wrote NaN or Inf to logit_delta at step 3");

    ControllerInstance inf(fixture_type("nan"), "{\"inf\":true}", "my_inf");
    inf.begin(discrete_shape(), nullptr);
    EXPECT_THAT(plugin_error_of([&] { inf.step(step_inputs(discrete_shape(), 0)); }),
                HasSubstr("controller 'my_inf' (nan, rudder_nan.so): wrote NaN or Inf to logit_delta at step 0"));
}

TEST(ControllerInstance, AVerdictDetailThatIsNotUtf8IsRefusedNamingTheController) {
    ControllerInstance bytes(fixture_type("faulty"), "{\"bad_detail\": 1}", "bytes");
    bytes.begin(discrete_shape(), nullptr);
    EXPECT_EQ(plugin_error_of([&] {
                  bytes.evaluate(2, {1, 2}, 2, "the cat");
              }),
              "controller 'bytes' (faulty, rudder_faulty.so): evaluate returned a detail that is not valid UTF-8 on "
              "sample 2 (it is JSON object text)");
}

// exit() inside an in-process call must not end the host with the plugin's status (0 would pass for success).
TEST(ControllerInstanceDeathTest, ExitInsideACallEndsTheProcessAsAFailureNamingTheController) {
    ::testing::FLAGS_gtest_death_test_style = "threadsafe";
    EXPECT_EXIT(
        {
            ControllerInstance exits(fixture_type("faulty"), "{\"fault\": \"exit\"}", "quitter");
            exits.begin(discrete_shape(), nullptr);
            exits.step(step_inputs(discrete_shape(), 0));
        },
        ::testing::ExitedWithCode(kPluginExitStatus),
        "controller 'quitter' \\(faulty, rudder_faulty.so\\) ended the process \\(exit\\(\\) called inside the "
        "plugin\\)");
    // exit() outside any plugin call keeps its status.
    EXPECT_EXIT(
        {
            ControllerInstance fine(fixture_type("faulty"), "{}", "fine");
            fine.begin(discrete_shape(), nullptr);
            fine.step(step_inputs(discrete_shape(), 0));
            std::exit(3);
        },
        ::testing::ExitedWithCode(3), "");
}

TEST(ControllerInstance, AThrowInCreateIsReportedAsInvalidParams) {
    const std::string message =
        plugin_error_of([] { ControllerInstance bad(fixture_type("throws"), "{\"throw_in\":\"create\"}", "t"); });
    EXPECT_EQ(
        message,
        "controller 't' (throws, rudder_throws.so): invalid params: throws fixture: deliberate failure in create");
}

TEST(ControllerInstance, ThrowsInEveryCallAreReportedAndTheHostKeepsWorking) {
    const RunShape shape = discrete_shape();
    {
        ControllerInstance in_begin(fixture_type("throws"), "{\"throw_in\":\"begin\"}", "tb");
        EXPECT_EQ(plugin_error_of([&] { in_begin.begin(shape, nullptr); }),
                  "controller 'tb' (throws, rudder_throws.so): begin failed (RUDDER_ERR_INTERNAL): "
                  "throws fixture: deliberate failure in begin");
        EXPECT_THROW(in_begin.step(step_inputs(shape, 0)), std::logic_error);  // no run has begun
    }
    {
        ControllerInstance in_step(fixture_type("throws"), "{\"throw_in\":\"step\"}", "ts");
        in_step.begin(shape, nullptr);
        EXPECT_EQ(plugin_error_of([&] { in_step.step(step_inputs(shape, 2)); }),
                  "controller 'ts' (throws, rudder_throws.so): step failed at step 2 (RUDDER_ERR_INTERNAL): "
                  "throws fixture: deliberate failure in step");
        EXPECT_THROW(in_step.step(step_inputs(shape, 3)), PluginError);  // still alive, still reporting
    }
    {
        ControllerInstance in_evaluate(fixture_type("throws"), "{\"throw_in\":\"evaluate\"}", "te");
        EXPECT_EQ(plugin_error_of([&] { in_evaluate.evaluate(7, {1}, 1, "the"); }),
                  "controller 'te' (throws, rudder_throws.so): evaluate failed on sample 7 (RUDDER_ERR_INTERNAL): "
                  "throws fixture: deliberate failure in evaluate");
    }
    ControllerInstance good(fixture_type("good"), "{}", "g");
    good.begin(shape, nullptr);
    EXPECT_TRUE(at::allclose(good.step(step_inputs(shape, 0)).logit_delta, good_delta(shape)));
}

TEST(ControllerInstance, AnErrorStatusCarriesThePluginsMessage) {
    ControllerInstance failing(fixture_type("error_status"), "{}", "e");
    failing.begin(discrete_shape(), nullptr);
    EXPECT_EQ(plugin_error_of([&] { failing.step(step_inputs(discrete_shape(), 3)); }),
              "controller 'e' (error_status, rudder_error_status.so): step failed at step 3 "
              "(RUDDER_ERR_INVALID_ARGUMENT): error_status fixture: step 3 is not acceptable");
}

TEST(ControllerInstance, ACallOverItsTimeLimitFailsNamingTheControllerAndTheLimit) {
    ControllerInstance slow(fixture_type("slow"), R"({"ms": 30})", "s");
    slow.begin(discrete_shape(), nullptr);
    EXPECT_NO_THROW(slow.step(step_inputs(discrete_shape(), 0)));  // no limit by default
    slow.set_time_limit(0.005);
    const std::string step_error = plugin_error_of([&] { slow.step(step_inputs(discrete_shape(), 2)); });
    EXPECT_THAT(step_error, HasSubstr("controller 's' (slow, rudder_slow.so): step took 0.0"));
    EXPECT_THAT(step_error, HasSubstr(" at step 2"));
    EXPECT_THAT(step_error, HasSubstr("over its time limit of 0.005 s"));
    EXPECT_THAT(plugin_error_of([&] {
                    slow.evaluate(4, {1, 2, 3}, 3, "the cat sat");
                }),
                HasSubstr("evaluate took 0.0"));
    slow.set_time_limit(10);  // the instance keeps working once the limit allows it
    EXPECT_EQ(slow.evaluate(4, {1, 2, 3}, 3, "the cat sat").satisfied, 1);
    EXPECT_THROW(slow.set_time_limit(-1), std::invalid_argument);
}

TEST(ControllerInstance, ABeginFailureNamesTheController) {
    ControllerInstance hard(fixture_type("hard"), "{}", "h");
    RunShape small = discrete_shape();
    small.vocab_size = 5;
    EXPECT_EQ(plugin_error_of([&] { hard.begin(small, nullptr); }),
              "controller 'h' (hard, rudder_hard.so): begin failed (RUDDER_ERR_UNSUPPORTED): "
              "hard needs a vocabulary above 5");
}

TEST(ControllerInstance, TamperedTensorHeadersAreCaught) {
    const std::pair<const char*, const char*> cases[] = {
        {"ndim", "wrote a tensor with a changed ndim (logit_delta) at step 1"},
        {"shape_pointer", "wrote a tensor with a changed shape pointer (logit_delta) at step 1"},
        {"shape_value", "wrote a tensor with a changed shape (logit_delta) at step 1"},
        {"data", "wrote a tensor with a changed data pointer (logit_delta) at step 1"},
        {"dtype", "wrote a tensor with a changed dtype (logit_delta) at step 1"},
        {"strides", "wrote a tensor with a changed strides (logit_delta) at step 1"},
        {"replace", "replaced the logit_delta tensor pointer at step 1"},
        {"written_bits", "set written bits for outputs it was not given (grad, forbidden) at step 1"},
    };
    for (const auto& [change, what] : cases) {
        ControllerInstance bad(fixture_type("bad_header"), std::string("{\"change\":\"") + change + "\"}", "b");
        bad.begin(discrete_shape(), nullptr);
        EXPECT_EQ(plugin_error_of([&] { bad.step(step_inputs(discrete_shape(), 1)); }),
                  std::string("controller 'b' (bad_header, rudder_bad_header.so): ") + what +
                      (std::string(change) == "written_bits" ? "" : "; outputs must be written in place"))
            << change;
    }
}

TEST(ControllerInstance, HardConstraintsArriveAsWritten) {
    ControllerInstance hard(fixture_type("hard"), "{}", "h");
    const RunShape shape = discrete_shape();
    hard.begin(shape, nullptr);
    const StepOutputs out = hard.step(step_inputs(shape, 0));
    EXPECT_FALSE(out.logit_delta.defined());
    ASSERT_TRUE(out.fixed_tokens.defined());
    ASSERT_TRUE(out.forbidden.defined());
    auto expected_fixed = at::full({2, 3}, -1, at::kLong);
    expected_fixed.select(1, 0).fill_(5);
    EXPECT_TRUE(at::equal(out.fixed_tokens, expected_fixed));
    auto expected_forbidden = at::zeros({2, 3, 8}, at::kByte);
    expected_forbidden.select(2, 3).fill_(1);
    EXPECT_TRUE(at::equal(out.forbidden, expected_forbidden));
}

TEST(ControllerInstance, FixedTokensOutsideTheVocabularyAreRefused) {
    for (const int64_t token : {int64_t{8}, int64_t{-2}}) {
        ControllerInstance hard(fixture_type("hard"), "{\"fix\":" + std::to_string(token) + "}", "h");
        hard.begin(discrete_shape(), nullptr);
        EXPECT_EQ(plugin_error_of([&] { hard.step(step_inputs(discrete_shape(), 4)); }),
                  "controller 'h' (hard, rudder_hard.so): wrote fixed_tokens value " + std::to_string(token) +
                      " outside [-1, 8) at step 4");
    }
    ControllerInstance edge(fixture_type("hard"), "{\"fix\":7}", "h");  // V - 1 is fine
    edge.begin(discrete_shape(), nullptr);
    EXPECT_EQ(edge.step(step_inputs(discrete_shape(), 0)).fixed_tokens[0][0].item<int64_t>(), 7);
}

TEST(ControllerInstance, UnwrittenOutputsAreNotReturned) {
    ControllerInstance noop(fixture_type("noop"), "{}", "n");
    noop.begin(discrete_shape(), nullptr);
    const StepOutputs out = noop.step(step_inputs(discrete_shape(), 0));
    EXPECT_FALSE(out.logit_delta.defined());
    EXPECT_FALSE(out.grad.defined());
    EXPECT_FALSE(out.log_prob.defined());
    EXPECT_FALSE(out.fixed_tokens.defined());
    EXPECT_FALSE(out.forbidden.defined());
}

TEST(ControllerInstance, EachControllerOfALibraryUsesItsOwnCallbacks) {
    ControllerInstance a(fixture_type("pair", "pair_a"), "{}", "a");
    ControllerInstance b(fixture_type("pair", "pair_b"), "{}", "b");
    a.begin(discrete_shape(), nullptr);
    b.begin(discrete_shape(), nullptr);
    EXPECT_TRUE(at::equal(a.step(step_inputs(discrete_shape(), 0)).logit_delta, at::ones({2, 3, 8})));
    EXPECT_TRUE(at::equal(b.step(step_inputs(discrete_shape(), 0)).logit_delta, at::full({2, 3, 8}, 2.0)));
}

TEST(ControllerInstance, DiscretePredictHandsOutWhatTheCapabilitiesAsk) {
    ControllerInstance probe(fixture_type("probe"), "{}", "p");
    probe.begin(discrete_shape(), nullptr);
    probe.step(step_inputs(discrete_shape(), 2));
    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("begin family=2 B=2 L=3 V=8 D=0 pad=0 mask=7 unk=-1 steps=10"));
    EXPECT_THAT(detail, HasSubstr("step phase=1 step=2/10 guide=0"));
    EXPECT_THAT(detail, HasSubstr("in: latent=- x0_logits=[2,3,8]f32@1:0=mixed tokens=[2,3]i64@1:0=mixed "
                                  "masked=[2,3]u8@1:0=mixed"));
    EXPECT_THAT(detail, HasSubstr("out: logit_delta=[2,3,8]f32@1:0=0 grad=[2,3,8]f32@1:0=0 log_prob=[2]f32@1:0=0 "
                                  "fixed_tokens=[2,3]i64@1:0=-1 forbidden=[2,3,8]u8@1:0=0;"));
}

TEST(ControllerInstance, ContinuousPhasesHandOutTheirOwnOutputs) {
    ControllerInstance probe(fixture_type("probe"), "{}", "p");
    const RunShape shape = continuous_shape();
    probe.begin(shape, nullptr);
    const StepOutputs predicted = probe.step(step_inputs(shape, 0));
    EXPECT_FALSE(predicted.grad.defined());
    StepInputs guide = step_inputs(shape, 0, RUDDER_PHASE_GUIDE);
    guide.guide_iter = 1;
    const StepOutputs guided = probe.step(guide);
    ASSERT_TRUE(guided.grad.defined());
    ASSERT_TRUE(guided.log_prob.defined());
    EXPECT_TRUE(at::equal(guided.grad, at::full({2, 3, 4}, 0.5)));
    EXPECT_TRUE(at::equal(guided.log_prob, at::full({2}, -1.25)));
    EXPECT_FALSE(guided.logit_delta.defined());

    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("begin family=1 B=2 L=3 V=8 D=4 pad=0 mask=-1"));
    EXPECT_THAT(detail, HasSubstr("step phase=1 step=0/10 guide=0 t=1 in: latent=[2,3,4]f32@1:0=mixed "
                                  "x0_logits=[2,3,8]f32@1:0=mixed tokens=[2,3]i64@1:0=mixed masked=- "
                                  "out: logit_delta=[2,3,8]f32@1:0=0 grad=- log_prob=[2]f32@1:0=0 "
                                  "fixed_tokens=[2,3]i64@1:0=-1 forbidden=[2,3,8]u8@1:0=0;"));
    EXPECT_THAT(detail, HasSubstr("step phase=2 step=0/10 guide=1 t=1 in: latent=[2,3,4]f32@1:0=mixed x0_logits=- "
                                  "tokens=[2,3]i64@1:0=mixed masked=- out: logit_delta=- grad=[2,3,4]f32@1:0=0 "
                                  "log_prob=[2]f32@1:0=0 fixed_tokens=- forbidden=-;"));
}

TEST(ControllerInstance, GuideIsNeverCalledWithoutGradientAndOnlyForContinuous) {
    ControllerInstance throws_in_step(fixture_type("throws"), "{\"throw_in\":\"step\"}", "t");
    throws_in_step.begin(continuous_shape(), nullptr);
    const StepOutputs out = throws_in_step.step(step_inputs(continuous_shape(), 0, RUDDER_PHASE_GUIDE));
    EXPECT_FALSE(out.grad.defined());  // and no exception: step() was not called

    ControllerInstance probe(fixture_type("probe"), "{}", "p");
    probe.begin(discrete_shape(), nullptr);
    EXPECT_THROW(probe.step(step_inputs(discrete_shape(), 0, RUDDER_PHASE_GUIDE)), std::logic_error);
}

TEST(ControllerInstance, InputsOfTheWrongShapeOrTypeAreRefusedBeforeTheCall) {
    ControllerInstance probe(fixture_type("probe"), "{}", "p");
    probe.begin(discrete_shape(), nullptr);
    StepInputs wrong_shape = step_inputs(discrete_shape(), 0);
    wrong_shape.x0_logits = at::zeros({2, 3, 9});
    EXPECT_THROW(probe.step(wrong_shape), std::invalid_argument);
    StepInputs wrong_type = step_inputs(discrete_shape(), 0);
    wrong_type.tokens = wrong_type.tokens.to(at::kInt);
    EXPECT_THROW(probe.step(wrong_type), std::invalid_argument);
    StepInputs bool_mask = step_inputs(discrete_shape(), 0);  // a bool mask is passed on as uint8
    bool_mask.masked = at::ones({2, 3}, at::kBool);
    EXPECT_NO_THROW(probe.step(bool_mask));
    EXPECT_THAT(detail_of(probe), HasSubstr("masked=[2,3]u8@1:0=mixed"));
}

TEST(ControllerInstance, RunServicesFollowTheBufferProtocol) {
    FakeServices services;
    const RunShape shape = discrete_shape();
    services.batch_size = shape.batch_size;
    services.seq_len = shape.seq_len;
    ControllerInstance probe(fixture_type("probe"), "{\"services\":true}", "p");
    probe.begin(shape, &services);
    const StepInputs in = step_inputs(shape, 0);
    const StepOutputs out = probe.step(in);

    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("denoise_in_begin=2 null;"));         // denoise only inside a PREDICT step
    EXPECT_THAT(detail, HasSubstr("tokenize(cap=1)=3 n=3 ids=1,-7;"));  // what fits, and the full count
    EXPECT_THAT(detail, HasSubstr("tokenize=0 n=3 ids=1,2,3;"));
    EXPECT_THAT(detail, HasSubstr("tokenize(NULL)=1;"));
    EXPECT_THAT(detail, HasSubstr("detokenize(cap=4)=3 n=11 text=<the>;"));  // cut, NUL-terminated
    EXPECT_THAT(detail, HasSubstr("detokenize(cap=0)=3 n=11;"));
    EXPECT_THAT(detail, HasSubstr("detokenize=0 n=11 text=<the cat sat>;"));
    EXPECT_THAT(detail, HasSubstr("token_text(2)=<cat> token_text(999)=<NULL>;"));
    EXPECT_THAT(detail, HasSubstr("denoise=0 logits=[2,2,3,8]f32@1:0=mixed;"));

    ASSERT_EQ(services.denoise_calls.size(), 1u);
    EXPECT_EQ(services.denoise_calls[0], (std::vector<std::string>{"", "c"}));
    ASSERT_EQ(services.denoise_steps.size(), 1u);  // the step in progress, handed to the service with the call
    EXPECT_TRUE(services.denoise_steps[0].tokens.is_same(in.tokens));
    ASSERT_TRUE(out.logit_delta.defined());
    EXPECT_TRUE(at::allclose(out.logit_delta, at::full({2, 3, 8}, 1.5)));  // logits("c") - logits("")
}

TEST(ControllerInstance, ServiceExceptionsBecomeStatusesNotCrashes) {
    FakeServices services;
    services.fail = true;
    services.batch_size = 2;
    services.seq_len = 3;
    ControllerInstance probe(fixture_type("probe"), "{\"services\":true}", "p");
    probe.begin(discrete_shape(), &services);
    const StepOutputs out = probe.step(step_inputs(discrete_shape(), 0));
    EXPECT_FALSE(out.logit_delta.defined());
    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("tokenize(cap=1)=4 n=0"));
    EXPECT_THAT(detail, HasSubstr("tokenize=4 n=0"));
    EXPECT_THAT(detail, HasSubstr("detokenize(cap=4)=4 n=0"));
    EXPECT_THAT(detail, HasSubstr("token_text(2)=<NULL>"));
    EXPECT_THAT(detail, HasSubstr("denoise=4 logits=-;"));

    services.fail = false;
    services.no_conditioning = true;
    probe.step(step_inputs(discrete_shape(), 1));
    EXPECT_THAT(detail_of(probe), HasSubstr("denoise=2 logits=-;"));  // a logic_error means UNSUPPORTED
}

TEST(ControllerInstance, WithoutServicesTheyAreUnsupported) {
    ControllerInstance probe(fixture_type("probe"), "{\"services\":true}", "p");
    probe.begin(discrete_shape(), nullptr);
    probe.step(step_inputs(discrete_shape(), 0));
    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("tokenize=2 n=0"));
    EXPECT_THAT(detail, HasSubstr("token_text(2)=<NULL>"));
    EXPECT_THAT(detail, HasSubstr("denoise=2 logits=-;"));
}

TEST(ControllerInstance, RunInfoDeviceIsTheCpu) {
    ControllerInstance probe(fixture_type("probe"), "{}", "p");
    probe.begin(discrete_shape(), nullptr);
    EXPECT_THAT(detail_of(probe), HasSubstr(" device=" + std::to_string(kDLCPU) + ":0;"));
}

// Steps one instance of each type on its own thread at once; returns each thread's error ("" if none). "good" fails
// a step that overlaps another step of its library; each step lingers 2 ms.
std::vector<std::string> step_concurrently(const std::vector<ControllerType>& types) {
    std::vector<std::unique_ptr<ControllerInstance>> instances;
    for (size_t k = 0; k < types.size(); ++k) {
        instances.push_back(
            std::make_unique<ControllerInstance>(types[k], "{\"sleep_ms\":2}", "g" + std::to_string(k)));
        instances.back()->begin(discrete_shape(), nullptr);
    }
    std::vector<std::string> errors(instances.size());
    std::vector<std::thread> threads;
    for (size_t k = 0; k < instances.size(); ++k)
        threads.emplace_back([&, k] {
            try {
                for (int32_t step = 0; step < 15; ++step) instances[k]->step(step_inputs(discrete_shape(), step));
            } catch (const std::exception& e) {
                errors[k] = e.what();
            }
        });
    for (auto& thread : threads) thread.join();
    return errors;
}

TEST(ControllerInstance, CallsIntoANonThreadSafeLibraryAreSerialised) {
    const ControllerType type = fixture_type("good");
    for (const auto& error : step_concurrently({type, type})) EXPECT_EQ(error, "");
}

TEST(ControllerInstance, CallsAreSerialisedAcrossSeparateLoadsOfALibrary) {
    // Every generator of the C API has its own registry, so one library is loaded once per generator.
    const ControllerType first = fixture_type("good"), second = fixture_type("good");
    for (const auto& error : step_concurrently({first, second})) EXPECT_EQ(error, "");
}

bool is_loaded(const std::filesystem::path& file) {
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle != nullptr) dlclose(handle);  // RTLD_NOLOAD still took a reference
    return handle != nullptr;
}

TEST(ControllerInstance, TheLibraryStaysLoadedWhileAnInstanceLives) {
    ASSERT_FALSE(is_loaded(fixture("hard")));
    auto instance = [] {
        Registry registry({fixture_dir()});
        return std::make_unique<ControllerInstance>(registry.resolve("hard", ""), "{}", "h");
    }();  // the registry and every ControllerType it made are gone now
    instance->begin(discrete_shape(), nullptr);
    EXPECT_TRUE(is_loaded(fixture("hard")));
    EXPECT_TRUE(instance->step(step_inputs(discrete_shape(), 0)).fixed_tokens.defined());
    instance.reset();
    EXPECT_FALSE(is_loaded(fixture("hard")));  // and nothing leaked a reference
}

TEST(ControllerInstance, AnEmptyTypeIsRefused) {
    EXPECT_THAT(plugin_error_of([] { ControllerInstance none(ControllerType{}, "{}", "x"); }),
                HasSubstr("controller 'x': its controller type is empty"));
}

}  // namespace
}  // namespace rudder::plugins::testing
