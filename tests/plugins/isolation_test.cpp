// Process isolation: a controller in a child process of its own (rudder-controller-host) sees and writes what it would
// in-process, gets the same checks and messages, and a crash, abort, exit, stack overflow, memory error, hang or
// stray thread in it becomes a PluginError naming it while this process carries on.
#include "test_support.hpp"

#include <gmock/gmock.h>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace rudder::plugins::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Under a sanitizer the child is instrumented too and catches its own segmentation fault or stack overflow: under
// AddressSanitizer (make test-sanitize) it reports it and aborts (abort_on_error: signal 6), under ThreadSanitizer
// (make test-tsan) it reports it and exits with status 66.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerCatchesFaults = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerCatchesFaults = true;
#else
constexpr bool kSanitizerCatchesFaults = false;
#endif
#else
constexpr bool kSanitizerCatchesFaults = false;
#endif

// Runs `body` on an instance of fixture `name` in each mode and returns what it returned in each.
template <class Body>
std::pair<std::string, std::string> both(const std::string& name, const std::string& params, Body&& body) {
    ControllerInstance in_process(fixture_type(name), params, "x", Isolation::in_process);
    ControllerInstance isolated(fixture_type(name), params, "x", Isolation::process);
    EXPECT_EQ(isolated.isolation(), Isolation::process);
    return {body(in_process), body(isolated)};
}

TEST(Isolation, OutputsAndVerdictsMatchInProcess) {
    const RunShape shape = discrete_shape();
    for (const std::string name : {"good", "hard", "pair"}) {
        ControllerInstance a(fixture_type(name), "{}", "x", Isolation::in_process);
        ControllerInstance b(fixture_type(name), "{}", "x", Isolation::process);
        a.begin(shape, nullptr);
        b.begin(shape, nullptr);
        for (int32_t step = 0; step < 3; ++step) {
            const StepOutputs x = a.step(step_inputs(shape, step)), y = b.step(step_inputs(shape, step));
            const at::Tensor xs[] = {x.logit_delta, x.grad, x.log_prob, x.fixed_tokens, x.forbidden};
            const at::Tensor ys[] = {y.logit_delta, y.grad, y.log_prob, y.fixed_tokens, y.forbidden};
            for (int k = 0; k < 5; ++k) {
                ASSERT_EQ(xs[k].defined(), ys[k].defined()) << name << " output " << k;
                if (xs[k].defined()) {
                    EXPECT_TRUE(at::equal(xs[k], ys[k])) << name << " output " << k;
                }
            }
        }
        const Verdict va = a.evaluate(4, {1, 2, 3, 0}, 3, "the cat sat"),
                      vb = b.evaluate(4, {1, 2, 3, 0}, 3, "the cat sat");
        EXPECT_EQ(va.satisfied, vb.satisfied) << name;
        EXPECT_EQ(va.has_score, vb.has_score) << name;
        EXPECT_EQ(va.detail, vb.detail) << name;
    }
}

