// Plugin ABI 1.3, the COMMIT phase: a controller written with rudder_controller.hpp accepts or rejects the tokens the
// host proposes to commit, by a rule these tests check, in this process and in a process of its own; the adapter
// checks what it answers; a controller built for 1.2 sees nothing new; the dense forms refuse a COMMIT controller;
// a descriptor that declares COMMIT without packed masks is refused when its library loads.
#include "test_support.hpp"

#include <gmock/gmock.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace rudder::plugins::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::filesystem::path commit_fixture(const std::string& name) {
    return std::filesystem::path(RUDDER_TEST_COMMIT_FIXTURE_DIR) / ("rudder_" + name + ".so");
}

ControllerType commit_type(const std::string& library, const std::string& id) {
    for (auto& type : load_library(commit_fixture(library)))
        if (type.id() == id) return type;
    throw std::runtime_error("fixture " + library + " has no controller " + id);
}

// Two sequences of six positions: adjacency matters.
RunShape commit_shape() {
    RunShape shape = discrete_shape();
    shape.seq_len = 6;
    return shape;
}

// One step's state: tokens (mask_id where masked or a row), masked, the rows and their proposals.
struct State {
    std::vector<int64_t> tokens;
    std::vector<uint8_t> masked;
    std::vector<int64_t> rows, proposed;
};

StepInputs commit_inputs(const RunShape& shape, const State& s, int32_t step = 3, int32_t round = 0) {
    StepInputs in;
    in.phase = RUDDER_PHASE_COMMIT;
    in.step = step;
    in.total_steps = shape.total_steps;
    in.guide_iter = round;
    in.t = 0.5;
    in.t_next = 0.4;
    in.tokens = at::tensor(s.tokens, at::kLong).view({shape.batch_size, shape.seq_len});
    in.masked = at::tensor(s.masked, at::kByte).view({shape.batch_size, shape.seq_len});
    in.rows = at::tensor(s.rows, at::kLong);
    in.proposed = at::tensor(s.proposed, at::kLong);
    return in;
}

StepInputs predict_inputs(const RunShape& shape, const State& s) {
    StepInputs in = step_inputs(shape, 2);
    in.tokens = at::tensor(s.tokens, at::kLong).view({shape.batch_size, shape.seq_len});
    in.masked = at::tensor(s.masked, at::kByte).view({shape.batch_size, shape.seq_len});
    return with_rows(in, shape, s.rows, 0);
}

// bool [n] from 0 / 1 (ATen 1.13 makes no bool tensor from a list).
at::Tensor flags(const std::vector<int64_t>& values) { return at::tensor(values, at::kLong).ne(0); }

// A random state: each position committed (a token of {1, 2, 3} unlike its committed left neighbour), masked, or a
// row with a proposal drawn from 0..4 (outside the allowed set too, and clashing often).
State random_state(const RunShape& shape, std::mt19937& random) {
    State s;
    const int64_t positions = shape.batch_size * shape.seq_len;
    std::uniform_int_distribution<int> kind(0, 2), token(1, 3), proposal(0, 4);
    for (int64_t p = 0; p < positions; ++p) {
        const int k = kind(random);
        s.masked.push_back(k == 1 ? 1 : 0);
        s.tokens.push_back(shape.mask_id);
        if (k == 2) {
            s.rows.push_back(p);
            s.proposed.push_back(proposal(random));
        } else if (k == 0) {
            const bool has_left = p % shape.seq_len > 0 && s.masked[p - 1] == 0 && s.tokens[p - 1] != shape.mask_id;
            int64_t t = token(random);
            while (has_left && t == s.tokens[p - 1]) t = token(random);
            s.tokens.back() = t;
        }
    }
    return s;
}

