// Plugin ABI 1.2: the forms a controller may declare (rows, packed token masks, candidates) reach it in their shapes
// and come back checked; a 1.1 controller, and any controller under RUDDER_CONTROL_FORMS=dense, gets the 1.1 structs
// and the dense buffers; a 1.2 controller that needs the new members refuses a 1.1 host; one helper source and the
// first-party length and span give the same constraints in both forms.
#include "test_support.hpp"

#include <gmock/gmock.h>

#include <dlfcn.h>

#include <string>
#include <vector>

namespace rudder::plugins::testing {
namespace {

using ::testing::HasSubstr;

RunShape shape_with_candidates(int32_t k) {
    RunShape shape = discrete_shape();
    shape.candidates = k;
    return shape;
}

TEST(Forms, EveryNewBufferHasItsShapeAndStartValue) {
    const RunShape shape = shape_with_candidates(3);
    ControllerInstance probe(fixture_type("probe_forms"), "{}", "p");
    EXPECT_TRUE(probe.has(RUDDER_CAP_ROWS));
    probe.begin(shape, nullptr);
    probe.step(with_rows(step_inputs(shape, 0), shape, {1, 2, 4}, 3));
    probe.step(step_inputs(shape, 1));  // no rows given: every position is a row, candidates from x0_logits
    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("candidates=3 forms=896;"));  // ROWS | PACKED_MASK | CANDIDATES
    EXPECT_THAT(detail, HasSubstr("step=0/10 guide=0 t=1 in: latent=- x0_logits=[3,8]f32@1:0=mixed "
                                  "tokens=[2,3]i64@1:0=mixed masked=[2,3]u8@1:0=mixed out: logit_delta=[3,8]f32@1:0=0 "
                                  "grad=[3,8]f32@1:0=0 log_prob=[2]f32@1:0=0 fixed_tokens=[2,3]i64@1:0=-1 forbidden=-; "
                                  "forms: rows=[3]i64@1:0=mixed candidate_ids=[3,3]i64@1:0=mixed "
                                  "candidate_logp=[3,3]f32@1:0=mixed token_bits=[3,1]u32@1:0=0 "
                                  "candidate_delta=[3,3]f32@1:0=0;"));
    EXPECT_THAT(detail, HasSubstr("step=1/10 guide=0 t=0.9 in: latent=- x0_logits=[6,8]f32@1:0=mixed"));
    EXPECT_THAT(detail, HasSubstr("forms: rows=[6]i64@1:0=mixed candidate_ids=[6,3]i64@1:0=mixed "
                                  "candidate_logp=[6,3]f32@1:0=mixed token_bits=[6,1]u32@1:0=0 "
                                  "candidate_delta=[6,3]f32@1:0=0;"));

    // A step that samples no position: every row-shaped buffer is empty, the [B, L] and [B] ones are not.
    probe.step(with_rows(step_inputs(shape, 2), shape, {}, 3));
    EXPECT_THAT(detail_of(probe), HasSubstr("step=2/10 guide=0 t=0.8 in: latent=- x0_logits=[0,8]f32@1:0=0"));
    EXPECT_THAT(detail_of(probe), HasSubstr("fixed_tokens=[2,3]i64@1:0=-1 forbidden=-; forms: rows=[0]i64@1:0=0 "
                                            "candidate_ids=[0,3]i64@1:0=0 candidate_logp=[0,3]f32@1:0=0 "
                                            "token_bits=[0,1]u32@1:0=0 candidate_delta=[0,3]f32@1:0=0;"));
}

TEST(Forms, AControllerThatIgnoresX0GetsNoneAndTheOtherFormsAsBefore) {
    const RunShape shape = shape_with_candidates(3);
    ControllerInstance probe(fixture_type("probe_forms", "forms_probe_ignores_x0"), "{}", "p");
    EXPECT_TRUE(probe.has(RUDDER_CAP_IGNORES_X0));
    probe.begin(shape, nullptr);
    probe.step(with_rows(step_inputs(shape, 0), shape, {1, 2, 4}, 3));
    probe.step(step_inputs(shape, 1));  // no rows or candidates given: the adapter takes them from x0_logits
    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("candidates=3 forms=1920;"));  // and IGNORES_X0
    EXPECT_THAT(detail, HasSubstr("step=0/10 guide=0 t=1 in: latent=- x0_logits=- tokens=[2,3]i64@1:0=mixed "
                                  "masked=[2,3]u8@1:0=mixed out: logit_delta=[3,8]f32@1:0=0 grad=[3,8]f32@1:0=0 "
                                  "log_prob=[2]f32@1:0=0 fixed_tokens=[2,3]i64@1:0=-1 forbidden=-; "
                                  "forms: rows=[3]i64@1:0=mixed candidate_ids=[3,3]i64@1:0=mixed "
                                  "candidate_logp=[3,3]f32@1:0=mixed token_bits=[3,1]u32@1:0=0 "
                                  "candidate_delta=[3,3]f32@1:0=0;"));
    EXPECT_THAT(detail, HasSubstr("step=1/10 guide=0 t=0.9 in: latent=- x0_logits=- "));
    EXPECT_THAT(detail, HasSubstr("forms: rows=[6]i64@1:0=mixed candidate_ids=[6,3]i64@1:0=mixed "));