TEST(Isolation, ThePluginSeesTheSameRunStepsAndServices) {
    const RunShape shape = discrete_shape();
    const auto [expected, isolated] = both("probe", "{\"services\":true}", [&](ControllerInstance& probe) {
        FakeServices services;
        services.batch_size = shape.batch_size;
        services.seq_len = shape.seq_len;
        probe.begin(shape, &services);
        const StepOutputs out = probe.step(step_inputs(shape, 0));
        EXPECT_TRUE(at::allclose(out.logit_delta, at::full({2, 3, 8}, 1.5)));  // through the forwarded denoiser
        EXPECT_EQ(services.denoise_calls.size(), 1u);
        // Step 0 wrote logit_delta: step 1 is handed it zeroed again (in the child, only the outputs written last
        // step are zeroed).
        probe.step(step_inputs(shape, 1));
        return detail_of(probe);
    });
    EXPECT_THAT(isolated, HasSubstr("step=1/"));
    EXPECT_THAT(isolated, HasSubstr("tokenize=0 n=3 ids=1,2,3;"));
    EXPECT_THAT(isolated, HasSubstr("denoise=0 logits=[2,2,3,8]f32@1:0=mixed;"));
    EXPECT_EQ(isolated, expected);

    // Services that fail give the plugin the same statuses in both modes.
    const auto [expected_f, isolated_f] = both("probe", "{\"services\":true}", [&](ControllerInstance& probe) {
        FakeServices services;
        services.fail = true;
        services.batch_size = shape.batch_size;
        services.seq_len = shape.seq_len;
        probe.begin(shape, &services);
        probe.step(step_inputs(shape, 0));
        return detail_of(probe);
    });
    EXPECT_THAT(isolated_f, HasSubstr("denoise=4 logits=-;"));
    EXPECT_EQ(isolated_f, expected_f);

    const RunShape continuous = continuous_shape();
    const auto [expected_c, isolated_c] = both("probe", "{}", [&](ControllerInstance& probe) {
        probe.begin(continuous, nullptr);
        probe.step(step_inputs(continuous, 0));
        StepInputs guide = step_inputs(continuous, 0, RUDDER_PHASE_GUIDE);
        guide.guide_iter = 1;
        const StepOutputs guided = probe.step(guide);
        EXPECT_TRUE(at::equal(guided.grad, at::full({2, 3, 4}, 0.5)));
        guide.guide_iter = 2;  // handed grad zeroed again after the last iteration wrote it
        probe.step(guide);
        return detail_of(probe);
    });
    EXPECT_THAT(isolated_c, HasSubstr("step phase=2 step=0/10 guide=1"));
    EXPECT_EQ(isolated_c, expected_c);
}

TEST(Isolation, PluginErrorsAndContractBreachesReadAsInProcess) {
    const RunShape shape = discrete_shape();
    const auto step_error = [&](ControllerInstance& c) {
        c.begin(shape, nullptr);
        return plugin_error_of([&] { c.step(step_inputs(shape, 3)); });
    };
    for (const auto& [name, params] :
         std::vector<std::pair<std::string, std::string>>{{"nan", "{}"},
                                                          {"error_status", "{}"},
                                                          {"throws", "{\"throw_in\":\"step\"}"},
                                                          {"bad_header", "{\"change\":\"ndim\"}"},
                                                          {"bad_header", "{\"change\":\"data\"}"},
                                                          {"bad_header", "{\"change\":\"shape_value\"}"},
                                                          {"bad_header", "{\"change\":\"replace\"}"},
                                                          {"bad_header", "{\"change\":\"written_bits\"}"}}) {
        const auto [expected, isolated] = both(name, params, step_error);
        EXPECT_THAT(isolated, StartsWith("controller 'x' (")) << name;
        EXPECT_EQ(isolated, expected) << name << " " << params;
    }
    // Invalid params are refused at creation, with the plugin's message.
    std::string in_process, isolated;
    try {
        ControllerInstance c(fixture_type("faulty"), "{\"fault\": 3}", "x", Isolation::in_process);
    } catch (const PluginError& e) {
        in_process = e.what();
    }
    try {
        ControllerInstance c(fixture_type("faulty"), "{\"fault\": 3}", "x", Isolation::process);
    } catch (const PluginError& e) {
        isolated = e.what();
    }
    EXPECT_EQ(isolated, "controller 'x' (faulty, rudder_faulty.so): invalid params: fault must be a string");
    EXPECT_EQ(isolated, in_process);
}

// A fresh instance of the same library works after a fault: the host is healthy.
void expect_host_healthy() {
    ControllerInstance fresh(fixture_type("faulty"), "{\"fault\":\"none\"}", "after", Isolation::process);
    fresh.begin(discrete_shape(), nullptr);
    EXPECT_TRUE(at::equal(fresh.step(step_inputs(discrete_shape(), 0)).logit_delta, at::ones({2, 3, 8})));
    EXPECT_EQ(fresh.evaluate(0, {1}, 1, "the").satisfied, 1);
}

struct Fault {
    const char* fault;
    const char* says;
};

class IsolatedFault : public ::testing::TestWithParam<Fault> {};

