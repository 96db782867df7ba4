// Composer::commit, plugin ABI 1.3's COMMIT phase from the runtime's side, on the corpus model's vocabulary: the
// rejections and the forbidden token bits of the controllers that take part are joined, inactive and non-COMMIT
// controllers are not asked, a failing controller follows its on_failure, a row left with no token is a conflict
// naming the controllers, and a loop that keeps the host's contract ends in a state the controllers accept.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "composer.hpp"
#include "corpus_fixture.hpp"
#include "step_inputs.hpp"

namespace {

using rudder::Commit;
using rudder::ComposedController;
using rudder::Composer;
using rudder::plugins::ControllerInstance;
using rudder::plugins::Isolation;

// The vocabulary of the corpus model (pad 0, unknown 1, mask 2, then the words): tokens 3 to 9 are words.
const rudder::WordTokenizer& corpus_vocabulary() {
    static const rudder::WordTokenizer tokenizer =
        rudder::WordTokenizer::load((rudder::testing::corpus_model_dir() / "vocab.txt").string());
    return tokenizer;
}

rudder::plugins::ControllerType fixture_type(const std::string& directory, const std::string& library,
                                             const std::string& id) {
    for (auto& type : rudder::plugins::load_library(std::filesystem::path(directory) / ("rudder_" + library + ".so")))
        if (type.id() == id) return type;
    throw std::runtime_error(library + " has no controller " + id);
}

// A no_repeat controller (tests/plugins/fixtures/no_repeat.cpp): tokens of `params`' set, no two equal neighbours.
ComposedController no_repeat(const std::string& params, const std::string& label,
                             Isolation isolation = Isolation::in_process) {
    ComposedController c;
    c.instance = std::make_unique<ControllerInstance>(
        fixture_type(RUDDER_TEST_COMMIT_FIXTURE_DIR, "no_repeat", "no_repeat"), params, label, isolation);
    return c;
}

rudder::plugins::RunShape corpus_shape() {
    rudder::plugins::RunShape shape;
    shape.family = RUDDER_FAMILY_DISCRETE;
    shape.batch_size = 2;
    shape.seq_len = 6;
    shape.vocab_size = corpus_vocabulary().vocab_size();
    shape.pad_id = corpus_vocabulary().pad_id();
    shape.mask_id = corpus_vocabulary().mask_id();
    shape.total_steps = 10;
    return shape;
}

// A step where every position is masked and `rows` draw `proposed`.
rudder::PredictState masked_state(const rudder::plugins::RunShape& shape, const std::vector<int64_t>& rows) {
    rudder::PredictState state;
    state.step = 5;
    state.steps = shape.total_steps;
    state.t = 0.5;
    state.t_next = 0.4;
    state.tokens = at::full({shape.batch_size, shape.seq_len}, shape.mask_id, at::kLong);
    state.masked = at::ones({shape.batch_size, shape.seq_len}, at::kByte);
    state.rows = at::tensor(rows, at::kLong);
    return state;
}

// The tokens packed forbidden bits [N, W] leave at row r (below V, the mask token aside).
std::set<int64_t> left_at(const at::Tensor& bits, int64_t r, int64_t V, int64_t mask_id) {
    std::set<int64_t> left;
    for (int64_t v = 0; v < V; ++v)
        if (v != mask_id && ((static_cast<uint32_t>(bits[r][v / 32].item<int32_t>()) >> (v % 32)) & 1u) == 0)
            left.insert(v);
    return left;
}

const std::vector<int64_t> kRows = {0, 1, 2, 3, 4, 5, 6, 8};  // all of sequence 0, positions 0 and 2 of sequence 1
const std::vector<int64_t> kProposed = {3, 7, 4, 4, 5, 5, 5, 3};

TEST(ComposerCommit, JoinsTheRejectionsAndTheForbiddenBitsOfTheActiveCommitControllers) {
    const auto shape = corpus_shape();
    std::vector<ComposedController> controllers;
    controllers.push_back(no_repeat(R"({"allow": "3456"})", "a"));
    controllers.push_back(no_repeat(R"({"allow": "4567"})", "b", Isolation::process));
    // Would reject every row, but is not active yet.
    controllers.push_back(no_repeat(R"({"reject": "all", "allow": "456"})", "late"));
    controllers.back().active.from_t = 0.3;
    ComposedController rows_mask;  // a PREDICT-only controller: not asked
    rows_mask.instance = std::make_unique<ControllerInstance>(
        fixture_type(RUDDER_TEST_FIXTURE_DIR, "forms", "rows_mask"), "{}", "predict_only");
    controllers.push_back(std::move(rows_mask));
    Composer composer(std::move(controllers), rudder::Family::discrete, shape.mask_id, shape.vocab_size);
    EXPECT_TRUE(composer.commits());
    composer.begin(shape, nullptr);

    const rudder::PredictState state = masked_state(shape, kRows);
    const rudder::plugins::StepInputs in = rudder::commit_inputs(state, at::tensor(kProposed, at::kLong), 0);
    const Commit answer = composer.commit(in);
    // a ({3, 4, 5, 6}) rejects 7 at row 1 and the second of two equal neighbours (rows 3 and 5); b ({4, 5, 6, 7})
    // rejects 3 (rows 0 and 7) and the same equal neighbours.
    EXPECT_TRUE(at::equal(answer.rejected, at::tensor({1, 1, 0, 1, 0, 1, 0, 1}, at::kByte).to(at::kBool)));
    EXPECT_TRUE(at::equal(answer.committed(), at::tensor({0, 0, 1, 0, 1, 0, 1, 0}, at::kByte).to(at::kBool)));

    // The bits are the union of what each forbids: the tokens both allow.
    const auto type = fixture_type(RUDDER_TEST_COMMIT_FIXTURE_DIR, "no_repeat", "no_repeat");
    ControllerInstance a(type, R"({"allow": "3456"})", "a"), b(type, R"({"allow": "4567"})", "b");
    a.begin(shape, nullptr);
    b.begin(shape, nullptr);
    const at::Tensor union_of_forbidden =
        a.step(in).token_bits.bitwise_not().bitwise_or(b.step(in).token_bits.bitwise_not());
    ASSERT_TRUE(answer.forbidden_bits.defined());
    EXPECT_TRUE(at::equal(answer.forbidden_bits, union_of_forbidden));
    // Row 1 (position 1): a accepted 3 and 4 beside it and allows {5, 6}; b accepted 4 beside it (and 7 there itself).
    EXPECT_EQ(left_at(answer.forbidden_bits, 1, shape.vocab_size, shape.mask_id), (std::set<int64_t>{5, 6}));
    // Row 3 (position 3), between the accepted 4 and 5: a leaves {3, 6}, b {6, 7}.
    EXPECT_EQ(left_at(answer.forbidden_bits, 3, shape.vocab_size, shape.mask_id), (std::set<int64_t>{6}));
    // Row 7 (sequence 1, position 2): its neighbours are masked, so both sets meet in {4, 5, 6}.
    EXPECT_EQ(left_at(answer.forbidden_bits, 7, shape.vocab_size, shape.mask_id), (std::set<int64_t>{4, 5, 6}));

    // Once active, the third controller rejects every row: the host commits the first alone.
    rudder::plugins::StepInputs late = in;
    late.t = 0.2;
    const Commit all = composer.commit(late);
    EXPECT_TRUE(all.rejected.all().item<bool>());
    EXPECT_TRUE(at::equal(all.committed(), at::tensor({1, 0, 0, 0, 0, 0, 0, 0}, at::kByte).to(at::kBool)));
}

TEST(ComposerCommit, WithoutCommitControllersNothingIsRejected) {
    const auto shape = corpus_shape();
    std::vector<ComposedController> controllers;
    ComposedController rows_mask;
    rows_mask.instance = std::make_unique<ControllerInstance>(
        fixture_type(RUDDER_TEST_FIXTURE_DIR, "forms", "rows_mask"), "{}", "predict_only");
    controllers.push_back(std::move(rows_mask));
    Composer composer(std::move(controllers), rudder::Family::discrete, shape.mask_id, shape.vocab_size);
    EXPECT_FALSE(composer.commits());
    composer.begin(shape, nullptr);
    const Commit answer =
        composer.commit(rudder::commit_inputs(masked_state(shape, kRows), at::tensor(kProposed, at::kLong), 0));
    EXPECT_FALSE(answer.rejected.any().item<bool>());
    EXPECT_EQ(answer.rejected.size(0), 8);
    EXPECT_FALSE(answer.forbidden_bits.defined());
}

TEST(ComposerCommit, AFailingControllerFollowsItsOnFailure) {
    const auto shape = corpus_shape();
    const auto make = [&](bool continue_on_failure) {
        std::vector<ComposedController> controllers;
        controllers.push_back(no_repeat(R"({"allow": "3456"})", "a"));
        controllers.push_back(no_repeat(R"({"defect": "value_2"})", "broken"));
        controllers.back().continue_on_failure = continue_on_failure;
        auto composer = std::make_unique<Composer>(std::move(controllers), rudder::Family::discrete, shape.mask_id,
                                                   shape.vocab_size);
        composer->begin(shape, nullptr);
        return composer;
    };
    const auto in = rudder::commit_inputs(masked_state(shape, kRows), at::tensor(kProposed, at::kLong), 1);
    const auto failing = make(false);
    EXPECT_THROW(failing->commit(in), rudder::plugins::PluginError);

    const auto continuing = make(true);
    const Commit answer = continuing->commit(in);
    EXPECT_NE(continuing->failure(1).find("wrote rejected value 2 in row 0"), std::string::npos)
        << continuing->failure(1);
    EXPECT_TRUE(at::equal(answer.rejected, at::tensor({0, 1, 0, 1, 0, 1, 0, 0}, at::kByte).to(at::kBool)));
}

TEST(ComposerCommit, ARowLeftWithNoTokenIsAConflictNamingTheControllers) {
    const auto shape = corpus_shape();
    std::vector<ComposedController> controllers;
    controllers.push_back(no_repeat(R"({"allow": "345"})", "low"));
    controllers.push_back(no_repeat(R"({"allow": "678"})", "high"));
    Composer composer(std::move(controllers), rudder::Family::discrete, shape.mask_id, shape.vocab_size);
    composer.begin(shape, nullptr);
    // Each rejects the other's token: every row is rejected, the first is committed, the second has nothing left.
    const auto in = rudder::commit_inputs(masked_state(shape, {0, 8}), at::tensor({3, 7}, at::kLong), 0);
    try {
        composer.commit(in);
        FAIL() << "no conflict";
    } catch (const rudder::ConstraintConflict& e) {
        EXPECT_STREQ(e.what(),
                     "controllers 'low', 'high' leave no token to draw again at position 2 (sample 1) once the "
                     "proposals they accept are committed");
    }
}

// A reverse step's commit loop as the ABI's contract has it, over the composer: propose a token for every row within
// what the controllers allow, commit what no one rejects (or the first row), draw the rest again within the bits, and
// ask again. However many positions unmask at once, the result keeps the controllers' rule.
TEST(ComposerCommit, TheHostsContractEndsInAStateTheControllersAccept) {
    const auto shape = corpus_shape();
    const int64_t B = shape.batch_size, L = shape.seq_len, V = shape.vocab_size;
    std::mt19937 random(3);
    for (const Isolation isolation : {Isolation::in_process, Isolation::process}) {
        std::vector<ComposedController> controllers;
        controllers.push_back(no_repeat(R"({"allow": "3456"})", "a", isolation));
        controllers.push_back(no_repeat(R"({"allow": "4567"})", "b", isolation));
        Composer composer(std::move(controllers), rudder::Family::discrete, shape.mask_id, V);
        composer.begin(shape, nullptr);
        std::vector<int64_t> every(static_cast<size_t>(B * L));
        for (size_t p = 0; p < every.size(); ++p) every[p] = static_cast<int64_t>(p);
        rudder::PredictState state = masked_state(shape, every);  // one step unmasks every position
        // The first proposals: any of the tokens both allow with nothing committed, so clashes are likely.
        std::vector<int64_t> proposed;
        for (size_t p = 0; p < every.size(); ++p) proposed.push_back(4 + static_cast<int64_t>(random() % 2));
        int rounds = 0;
        while (state.rows.size(0) > 0) {
            ASSERT_LT(++rounds, 100);
            const Commit answer =
                composer.commit(rudder::commit_inputs(state, at::tensor(proposed, at::kLong), rounds - 1));
            const at::Tensor now = answer.committed();
            std::vector<int64_t> rows, again;
            for (int64_t r = 0; r < state.rows.size(0); ++r) {
                const int64_t p = state.rows[r].item<int64_t>();
                if (now[r].item<bool>()) {
                    state.tokens.view({-1})[p] = proposed[static_cast<size_t>(r)];
                    state.masked.view({-1})[p] = 0;
                    continue;
                }
                const auto left = left_at(answer.forbidden_bits, r, V, shape.mask_id);
                ASSERT_FALSE(left.empty());
                auto pick = left.begin();
                std::advance(pick, static_cast<long>(random() % left.size()));
                rows.push_back(p);
                again.push_back(*pick);
            }
            state.rows = at::tensor(rows, at::kLong);
            proposed = again;
        }
        EXPECT_GT(rounds, 1) << "no proposal was ever rejected: the test did not test";
        const at::Tensor tokens = state.tokens;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < L; ++i) {
                const int64_t token = tokens[b][i].item<int64_t>();
                EXPECT_TRUE(token >= 4 && token <= 6) << isolation_name(isolation) << " " << b << "," << i;
                if (i > 0) {
                    EXPECT_NE(token, tokens[b][i - 1].item<int64_t>()) << isolation_name(isolation);
                }
            }
    }
}

}  // namespace