// The tokens token_bits allow at each row ([N, W] allowed bits).
std::vector<std::set<int64_t>> allowed_sets(const StepOutputs& out, int64_t V) {
    EXPECT_TRUE(out.bits_allowed);
    const at::Tensor bits = out.token_bits.contiguous();
    std::vector<std::set<int64_t>> sets(static_cast<size_t>(bits.size(0)));
    for (int64_t r = 0; r < bits.size(0); ++r)
        for (int64_t v = 0; v < V; ++v)
            if ((static_cast<uint32_t>(bits[r][v / 32].item<int32_t>()) >> (v % 32)) & 1u)
                sets[static_cast<size_t>(r)].insert(v);
    return sets;
}

// The fixture's rule, checked rather than recomputed: with the accepted rows committed, every committed or accepted
// token is in {1, 2, 3} and differs from its neighbours; a rejected proposal is outside the set or equals a committed
// or accepted neighbour's token; each row allows exactly {1, 2, 3} less its committed and accepted neighbours' tokens.
void expect_no_repeat_rule(const State& s, const StepOutputs& out, const RunShape& shape, const std::string& what) {
    const int64_t L = shape.seq_len, positions = shape.batch_size * L;
    ASSERT_TRUE(out.rejected.defined()) << what;
    ASSERT_EQ(out.rejected.sizes(), (std::vector<int64_t>{static_cast<int64_t>(s.rows.size())})) << what;
    ASSERT_EQ(out.token_bits.sizes(), (std::vector<int64_t>{static_cast<int64_t>(s.rows.size()), 1})) << what;
    std::vector<int64_t> holds(static_cast<size_t>(positions), -1);  // after the accepted rows are committed
    for (int64_t p = 0; p < positions; ++p)
        if (s.masked[p] == 0 && s.tokens[p] != shape.mask_id) holds[p] = s.tokens[p];
    for (size_t r = 0; r < s.rows.size(); ++r)
        if (out.rejected[static_cast<int64_t>(r)].item<int>() == 0) holds[s.rows[r]] = s.proposed[r];
    const auto neighbours = [&](int64_t p) {
        std::set<int64_t> near;
        for (const int64_t q : {p - 1, p + 1})
            if (q >= 0 && q < positions && q / L == p / L && holds[q] >= 0) near.insert(holds[q]);
        return near;
    };
    const std::set<int64_t> A = {1, 2, 3};
    const auto sets = allowed_sets(out, shape.vocab_size);
    for (size_t r = 0; r < s.rows.size(); ++r) {
        const int64_t p = s.rows[r], token = s.proposed[r];
        const int rejected = out.rejected[static_cast<int64_t>(r)].item<int>();
        ASSERT_TRUE(rejected == 0 || rejected == 1) << what;
        std::set<int64_t> others;  // the neighbours' tokens, this row's own proposal aside
        for (const int64_t q : {p - 1, p + 1})
            if (q >= 0 && q < positions && q / L == p / L && holds[q] >= 0) others.insert(holds[q]);
        if (rejected == 0)
            EXPECT_TRUE(A.count(token) == 1 && others.count(token) == 0)
                << what << " row " << r << " accepted " << token;
        else
            EXPECT_TRUE(A.count(token) == 0 || neighbours(p).count(token) == 1)
                << what << " row " << r << " rejected " << token << " for no reason";
        std::set<int64_t> expected;
        for (const int64_t a : A)
            if (others.count(a) == 0) expected.insert(a);
        EXPECT_EQ(sets[r], expected) << what << " row " << r;
    }
}