TEST_P(IsolatedFault, BecomesAnErrorNamingTheControllerAndTheHostCarriesOn) {
    const Fault& f = GetParam();
    ControllerInstance faulty(fixture_type("faulty"), std::string("{\"fault\":\"") + f.fault + "\",\"at_step\":2}",
                              "crashy", Isolation::process);
    faulty.begin(discrete_shape(), nullptr);
    // Before the fault it contributes like any controller.
    EXPECT_TRUE(at::equal(faulty.step(step_inputs(discrete_shape(), 1)).logit_delta, at::ones({2, 3, 8})));
    EXPECT_TRUE(faulty.usable());
    const std::string error = plugin_error_of([&] { faulty.step(step_inputs(discrete_shape(), 2)); });
    EXPECT_THAT(error, StartsWith("controller 'crashy' (faulty, rudder_faulty.so): step did not complete at step 2: "
                                  "its process (pid "));
    const bool segv = std::string(f.says).find("signal 11") != std::string::npos;
    if (kSanitizerCatchesFaults && segv)
        EXPECT_THAT(error, ::testing::AnyOf(HasSubstr("killed by signal "), HasSubstr("ended with exit status 66")));
    else
        EXPECT_THAT(error, HasSubstr(f.says));
    EXPECT_THAT(error, HasSubstr("the host is unaffected, this controller cannot be used again"));
    EXPECT_FALSE(faulty.usable());
    // Every later call says the process is gone, and why.
    EXPECT_THAT(plugin_error_of([&] { faulty.step(step_inputs(discrete_shape(), 3)); }),
                HasSubstr("cannot step at step 3: the controller's process is gone (step did not complete"));
    EXPECT_THAT(plugin_error_of([&] { faulty.evaluate(0, {1}, 1, "the"); }),
                HasSubstr("cannot evaluate on sample 0: the controller's process is gone"));
    expect_host_healthy();
    // The next run starts a new process and creates the instance there again.
    faulty.begin(discrete_shape(), nullptr);
    EXPECT_TRUE(faulty.usable());
    EXPECT_TRUE(at::equal(faulty.step(step_inputs(discrete_shape(), 1)).logit_delta, at::ones({2, 3, 8})));
    EXPECT_EQ(faulty.evaluate(0, {1}, 1, "the").satisfied, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, IsolatedFault,
    ::testing::Values(Fault{"segv", "killed by signal 11 (Segmentation fault): a memory error or a stack overflow"},
                      Fault{"stack", "killed by signal 11 (Segmentation fault): a memory error or a stack overflow"},
                      Fault{"abort", "killed by signal 6 (Aborted): the plugin called abort()"},
                      Fault{"heap", "killed by signal 6 (Aborted)"},
                      Fault{"exit", "ended with exit status 0: the plugin ended the process (exit() or similar)"}),
    [](const ::testing::TestParamInfo<Fault>& info) { return std::string(info.param.fault); });

TEST(Isolation, AHangIsStoppedAtTheTimeLimit) {
    ControllerInstance hangs(fixture_type("faulty"), "{\"fault\":\"hang\"}", "sleepy", Isolation::process);
    hangs.set_time_limit(0.3);
    hangs.begin(discrete_shape(), nullptr);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = plugin_error_of([&] { hangs.step(step_inputs(discrete_shape(), 0)); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_THAT(error, StartsWith("controller 'sleepy' (faulty, rudder_faulty.so): step did not return within its time "
                                  "limit of 0.3 s at step 0, so its process (pid "));
    EXPECT_THAT(error, HasSubstr(") was killed (the recipe's time_limit for this controller)"));
    EXPECT_GE(seconds, 0.3);
    EXPECT_LT(seconds, 10.0);
    EXPECT_FALSE(hangs.usable());
    expect_host_healthy();
}

TEST(Isolation, ACancelStopsAWaitingCallWhateverItsTimeLimit) {
    ControllerInstance hangs(fixture_type("faulty"), "{\"fault\":\"hang\",\"at_step\":1}", "sleepy",
                             Isolation::process);
    std::atomic<bool> cancel{false};
    hangs.set_cancel_flag(&cancel);
    hangs.set_time_limit(0);  // no limit: only the cancel ends the call
    hangs.begin(discrete_shape(), nullptr);
    std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        cancel = true;
    });
    std::string error;
    try {
        hangs.step(step_inputs(discrete_shape(), 1));
    } catch (const CallCancelled& e) {
        error = e.what();
    } catch (const std::exception& e) {
        error = std::string("not CallCancelled: ") + e.what();
    }
    canceller.join();
    EXPECT_THAT(error, StartsWith("controller 'sleepy' (faulty, rudder_faulty.so): step at step 1 was cancelled; its "
                                  "process (pid "));
    EXPECT_FALSE(hangs.usable());
    // The next run starts a new process.
    cancel = false;
    hangs.begin(discrete_shape(), nullptr);
    EXPECT_TRUE(hangs.usable());
    EXPECT_TRUE(at::equal(hangs.step(step_inputs(discrete_shape(), 0)).logit_delta, at::ones({2, 3, 8})));
}

TEST(Isolation, TheChildsMemoryIsLimited) {
    if (!child_memory_limits_apply())
        GTEST_SKIP() << "a sanitizer build's child sets no memory limit (its shadow memory counts toward RLIMIT_DATA)";
    // 4 GB, never touched: where nothing limits it the allocation succeeds without costing memory.
    const std::string params = "{\"fault\":\"alloc\",\"mb\":4096}";
    ControllerInstance unlimited(fixture_type("faulty"), params, "big", Isolation::process);
    unlimited.begin(discrete_shape(), nullptr);
    EXPECT_NO_THROW(unlimited.step(step_inputs(discrete_shape(), 0)));
    ControllerInstance limited(fixture_type("faulty"), params, "big", Isolation::process, uint64_t{512} << 20);
    limited.begin(discrete_shape(), nullptr);
    EXPECT_EQ(plugin_error_of([&] { limited.step(step_inputs(discrete_shape(), 0)); }),
              "controller 'big' (faulty, rudder_faulty.so): step failed at step 0 (RUDDER_ERR_OUT_OF_MEMORY): could "
              "not allocate 4096 MB");
}

TEST(Isolation, AThreadThatOutlivesTheCallTakesOnlyTheChild) {
    ControllerInstance stray(fixture_type("faulty"), "{\"fault\":\"thread\"}", "stray", Isolation::process);
    stray.begin(discrete_shape(), nullptr);
    EXPECT_NO_THROW(stray.step(step_inputs(discrete_shape(), 0)));  // returns; its thread aborts 200 ms later
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    EXPECT_THAT(plugin_error_of([&] { stray.step(step_inputs(discrete_shape(), 1)); }),
                HasSubstr("killed by signal 6 (Aborted)"));
    expect_host_healthy();
}

TEST(Isolation, ACallWithinItsTimeLimitIsUnaffected) {
    ControllerInstance slow(fixture_type("slow"), "{\"ms\": 50}", "s", Isolation::process);
    slow.set_time_limit(5);
    slow.begin(discrete_shape(), nullptr);
    EXPECT_NO_THROW(slow.step(step_inputs(discrete_shape(), 0)));
    EXPECT_EQ(slow.evaluate(0, {1}, 1, "the").satisfied, 1);
    EXPECT_TRUE(slow.usable());
}

TEST(Isolation, InstancesSharingTheStepInputsEachSeeEveryStepsInputs) {
    // Two isolated instances read one shared copy of each step's inputs (as the composer arranges), one instance its
    // own: what each sees is what an in-process instance sees, step after step and across a new run shape.
    auto share = std::make_shared<StepInputShare>();
    ControllerInstance a(fixture_type("probe"), "{}", "a", Isolation::process);
    ControllerInstance b(fixture_type("probe"), "{}", "b", Isolation::process);
    ControllerInstance alone(fixture_type("probe"), "{}", "c", Isolation::process);
    ControllerInstance reference(fixture_type("probe"), "{}", "r", Isolation::in_process);
    a.share_step_inputs(share);
    b.share_step_inputs(share);
    for (const RunShape& shape : {discrete_shape(), continuous_shape()}) {
        for (ControllerInstance* c : {&a, &b, &alone, &reference}) c->begin(shape, nullptr);
        for (int32_t step = 0; step < 3; ++step) {
            share->next_step();
            const StepInputs in = step_inputs(shape, step);
            const StepOutputs expected = reference.step(in);
            for (ControllerInstance* c : {&a, &b, &alone}) {
                const StepOutputs got = c->step(in);
                ASSERT_EQ(got.logit_delta.defined(), expected.logit_delta.defined());
                if (expected.logit_delta.defined()) {
                    EXPECT_TRUE(at::equal(got.logit_delta, expected.logit_delta));
                }
            }
        }
        const std::string expected = detail_of(reference);
        EXPECT_EQ(detail_of(a), expected);
        EXPECT_EQ(detail_of(b), expected);
        EXPECT_EQ(detail_of(alone), expected);
    }
}

TEST(Isolation, ANewRunShapeGetsNewSharedMemory) {
    ControllerInstance good(fixture_type("good"), "{}", "g", Isolation::process);
    RunShape small = discrete_shape();
    good.begin(small, nullptr);
    good.step(step_inputs(small, 0));
    RunShape big = small;
    big.batch_size = 5;
    big.seq_len = 7;
    big.vocab_size = 11;
    big.mask_id = 10;
    good.begin(big, nullptr);
    ControllerInstance reference(fixture_type("good"), "{}", "g");
    reference.begin(big, nullptr);
    EXPECT_TRUE(at::equal(good.step(step_inputs(big, 0)).logit_delta, reference.step(step_inputs(big, 0)).logit_delta));
}

// Steps with a varying number of rows: the child's row-shaped views grow, shrink and empty, and an output written
// over more rows the step before is handed out zeroed again.
const std::vector<std::vector<int64_t>> kRowsPerStep = {{0, 1, 2, 3, 4, 5}, {1, 2, 4}, {}, {3}, {0, 5}};

TEST(Isolation, TheNewFormsReachTheChildAndComeBack) {
    RunShape shape = discrete_shape();
    shape.candidates = 3;
    const std::pair<std::string, std::string> cases[] = {{"forms#rows_mask", "{}"},
                                                         {"forms#rows_mask", R"({"write": "allow"})"},
                                                         {"forms#candidate_bonus", "{}"},
                                                         {"helper_forms", R"({"mask": "forbid"})"},
                                                         {"helper_forms", R"({"mask": "allow"})"},
                                                         {"abi11", "{}"}};
    for (const auto& [name, params] : cases) {
        const auto hash = name.find('#');
        const ControllerType type =
            hash == std::string::npos ? fixture_type(name) : fixture_type(name.substr(0, hash), name.substr(hash + 1));
        ControllerInstance a(type, params, "x", Isolation::in_process);
        ControllerInstance b(type, params, "x", Isolation::process);
        a.begin(shape, nullptr);
        b.begin(shape, nullptr);
        StepInputs in = step_inputs(shape, 0);
        in.x0_logits = distinct_x0(shape);
        int32_t step = 0;
        for (const auto& rows : kRowsPerStep) {
            in.step = step++;
            const StepInputs with = with_rows(in, shape, rows, shape.candidates);
            const StepOutputs x = a.step(with), y = b.step(with);
            EXPECT_EQ(x.bits_allowed, y.bits_allowed) << name;
            const at::Tensor xs[] = {x.logit_delta, x.grad,       x.log_prob,       x.fixed_tokens,
                                     x.forbidden,   x.token_bits, x.candidate_delta};
            const at::Tensor ys[] = {y.logit_delta, y.grad,       y.log_prob,       y.fixed_tokens,
                                     y.forbidden,   y.token_bits, y.candidate_delta};
            for (int k = 0; k < 7; ++k) {
                ASSERT_EQ(xs[k].defined(), ys[k].defined()) << name << " output " << k << " N=" << rows.size();
                if (xs[k].defined()) {
                    EXPECT_TRUE(at::equal(xs[k], ys[k])) << name << " output " << k << " N=" << rows.size();
                }
            }
        }
    }
}

TEST(Isolation, ThePluginSeesTheNewFormsAsInProcess) {
    RunShape shape = discrete_shape();
    shape.candidates = 2;
    auto share = std::make_shared<StepInputShare>();
    const ControllerType ignores_x0 = fixture_type("probe_forms", "forms_probe_ignores_x0");
    ControllerInstance blind(ignores_x0, "{}", "b", Isolation::process);  // reads no x0 at all
    ControllerInstance forms(fixture_type("probe_forms"), "{}", "f", Isolation::process);
    ControllerInstance plain(fixture_type("probe"), "{}", "p",
                             Isolation::process);  // shares the inputs, reads x0 dense
    ControllerInstance blind_reference(ignores_x0, "{}", "b");
    ControllerInstance forms_reference(fixture_type("probe_forms"), "{}", "f");
    ControllerInstance plain_reference(fixture_type("probe"), "{}", "p");
    blind.share_step_inputs(share);
    forms.share_step_inputs(share);
    plain.share_step_inputs(share);
    const std::vector<ControllerInstance*> all = {&blind,           &forms,           &plain,
                                                  &blind_reference, &forms_reference, &plain_reference};
    for (ControllerInstance* c : all) c->begin(shape, nullptr);
    int32_t step = 0;
    for (const auto& rows : kRowsPerStep) {
        share->next_step();
        const StepInputs in = with_rows(step_inputs(shape, step++), shape, rows, 2);
        for (ControllerInstance* c : all) c->step(in);
    }
    EXPECT_THAT(detail_of(forms), HasSubstr("token_bits=[3,1]u32@1:0=0 candidate_delta=[3,2]f32@1:0=0;"));
    EXPECT_THAT(detail_of(blind), HasSubstr("x0_logits=- "));
    EXPECT_EQ(detail_of(blind), detail_of(blind_reference));
    EXPECT_EQ(detail_of(forms), detail_of(forms_reference));
    EXPECT_EQ(detail_of(plain), detail_of(plain_reference));
}

TEST(Isolation, TheNewFormsChecksReadAsInProcess) {
    RunShape shape = discrete_shape();
    shape.candidates = 2;
    for (const auto& [id, params] :
         std::vector<std::pair<std::string, std::string>>{{"rows_mask", R"({"write": "both"})"},
                                                          {"rows_mask", R"({"write": "past_vocab"})"},
                                                          {"candidate_bonus", R"({"nan":true})"}}) {
        const auto step_error = [&](ControllerInstance& c) {
            c.begin(shape, nullptr);
            return plugin_error_of([&] { c.step(with_rows(step_inputs(shape, 3), shape, {1, 2, 4}, 2)); });
        };
        ControllerInstance in_process(fixture_type("forms", id), params, "x", Isolation::in_process);
        ControllerInstance isolated(fixture_type("forms", id), params, "x", Isolation::process);
        const std::string expected = step_error(in_process);
        EXPECT_THAT(expected, StartsWith("controller 'x' (" + id + ", rudder_forms.so): ")) << params;
        EXPECT_EQ(step_error(isolated), expected) << params;
    }
}

TEST(Isolation, AMissingHelperIsAClearError) {
    const std::string saved =
        std::getenv("RUDDER_CONTROLLER_HOST") != nullptr ? std::getenv("RUDDER_CONTROLLER_HOST") : "";
    ::setenv("RUDDER_CONTROLLER_HOST", "/nonexistent/rudder-controller-host", 1);
    const std::string error =
        plugin_error_of([] { ControllerInstance c(fixture_type("good"), "{}", "g", Isolation::process); });
    ::setenv("RUDDER_CONTROLLER_HOST", saved.c_str(), 1);
    EXPECT_EQ(error,
              "controller 'g' (good, rudder_good.so): cannot run in a process of its own: the helper "
              "/nonexistent/rudder-controller-host is missing (set RUDDER_CONTROLLER_HOST, or install Rudder "
              "whole)");
}

TEST(Isolation, Names) {
    EXPECT_STREQ(isolation_name(Isolation::in_process), "in_process");
    EXPECT_STREQ(isolation_name(Isolation::process), "process");
}

}  // namespace
}  // namespace rudder::plugins::testing