    // A 1.1 host (here: dense forms) knows no IGNORES_X0: x0_logits as ever.
    const ScopedEnv dense("RUDDER_CONTROL_FORMS", "dense");
    ControllerInstance on_dense(fixture_type("probe_forms", "forms_probe_ignores_x0"), "{}", "p");
    EXPECT_FALSE(on_dense.has(RUDDER_CAP_IGNORES_X0));
    on_dense.begin(shape, nullptr);
    on_dense.step(with_rows(step_inputs(shape, 0), shape, {1, 2, 4}, 3));
    EXPECT_THAT(detail_of(on_dense), HasSubstr("in: latent=- x0_logits=[2,3,8]f32@1:0=mixed"));
}

TEST(Forms, TokenBitsHaveAWordPer32Tokens) {
    RunShape shape = discrete_shape();
    shape.vocab_size = 40;
    shape.mask_id = 39;
    ControllerInstance mask(fixture_type("forms", "rows_mask"), "{}", "m");
    mask.begin(shape, nullptr);
    const StepOutputs out = mask.step(with_rows(step_inputs(shape, 0), shape, {1, 2}, 0));
    ASSERT_TRUE(out.token_bits.defined());
    EXPECT_EQ(out.token_bits.sizes(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(out.token_bits.scalar_type(), at::kInt);
}

TEST(Forms, WithoutCandidatesOrOutsidePredictTheNewMembersAreNull) {
    const RunShape none = shape_with_candidates(0);
    ControllerInstance probe(fixture_type("probe_forms"), "{}", "p");
    probe.begin(none, nullptr);
    probe.step(step_inputs(none, 0));
    EXPECT_THAT(detail_of(probe), HasSubstr("candidates=0 forms=896;"));
    EXPECT_THAT(detail_of(probe), HasSubstr("candidate_ids=- candidate_logp=- token_bits=[6,1]u32@1:0=0 "
                                            "candidate_delta=-;"));

    // A 1.2 controller that declares none of the forms gets the rows, and dense buffers.
    const RunShape offered = shape_with_candidates(3);
    ControllerInstance plain(fixture_type("probe"), "{}", "p");
    EXPECT_FALSE(plain.has(RUDDER_CAP_ROWS));
    plain.begin(offered, nullptr);
    plain.step(with_rows(step_inputs(offered, 0), offered, {1, 2, 4}, 3));
    EXPECT_THAT(detail_of(plain), HasSubstr("in: latent=- x0_logits=[2,3,8]f32@1:0=mixed"));
    EXPECT_THAT(detail_of(plain), HasSubstr("forbidden=[2,3,8]u8@1:0=0; forms: rows=[3]i64@1:0=mixed candidate_ids=- "
                                            "candidate_logp=- token_bits=- candidate_delta=-;"));

    const RunShape continuous = continuous_shape();
    ControllerInstance guided(fixture_type("probe_forms"), "{}", "p");
    guided.begin(continuous, nullptr);
    guided.step(step_inputs(continuous, 0, RUDDER_PHASE_GUIDE));
    EXPECT_THAT(detail_of(guided), HasSubstr("log_prob=[2]f32@1:0=0 fixed_tokens=- forbidden=-; forms: rows=- "
                                             "candidate_ids=- candidate_logp=- token_bits=- candidate_delta=-;"));
}

TEST(Forms, TokenBitsArriveAsWrittenWithTheirMeaning) {
    const RunShape shape = discrete_shape();
    ControllerInstance forbid(fixture_type("forms", "rows_mask"), "{}", "m");
    forbid.begin(shape, nullptr);
    const StepOutputs out = forbid.step(with_rows(step_inputs(shape, 0), shape, {1, 2, 4}, 0));
    EXPECT_FALSE(out.forbidden.defined());
    EXPECT_FALSE(out.bits_allowed);
    // Rows 1, 2, 4 are positions 1, 2, 1: token 3 everywhere, token 1 at even positions.
    EXPECT_TRUE(at::equal(out.token_bits, at::tensor({8, 10, 8}, at::kInt).view({3, 1})));

    ControllerInstance allow(fixture_type("forms", "rows_mask"), R"({"write": "allow"})", "m");
    allow.begin(shape, nullptr);
    const StepOutputs allowed = allow.step(with_rows(step_inputs(shape, 0), shape, {0, 5}, 0));
    EXPECT_TRUE(allowed.bits_allowed);
    EXPECT_TRUE(at::equal(allowed.token_bits, at::tensor({6, 6}, at::kInt).view({2, 1})));
}

TEST(Forms, BothMaskBitsAreAnError) {
    const RunShape shape = discrete_shape();
    ControllerInstance both(fixture_type("forms", "rows_mask"), R"({"write": "both"})", "m");
    both.begin(shape, nullptr);
    EXPECT_EQ(plugin_error_of([&] { both.step(step_inputs(shape, 2)); }),
              "controller 'm' (rows_mask, rudder_forms.so): set both RUDDER_WROTE_FORBIDDEN_BITS and "
              "RUDDER_WROTE_ALLOWED_BITS at step 2; token_bits holds either the forbidden or the allowed tokens");
}

TEST(Forms, BitsPastTheVocabularyAreAnErrorNamingTheRowAndTheWord) {
    const RunShape shape = discrete_shape();
    ControllerInstance past(fixture_type("forms", "rows_mask"), R"({"write": "past_vocab"})", "m");
    past.begin(shape, nullptr);
    EXPECT_EQ(plugin_error_of([&] {
                  past.step(with_rows(step_inputs(shape, 2), shape, {1, 2, 4}, 0));
              }),
              "controller 'm' (rows_mask, rudder_forms.so): wrote token_bits past the vocabulary (V = 8) in row 1 "
              "(sequence 0, position 2), word 0 at step 2");
}

TEST(Forms, ACandidateDeltaThatIsNotFiniteIsAnError) {
    const RunShape shape = shape_with_candidates(2);
    ControllerInstance nan(fixture_type("forms", "candidate_bonus"), R"({"nan":true})", "c");
    nan.begin(shape, nullptr);
    EXPECT_EQ(plugin_error_of([&] {
                  nan.step(with_rows(step_inputs(shape, 0), shape, {1, 2}, 2));
              }),
              "controller 'c' (candidate_bonus, rudder_forms.so): wrote NaN or Inf to candidate_delta at step 0");
}

TEST(Forms, CandidateDeltasArriveForTheStepsCandidates) {
    const RunShape shape = shape_with_candidates(2);
    ControllerInstance bonus(fixture_type("forms", "candidate_bonus"), "{}", "c");
    bonus.begin(shape, nullptr);
    StepInputs in = step_inputs(shape, 0);
    in.x0_logits = distinct_x0(shape);
    in = with_rows(in, shape, {1, 2, 4}, 2);
    const StepOutputs out = bonus.step(in);
    ASSERT_TRUE(out.candidate_delta.defined());
    const at::Tensor expected = at::arange(2, at::kFloat).mul(10).view({1, 2}) + in.rows.to(at::kFloat).view({3, 1}) +
                                in.candidate_logp / 100.0f;
    EXPECT_TRUE(at::allclose(out.candidate_delta, expected));

    // Without candidates from the reverse loop the instance takes each row's most likely tokens itself.
    StepInputs bare = step_inputs(shape, 0);
    bare.x0_logits = in.x0_logits;
    bare.rows = in.rows;
    EXPECT_TRUE(at::allclose(bonus.step(bare).candidate_delta, expected));

    // A run that offers no candidates hands out no candidate_delta.
    const RunShape none = shape_with_candidates(0);
    bonus.begin(none, nullptr);
    EXPECT_FALSE(bonus.step(with_rows(step_inputs(none, 0), none, {1}, 0)).candidate_delta.defined());
}

TEST(Forms, AControllerBuiltFor11GetsThe11StructsAndDenseBuffers) {
    const RunShape shape = shape_with_candidates(3);
    ControllerInstance old(fixture_type("abi11"), "{}", "o");
    EXPECT_EQ(old.type().abi_minor(), 1u);
    EXPECT_NE(old.type().capabilities() & RUDDER_CAP_ROWS, 0u);  // bit 7 as the 1.1 build happened to set it
    EXPECT_FALSE(old.has(RUDDER_CAP_ROWS));                      // means nothing from a 1.1 controller
    old.begin(shape, nullptr);  // the fixture refuses a run info that is not of the 1.1 size
    const StepOutputs out = old.step(with_rows(step_inputs(shape, 0), shape, {1, 2, 4}, 3));
    auto forbidden = at::zeros({2, 3, 8}, at::kByte);
    forbidden.select(2, 3).fill_(1);
    EXPECT_TRUE(at::equal(out.forbidden, forbidden));
    EXPECT_EQ(out.logit_delta.sizes(), (std::vector<int64_t>{2, 3, 8}));
    EXPECT_FALSE(out.token_bits.defined());
    EXPECT_FALSE(out.candidate_delta.defined());
}

// The fixture's own entry point and create(), as a host of ABI 1.1 would call them.
TEST(Forms, AControllerThatNeedsRowsRefusesA11HostAndWorksOnThisOne) {
    void* library = dlopen(fixture("forms").c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr) << dlerror();
    const auto entry = reinterpret_cast<rudder_plugin_entry_fn>(dlsym(library, RUDDER_PLUGIN_ENTRY_SYMBOL));
    ASSERT_NE(entry, nullptr);
    const rudder_plugin* plugin = entry(1, 1);
    ASSERT_NE(plugin, nullptr);
    rudder_host old_host = *host_services();
    old_host.abi_minor = 1;
    for (uint32_t k = 0; k < plugin->controller_count; ++k) {
        const rudder_controller_desc* desc = plugin->controllers[k];
        void* self = nullptr;
        EXPECT_EQ(desc->create(&old_host, "{}", &self), RUDDER_ERR_UNSUPPORTED) << desc->id;
        EXPECT_EQ(std::string(desc->last_error(nullptr)), "controller '" + std::string(desc->id) +
                                                              "' needs plugin ABI 1.2 (it reads the step's rows); "
                                                              "this host speaks 1.1");
    }
    dlclose(library);

    const RunShape shape = discrete_shape();
    ControllerInstance mask(fixture_type("forms", "rows_mask"), "{}", "m");
    mask.begin(shape, nullptr);
    EXPECT_TRUE(mask.step(step_inputs(shape, 0)).token_bits.defined());
}

TEST(Forms, RudderControlFormsDenseSpeaksAsA11Host) {
    const RunShape shape = shape_with_candidates(3);
    const ScopedEnv dense("RUDDER_CONTROL_FORMS", "dense");
    ControllerInstance probe(fixture_type("probe_forms"), "{}", "p");
    EXPECT_FALSE(probe.has(RUDDER_CAP_ROWS) || probe.has(RUDDER_CAP_PACKED_MASK) || probe.has(RUDDER_CAP_CANDIDATES));
    EXPECT_TRUE(probe.has(RUDDER_CAP_HARD_CONSTRAINT));
    probe.begin(shape, nullptr);
    probe.step(with_rows(step_inputs(shape, 0), shape, {1, 2, 4}, 3));
    const std::string detail = detail_of(probe);
    EXPECT_THAT(detail, HasSubstr("candidates=0 forms=0;"));
    EXPECT_THAT(detail, HasSubstr("in: latent=- x0_logits=[2,3,8]f32@1:0=mixed tokens=[2,3]i64@1:0=mixed "
                                  "masked=[2,3]u8@1:0=mixed out: logit_delta=[2,3,8]f32@1:0=0 grad=[2,3,8]f32@1:0=0 "
                                  "log_prob=[2]f32@1:0=0 fixed_tokens=[2,3]i64@1:0=-1 forbidden=[2,3,8]u8@1:0=0; "
                                  "forms: ^ ^;"));
    // A controller that needs 1.2 still loads (the host is 1.2) but gets no rows: it says so.
    ControllerInstance mask(fixture_type("forms", "rows_mask"), "{}", "m");
    mask.begin(shape, nullptr);
    EXPECT_THAT(plugin_error_of([&] { mask.step(step_inputs(shape, 0)); }),
                HasSubstr("rows_mask was given no rows or no token_bits"));
}

TEST(Forms, RudderControlFormsTakesDenseOrNothing) {
    {
        const ScopedEnv empty("RUDDER_CONTROL_FORMS", "");
        EXPECT_TRUE(ControllerInstance(fixture_type("probe_forms"), "{}", "p").has(RUDDER_CAP_ROWS));
    }
    const ScopedEnv wrong("RUDDER_CONTROL_FORMS", "sparse");
    EXPECT_EQ(plugin_error_of([] { ControllerInstance probe(fixture_type("probe_forms"), "{}", "p"); }),
              "RUDDER_CONTROL_FORMS=sparse is not a form to give controllers: expected \"dense\" (or unset for the "
              "forms each declares)");
}

// What one controller gives at a step in its declared forms and in the dense ones, both as dense constraints at the
// step's rows.
struct BothForms {
    at::Tensor fixed, forbidden, delta;  // 1.2 forms
    at::Tensor dense_fixed, dense_forbidden, dense_delta;
};

BothForms in_both_forms(const ControllerType& type, const std::string& params, const RunShape& shape,
                        const StepInputs& in, RunServices* services = nullptr) {
    ControllerInstance declared(type, params, "x");
    declared.begin(shape, services);
    const StepOutputs a = declared.step(in);
    const ScopedEnv dense("RUDDER_CONTROL_FORMS", "dense");
    ControllerInstance dense_instance(type, params, "x");
    dense_instance.begin(shape, services);
    const StepOutputs b = dense_instance.step(in);
    const at::Tensor rows = rows_of(in, shape);
    return {a.fixed_tokens, forbidden_as_dense(a, rows, shape), delta_as_dense(a, in, shape),
            b.fixed_tokens, forbidden_as_dense(b, rows, shape), delta_as_dense(b, in, shape)};
}

void expect_same(const BothForms& f, const std::string& what) {
    ASSERT_EQ(f.fixed.defined(), f.dense_fixed.defined()) << what;
    if (f.fixed.defined()) {
        EXPECT_TRUE(at::equal(f.fixed, f.dense_fixed)) << what;
    }
    EXPECT_TRUE(at::equal(f.forbidden, f.dense_forbidden)) << what;
    EXPECT_TRUE(at::allclose(f.delta, f.dense_delta)) << what;
}

TEST(Forms, OneHelperSourceGivesTheSameContributionInBothForms) {
    for (const int32_t k : {3, 5, 0}) {  // the host's k: the controller's own, more, none (it finds its own)
        const RunShape shape = shape_with_candidates(k);
        StepInputs in = step_inputs(shape, 0);
        in.x0_logits = distinct_x0(shape);
        for (const auto& rows : std::vector<std::vector<int64_t>>{{1, 2, 4}, {0, 1, 2, 3, 4, 5}, {}}) {
            const StepInputs step = with_rows(in, shape, rows, k);
            for (const char* params : {R"({"mask": "forbid"})", R"({"mask": "allow"})"}) {
                const BothForms f = in_both_forms(fixture_type("helper_forms"), params, shape, step);
                expect_same(f, std::string(params) + " k=" + std::to_string(k) + " N=" + std::to_string(rows.size()));
                if (!rows.empty()) {
                    EXPECT_TRUE(f.forbidden.any().item<bool>()) << params;  // the comparison is not of two empty masks
                    EXPECT_TRUE(f.delta.ne(0).any().item<bool>()) << params;
                }
            }
        }
    }
}

// The bundled controllers, as the plugin search path holds them.
ControllerType first_party(const std::string& name) {
    return load_library(std::filesystem::path(RUDDER_TEST_FIRST_PARTY_PLUGIN_DIR) / ("rudder_" + name + ".so")).at(0);
}

TEST(Forms, LengthAndSpanGiveTheSameConstraintsAsTheirDenseForms) {
    const RunShape shape = discrete_shape();
    FakeServices services;
    for (const auto& [name, params] :
         std::vector<std::pair<std::string, std::string>>{{"length", R"({"tokens": 2})"},
                                                          {"length", R"({"tokens": 3})"},
                                                          {"span", R"({"prefix": "the", "length": 2})"},
                                                          {"span", R"({"words": [{"position": 1, "text": "cat"}]})"}}) {
        const ControllerType type = first_party(name);
        EXPECT_NE(type.capabilities() & RUDDER_CAP_ROWS, 0u) << name;
        EXPECT_NE(type.capabilities() & RUDDER_CAP_PACKED_MASK, 0u) << name;
        for (const auto& rows : std::vector<std::vector<int64_t>>{{1, 2, 4}, {0, 1, 2, 3, 4, 5}, {5}}) {
            const BothForms f =
                in_both_forms(type, params, shape, with_rows(step_inputs(shape, 0), shape, rows, 0), &services);
            expect_same(f, name + " " + params + " N=" + std::to_string(rows.size()));
        }
    }
    // Not two empty masks: length 2 forbids pad at positions 0 and 1 of both sequences.
    ControllerInstance length(first_party("length"), R"({"tokens": 2})", "l");
    length.begin(shape, nullptr);
    const StepOutputs out = length.step(step_inputs(shape, 0));
    EXPECT_EQ(out.token_bits.sizes(), (std::vector<int64_t>{6, 1}));
    EXPECT_EQ(forbidden_as_dense(out, rows_of(step_inputs(shape, 0), shape), shape).sum().item<int64_t>(), 4);
}

}  // namespace
}  // namespace rudder::plugins::testing