TEST(Commit, TheFixtureAnswersByItsRuleInBothIsolationModesAndBothForms) {
    const RunShape shape = commit_shape();
    std::mt19937 random(47);
    std::vector<std::unique_ptr<ControllerInstance>> instances;
    for (const char* id : {"no_repeat", "no_repeat_dense"})
        for (const Isolation isolation : {Isolation::in_process, Isolation::process}) {
            instances.push_back(
                std::make_unique<ControllerInstance>(commit_type("no_repeat", id), "{}", id, isolation));
            EXPECT_TRUE(instances.back()->has(RUDDER_CAP_COMMIT));
            instances.back()->begin(shape, nullptr);
        }
    int64_t rejections = 0, acceptances = 0;
    for (int trial = 0; trial < 40; ++trial) {
        const State s = random_state(shape, random);
        if (s.rows.empty()) continue;
        const StepOutputs reference = instances[0]->step(commit_inputs(shape, s, trial, trial % 3));
        expect_no_repeat_rule(s, reference, shape, "trial " + std::to_string(trial));
        rejections += reference.rejected.sum().item<int64_t>();
        acceptances += static_cast<int64_t>(s.rows.size()) - reference.rejected.sum().item<int64_t>();
        for (size_t k = 1; k < instances.size(); ++k) {
            const StepOutputs other = instances[k]->step(commit_inputs(shape, s, trial, trial % 3));
            EXPECT_TRUE(at::equal(other.rejected, reference.rejected)) << instances[k]->label() << " " << trial;
            EXPECT_TRUE(at::equal(other.token_bits, reference.token_bits)) << instances[k]->label() << " " << trial;
            EXPECT_EQ(other.bits_allowed, reference.bits_allowed);
        }
    }
    EXPECT_GT(rejections, 10);  // the trials tried both answers
    EXPECT_GT(acceptances, 10);
}

TEST(Commit, ASubsetOfTheAcceptedRowsIsAcceptedWhole) {
    const RunShape shape = commit_shape();
    std::mt19937 random(7);
    ControllerInstance instance(commit_type("no_repeat", "no_repeat"), "{}", "x");
    instance.begin(shape, nullptr);
    for (int trial = 0; trial < 20; ++trial) {
        const State s = random_state(shape, random);
        const StepOutputs out = instance.step(commit_inputs(shape, s));
        // Every other accepted row proposed again, the rest of the rows masked again.
        State subset = s;
        subset.rows.clear();
        subset.proposed.clear();
        bool take = true;
        for (size_t r = 0; r < s.rows.size(); ++r) {
            if (out.rejected[static_cast<int64_t>(r)].item<int>() == 0 && (take = !take)) {
                subset.rows.push_back(s.rows[r]);
                subset.proposed.push_back(s.proposed[r]);
            } else {
                subset.masked[s.rows[r]] = 1;
            }
        }
        EXPECT_EQ(instance.step(commit_inputs(shape, subset)).rejected.sum().item<int64_t>(), 0) << trial;
    }
}

TEST(Commit, PredictTreatsTheRowsAndTheMaskedPositionsAsFree) {
    const RunShape shape = commit_shape();
    // Sequence 0: 2 _ [row] [row] 3 _ ; sequence 1: every position a row (as under uniform noise).
    State s;
    s.tokens = {2, 7, 7, 7, 3, 7, 1, 1, 2, 2, 3, 3};  // a row's old token (uniform noise) does not constrain it
    s.masked = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    s.rows = {2, 3, 6, 7, 8, 9, 10, 11};
    for (const char* id : {"no_repeat", "no_repeat_dense"}) {
        ControllerInstance instance(commit_type("no_repeat", id), "{}", id);
        instance.begin(shape, nullptr);
        const StepOutputs out = instance.step(predict_inputs(shape, s));
        EXPECT_FALSE(out.rejected.defined());
        ASSERT_TRUE(out.bits_allowed);
        const at::Tensor allowed = forbidden_as_dense(out, at::tensor(s.rows, at::kLong), shape).logical_not();
        // Position 3 (a row) has the committed 3 at position 4 beside it; position 2 has a masked and a row beside it.
        EXPECT_TRUE(at::equal(allowed[0][2].narrow(0, 1, 3), flags({1, 1, 1})));
        EXPECT_TRUE(at::equal(allowed[0][3].narrow(0, 1, 3), flags({1, 1, 0})));
        for (int64_t i = 0; i < shape.seq_len; ++i)
            EXPECT_TRUE(at::equal(allowed[1][i].narrow(0, 1, 3), flags({1, 1, 1}))) << id << " " << i;
    }
}

