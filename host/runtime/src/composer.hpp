// The guidance composer: asks every active controller for its contribution and combines them.
#pragma once

#include <rudder/plugins/plugins.hpp>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <rudder/runtime/denoiser.hpp>
#include <rudder/runtime/recipe.hpp>

namespace rudder {

// Controllers disagree in a way no step can satisfy (two fixed tokens at one position, every token forbidden).
class ConstraintConflict : public std::runtime_error {
public:
    explicit ConstraintConflict(const std::string& message, std::vector<size_t> controllers = {})
        : std::runtime_error(message), controllers(std::move(controllers)) {}
    std::vector<size_t> controllers;  // the controllers in conflict, by their index in the composer
};

// Controllers' contributions that cannot make a distribution: weighted deltas that overflow float32, or the mask
// token fixed at a position (a sample cannot hold it).
class CompositionError : public std::runtime_error {
public:
    explicit CompositionError(const std::string& message, std::vector<size_t> controllers = {})
        : std::runtime_error(message), controllers(std::move(controllers)) {}
    std::vector<size_t> controllers;  // the controllers at fault, by their index in the composer
};

struct ComposedController {
    std::unique_ptr<plugins::ControllerInstance> instance;
    double weight = 1.0;
    ActiveWindow active;
    bool continue_on_failure = false;  // the recipe's "on_failure": "continue"
    std::string failure;               // why it was dropped from the run ("" while it takes part)
};

// The steering controllers' weighted log p(c | x), the reward particles are chosen by (guidance.particles): summed
// over the controllers that steered at a step while each reports it; `silent` names the first that did not, and then
// there is no sum.
struct Reward {
    at::Tensor log_prob;  // float32 [B]: sum of weight_i * log p_i(c | x); undefined if no one steered, or `silent`
    std::string silent;

    // Adds one steering controller's report (`log_prob` undefined: it gave none).
    void add(const at::Tensor& log_prob, double weight, const std::string& controller);
    bool any() const { return log_prob.defined() || !silent.empty(); }
};

// The combined PREDICT-phase contribution, over the step's rows (the positions it samples; plugins::StepInputs::rows).
// Undefined tensors mean "nobody contributed".
struct Combined {
    at::Tensor rows;             // int64 [N]: flat positions b * L + i, ascending; the row tensors below follow it
    at::Tensor logit_delta;      // float32 [N, V]: sum of weight_i * delta_i (+ Taylor-converted gradients)
    at::Tensor candidate_ids;    // int64 [N, k]: the step's candidates, when a controller wrote deltas for them
    at::Tensor candidate_delta;  // float32 [N, k]: sum of weight_i * candidate_delta_i
    at::Tensor forbidden;        // bool [N, V]; or, when every forbidder wrote bits, undefined and:
    at::Tensor forbidden_bits;   // int32 [N, ceil(V / 32)]: token v forbidden = bit v % 32 of word v / 32
    at::Tensor fixed;            // int64 [B, L]: token id, or -1 where free (every position, not only the rows)
    Reward reward;               // over the controllers that wrote a delta or a gradient

    // The forbidden tokens as bool [N, V] whichever form they are in; undefined if none.
    at::Tensor forbidden_mask(int64_t vocab_size) const;
};

// The COMMIT phase's answer (plugin ABI 1.3) over the step's rows still to be committed (plugins::StepInputs::rows).
struct Commit {
    at::Tensor rejected;        // bool [N]: some controller rejects the row's proposed token
    at::Tensor forbidden_bits;  // int32 [N, ceil(V / 32)]: the union of what the controllers forbid at each row (their
                                // allowed bits inverted); undefined when none wrote bits
    // bool [N], the rows the host commits now (the ABI's contract): those no controller rejects, or the first row
    // alone when every row is rejected (a single proposal is consistent with the state it was allowed in).
    at::Tensor committed() const;
};

class Composer {
public:
    // `mask_id`: the tokenizer's mask token, which no controller may fix.
    Composer(std::vector<ComposedController> controllers, Family family, int64_t mask_id, int64_t vocab_size);

    // How messages name a token (its text, in quotes; the end of the text for the padding token), instead of its id.
    void set_token_names(std::function<std::string(int64_t)> name) { token_name_ = std::move(name); }

    // A new generate() call: controllers dropped in an earlier one ("on_failure": "continue") take part again.
    void start_run();
    void begin(const plugins::RunShape& shape, plugins::RunServices* services);

    // PREDICT phase for every controller active at in.t, over in.rows (undefined: every position). Outputs over
    // [B, L, ...] are cut to the rows; packed token bits stay packed unless a forbidder wrote bytes. Discrete gradients
    // (w.r.t. one-hot tokens) become logit deltas by first-order Taylor: g[v] - g[current token]. Throws
    // ConstraintConflict naming the controllers (found at the rows, and at every fixed position for controllers that
    // wrote whole [B, L, V] masks), and CompositionError when the weighted deltas are not finite or a controller fixes
    // the mask token.
    // With `constraints_only`, only the HARD_CONSTRAINT controllers take part: a recipe's hard constraints composed
    // before any sampling, so that conflicts between them are found by validation.
    Combined predict(const plugins::StepInputs& in, bool constraints_only = false);