TEST(Commit, TheAdaptersChecksAreNamedErrorsInBothIsolationModes) {
    const RunShape shape = commit_shape();
    State s;  // sequence 0: [row] [row] _ _ _ _, proposals 1 and 2 (both accepted by the rule)
    s.tokens.assign(12, shape.mask_id);
    s.masked.assign(12, 1);
    s.rows = {0, 1};
    s.proposed = {1, 2};
    const std::string where = "controller 'x' (no_repeat, rudder_no_repeat.so): ";
    const std::pair<std::string, std::string> cases[] = {
        {"value_2", where + "wrote rejected value 2 in row 0 (sequence 0, position 0) at step 3 (commit round 1); 1 "
                            "rejects the row's proposed token, 0 accepts it"},
        {"past_vocab", where + "wrote token_bits past the vocabulary (V = 8) in row 0 (sequence 0, position 0), word 0 "
                               "at step 3 (commit round 1)"},
        {"no_bits", where + "rejected row 0 (sequence 0, position 0) at step 3 (commit round 1) but set neither "
                            "RUDDER_WROTE_FORBIDDEN_BITS nor RUDDER_WROTE_ALLOWED_BITS; a rejected row is drawn again "
                            "within the token_bits its controllers write"},
        {"unflagged", where + "wrote rejected without setting RUDDER_WROTE_REJECTED at step 3 (commit round 1); the "
                              "host reads only the outputs whose written bit is set"},
    };
    for (const auto& [defect, message] : cases)
        for (const Isolation isolation : {Isolation::in_process, Isolation::process}) {
            ControllerInstance c(commit_type("no_repeat", "no_repeat"), R"({"defect": ")" + defect + R"("})", "x",
                                 isolation);
            c.begin(shape, nullptr);
            EXPECT_EQ(plugin_error_of([&] { c.step(commit_inputs(shape, s, 3, 1)); }), message)
                << isolation_name(isolation);
        }
    // What the host passes is checked before the call.
    ControllerInstance c(commit_type("no_repeat", "no_repeat"), "{}", "x");
    c.begin(shape, nullptr);
    StepInputs outside = commit_inputs(shape, s);
    outside.proposed = at::tensor({1, 8}, at::kLong);
    EXPECT_THROW(
        {
            try {
                c.step(outside);
            } catch (const std::invalid_argument& e) {
                EXPECT_THAT(e.what(), HasSubstr("host proposed token 8, outside [0, 8)"));
                throw;
            }
        },
        std::invalid_argument);
    StepInputs none = commit_inputs(shape, s);
    none.proposed = at::Tensor();
    EXPECT_THROW(c.step(none), std::invalid_argument);
    StepInputs short_ = commit_inputs(shape, s);
    short_.proposed = at::tensor({1}, at::kLong);
    EXPECT_THROW(c.step(short_), std::invalid_argument);
}

TEST(Commit, OnlyACommitControllerIsCalledAndGetsTheNewMembers) {
    const RunShape shape = commit_shape();
    State s;
    s.tokens.assign(12, shape.mask_id);
    s.masked.assign(12, 1);
    s.rows = {0, 1};
    s.proposed = {1, 1};
    // PREDICT hands a COMMIT controller no `rejected`; COMMIT hands it rejected and token_bits only.
    ControllerInstance commit(commit_type("no_repeat", "no_repeat"), "{}", "x");
    commit.begin(shape, nullptr);
    const StepOutputs predicted = commit.step(predict_inputs(shape, s));
    EXPECT_FALSE(predicted.rejected.defined());
    EXPECT_TRUE(predicted.token_bits.defined());
    const StepOutputs answered = commit.step(commit_inputs(shape, s));
    EXPECT_TRUE(at::equal(answered.rejected, at::tensor({0, 1}, at::kByte)));  // the same token side by side
    EXPECT_FALSE(answered.fixed_tokens.defined() || answered.forbidden.defined() || answered.logit_delta.defined());

    // Controllers without RUDDER_CAP_COMMIT are not called in that phase.
    ControllerInstance hard(fixture_type("hard"), "{}", "h");
    hard.begin(shape, nullptr);
    const StepOutputs none = hard.step(commit_inputs(shape, s));
    EXPECT_FALSE(none.rejected.defined() || none.token_bits.defined() || none.fixed_tokens.defined());
}