    // Whether a controller takes part in the COMMIT phase (declares RUDDER_CAP_COMMIT, as negotiated: ABI 1.3).
    bool commits() const;
    // COMMIT phase (plugin ABI 1.3; `in` from commit_inputs(): the proposals at in.rows) for every RUDDER_CAP_COMMIT
    // controller active at in.t, with on_failure as in predict(). Throws ConstraintConflict naming the controllers when
    // a row the host must draw again (rejected, and not committed()) has no token left under forbidden_bits (the mask
    // token counted as forbidden); the caller draws within its PREDICT combination too.
    Commit commit(const plugins::StepInputs& in);

    // What the step's inputs must hold for the controllers active at t (PREDICT): x0_logits over every position
    // (a controller without RUDDER_CAP_ROWS), x0 at the rows only (RUDDER_CAP_ROWS), the candidates.
    struct Reads {
        bool any = false, whole_x0 = false, x0_rows = false, candidates = false;
    };
    Reads reads(double t) const;

    // Whether any GRADIENT controller is active at t (continuous family's guidance loop).
    bool wants_guidance(double t) const;
    // GUIDE phase over the GRADIENT controllers active at in.t: `grad` is the sum of weight_i * d log p_i(c | x) / dx
    // (undefined if none is active), `reward` that of the controllers that gave a gradient.
    struct Guided {
        at::Tensor grad;
        Reward reward;
    };
    Guided guide(const plugins::StepInputs& in);

    // Whether a controller asked never to reuse cached denoiser output.
    bool needs_fresh_logits() const;

    // The controlled scores at some of the combination's rows: `logits` [n, V] are the network's scores (log-
    // probabilities up to a constant per row) at rows `pick` (int64 indices into combined.rows; undefined: every
    // row, in order). Adds the logit and candidate deltas; forbidden tokens and `never_id` (the mask token, or -1)
    // get -inf; fixed positions become one-hot. Not renormalised: a draw or an argmax does not need it.
    static at::Tensor controlled(const at::Tensor& logits, const Combined& combined, const at::Tensor& pick,
                                 int64_t never_id);
    // Sets `scores` [n, V] (float32) to -inf where `forbidden_bits` [n, ceil(V / 32)] (int32) has a bit; nothing when
    // the bits are undefined.
    static void forbid(at::Tensor& scores, const at::Tensor& forbidden_bits);
    // controlled() over every position of log-probabilities [B, L, V] (combined.rows undefined or all of them),
    // renormalised.
    static at::Tensor apply(const at::Tensor& logp, const Combined& combined, int64_t never_id);

    size_t size() const { return controllers_.size(); }
    plugins::ControllerInstance& instance(size_t i) { return *controllers_[i].instance; }
    // Why controller i was dropped from the run ("on_failure": "continue" and a PluginError), or "" if it was not.
    const std::string& failure(size_t i) const { return controllers_[i].failure; }
    // The controllers whose logit or candidate deltas the last predict() combined, as messages name them:
    // "'label' (weight w), ..." ("" when none did): what a distribution that is no longer one is blamed on.
    std::string last_delta_authors() const;

private:
    struct Authors;  // who wrote what at a PREDICT step (composer.cpp)
    // The checks of a step's combination, each throwing with the controllers to blame: weighted deltas that
    // overflow, the mask token fixed or a fixed token forbidden, a row left with no token to draw.
    void check_finite(const Combined& out, const at::Tensor& sum, const Authors& authors, int64_t L) const;
    void check_fixed(const Combined& out, const Authors& authors, int64_t B, int64_t L) const;
    void check_every_row_allows_a_token(const Combined& out, const Authors& authors, int64_t L) const;
    // COMMIT: a row to draw again with no token left; `writers` are the controllers that wrote bits, with them.
    void check_redrawn_rows(const Commit& out, const at::Tensor& rows,
                            const std::vector<std::pair<size_t, at::Tensor>>& writers, int64_t L) const;
    // The index of the controller that fixed position i of sequence b.
    size_t fixer_at(const Authors& authors, int64_t b, int64_t i) const;
    std::string label(size_t k) const { return "'" + controllers_[k].instance->label() + "'"; }
    // A token as messages name it (set_token_names), else by its id.
    std::string token_name(int64_t id) const { return token_name_ ? token_name_(id) : "id " + std::to_string(id); }
    // The capabilities that make a controller take part in a PREDICT step of this family.
    uint64_t predict_capabilities() const;
    void merge_fixed(Combined& out, const at::Tensor& fixed, size_t owner, at::Tensor& owners);
    // "'label' (weight w), ..." for the controllers at these indices.
    std::string labels_with_weights(const std::vector<size_t>& indices) const;
    std::vector<ComposedController> controllers_;
    std::vector<size_t> last_delta_owners_;            // predict()'s last Authors::delta_owners
    std::shared_ptr<plugins::StepInputShare> inputs_;  // the step's inputs for controllers in processes of their own
    Family family_;
    int64_t mask_id_;
    int64_t vocab_size_;
    std::function<std::string(int64_t)> token_name_;
};

}  // namespace rudder