TEST(Commit, AControllerBuiltFor12SeesNothingNewInBothIsolationModes) {
    const RunShape shape = commit_shape();
    State s;
    s.tokens.assign(12, shape.mask_id);
    s.masked.assign(12, 1);
    s.rows = {1, 4, 7};
    s.proposed = {1, 2, 3};
    for (const Isolation isolation : {Isolation::in_process, Isolation::process}) {
        ControllerInstance old(commit_type("abi12", "abi12"), "{}", "o", isolation);
        EXPECT_EQ(old.type().abi_minor(), 2u);
        EXPECT_NE(old.type().capabilities() & RUDDER_CAP_COMMIT, 0u);  // bit 11 as the 1.2 build happened to set it
        EXPECT_FALSE(old.has(RUDDER_CAP_COMMIT));                      // means nothing from a 1.2 controller
        EXPECT_TRUE(old.has(RUDDER_CAP_ROWS) && old.has(RUDDER_CAP_PACKED_MASK));
        old.begin(shape, nullptr);                                   // the fixture refuses a run info with other forms
        const StepOutputs out = old.step(predict_inputs(shape, s));  // ... and steps of other sizes or phases
        EXPECT_TRUE(at::equal(out.token_bits, at::full({3, 1}, 8, at::kInt))) << isolation_name(isolation);
        const StepOutputs nothing = old.step(commit_inputs(shape, s));
        EXPECT_FALSE(nothing.rejected.defined() || nothing.token_bits.defined());
    }
}

TEST(Commit, TheDenseFormsRefuseACommitController) {
    const ScopedEnv dense("RUDDER_CONTROL_FORMS", "dense");
    EXPECT_EQ(plugin_error_of([] { ControllerInstance c(commit_type("no_repeat", "no_repeat"), "{}", "x"); }),
              "controller 'x' (no_repeat, rudder_no_repeat.so): takes part in the COMMIT phase (RUDDER_CAP_COMMIT, "
              "plugin ABI 1.3), which RUDDER_CONTROL_FORMS=dense does not offer (it speaks ABI 1.1): unset "
              "RUDDER_CONTROL_FORMS to run this controller");
    // A 1.2 controller's stray bit 11 is no reason to refuse it.
    EXPECT_NO_THROW(ControllerInstance(commit_type("abi12", "abi12"), "{}", "o"));
}

TEST(Commit, ACommitControllerWithoutPackedMasksIsRefusedWhenItsLibraryLoads) {
    const std::string error = plugin_error_of([] { load_library(commit_fixture("commit_without_bits")); });
    EXPECT_THAT(error, StartsWith(commit_fixture("commit_without_bits").string() + ": "));
    EXPECT_THAT(error, HasSubstr("controller 'commit_without_bits' declares RUDDER_CAP_COMMIT without "
                                 "RUDDER_CAP_HARD_CONSTRAINT and RUDDER_CAP_PACKED_MASK, which the COMMIT phase "
                                 "needs (it answers with token_bits)"));
    Registry registry({std::filesystem::path(RUDDER_TEST_COMMIT_FIXTURE_DIR)});
    std::set<std::string> ids;
    for (const auto& c : registry.controllers()) ids.insert(c.id);
    EXPECT_EQ(ids, (std::set<std::string>{"abi12", "no_repeat", "no_repeat_dense"}));
    ASSERT_EQ(registry.rejections().size(), 1u);
    EXPECT_THAT(registry.rejections()[0].reason, HasSubstr("declares RUDDER_CAP_COMMIT without"));
    EXPECT_EQ(capability_names(RUDDER_CAP_COMMIT), std::vector<std::string>{"commit"});
}

}  // namespace
}  // namespace rudder::plugins::testing
