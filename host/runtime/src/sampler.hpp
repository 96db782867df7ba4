// Reverse-step samplers of the two families. They take the (already guided/constrained) x0 estimate and move
// the state one step from t to t_next. Noise is drawn on the CPU from the run's generator and then moved to the
// state's device, so a seed gives the same samples on every device.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/nn/schedule.hpp>

namespace rudder {

// Draws standard normal / uniform noise of `sizes` on the CPU with `gen`, then moves it to `like`'s device.
at::Tensor randn_like_device(const std::vector<int64_t>& sizes, at::Generator& gen, const at::Tensor& like);
at::Tensor rand_like_device(const std::vector<int64_t>& sizes, at::Generator& gen, const at::Tensor& like);

// Continuous family: DDPM ancestral steps and DDIM (eta = 0 is the deterministic probability-flow ODE, the same
// update CDCD's Euler sampler makes in sigma-parameterisation; eta = 1 has DDPM's variance), over `steps`
// training timesteps evenly respaced from T down to 1. `noise_scale` multiplies the noise each stochastic step
// adds (1 samples the model's reverse process; below 1 trades diversity for fluency, as a temperature does).
class ContinuousSampler {
public:
    enum class Kind { ddpm, ddim };
    ContinuousSampler(const GaussianSchedule& schedule, Kind kind, int64_t steps, double eta = 0.0,
                      double noise_scale = 1.0);

    int64_t steps() const { return static_cast<int64_t>(timesteps_.size()); }
    // Training timestep of the state before reverse step i (i = 0 is the noisiest, timesteps are decreasing).
    int64_t timestep(int64_t i) const { return timesteps_.at(static_cast<size_t>(i)); }
    double t(int64_t i) const;       // timestep(i) / T
    double t_next(int64_t i) const;  // time after step i (0 after the last step)

    // x_T ~ N(0, I) with the given shape.
    at::Tensor init(const std::vector<int64_t>& sizes, at::Generator& gen, const at::Tensor& like) const;

    struct Result {
        at::Tensor mean;    // the posterior mean of x_{t_next} given x_t and x0_hat
        double sigma = 0;   // its standard deviation (0 for DDIM eta = 0 and for the last step)
        at::Tensor sample;  // mean + noise_scale * sigma * noise
    };
    Result step(const at::Tensor& x_t, const at::Tensor& x0_hat, int64_t i, at::Generator& gen) const;

    // x_t = sqrt(ab) x0 + sqrt(1 - ab) noise at training timestep k (used to re-noise fixed positions).
    at::Tensor q_sample(const at::Tensor& x0, int64_t k, at::Generator& gen) const;

private:
    GaussianSchedule schedule_;
    Kind kind_;
    double eta_;
    double noise_scale_;
    std::vector<int64_t> timesteps_;  // decreasing, length = steps
};

// Discrete (absorbing) family. Every sampler unmasks positions using the clean-token distribution p0 at masked
// positions; committed (unmasked) tokens never change.
//   euler:         first-order step of the reverse rates, P(unmask at this step) = (t - s) * sigma(t) e^{-sbar(t)} /
//                  (1 - e^{-sbar(t)}), clipped to [0, 1];
//   analytic:      Tweedie tau-leaping, exact for absorbing diffusion: P(unmask) = (m(t) - m(s)) / m(t), m = mask_prob.
//                  The last step (t_next = 0) unmasks every remaining position.
//   first_hitting: one step per position (steps = L): each step unmasks exactly one masked position per sequence,
//                  chosen uniformly (with block_length, among those of the block holding the sequence's leftmost
//                  masked position: blocks left to right, as BD3-LM samples). Under absorbing noise every masked
//                  position unmasks at an independent time, so the next one to unmask is uniform among them; walking
//                  from one unmasking to the next instead of through a fixed time grid skips the steps where nothing
//                  happens and never unmasks two positions from one network call (Zheng et al. 2024, "Masked diffusion
//                  models are secretly time-agnostic masked models"). With a network that does not read t (the bundled
//                  ones) it samples the model's distribution exactly; its times t(i) are where the schedule expects the
//                  masked share 1 - i/L.
//   analytic with remasking (ReMDM; Wang et al. 2025, "Remasking discrete diffusion models with inference-time
//                  scaling"): committed tokens are masked again with probability sigma(i) per step, and masked
//                  positions unmask with (a(s) - (1 - sigma) a(t)) / (1 - a(t)), a = 1 - m, so the share masked after
//                  each step is still m(s) and a step's draws see the other positions' later tokens. It lets an early
//                  choice be revised (by the model, and by guidance when the position is drawn again). The last step
//                  (s = 0) remasks nothing and unmasks everything.
//   confidence:    LLaDA's low-confidence remasking and Dream's orders (Nie et al. 2025, "Large Language Diffusion
//                  Models"; Ye et al. 2025, "Dream 7B"): every step draws a token at each masked position of the
//                  current block, keeps the ceil(m / r) of them the model is most confident in (m masked in the
//                  block, r steps left for it) and leaves the rest masked. Blocks of block_length positions are
//                  decoded left to right (semi-autoregressive), the steps shared evenly among them. Not a sampler
//                  of the model's distribution: it trades diversity for fluency, as those models are used.
// Thrown when a row that must be sampled has nothing to sample: its distribution holds NaN, or gives every token
// zero probability. `row` is the row of the scores given to DiscreteSampler::draw; the caller, which knows which
// position that is and where the distribution came from, names the cause.
class NothingToSample : public std::runtime_error {
public:
    explicit NothingToSample(int64_t row)
        : std::runtime_error("no token can be sampled at row " + std::to_string(row)), row(row) {}
    int64_t row;
};

// Keeps in each sequence the `count` (int64 [B]) positions of `drawn` (bool [B, L]) with the highest `score` (float
// [B, L]), the leftmost among equal scores. bool [B, L].
at::Tensor keep_highest(const at::Tensor& drawn, const at::Tensor& score, const at::Tensor& count);

// ReMDM's remasking probability sigma(i) at step i from t to s: at most sigma_max = min(1, m(s) / (1 - m(t)));
// cap: min(eta, sigma_max); rescale: eta * sigma_max; 0 outside from_t >= t >= to_t.
struct DiscreteRemasking {
    enum class Strategy { none, cap, rescale } strategy = Strategy::none;
    double eta = 0.0, from_t = 1.0, to_t = 0.0;
};

class DiscreteSampler {
public:
    enum class Kind { euler, analytic, first_hitting, confidence };
    // Which drawn tokens `confidence` keeps first: the most probable, the largest gap between the two most probable
    // tokens of the position, or the position whose distribution has the least entropy.
    enum class Order { probability, margin, entropy };
    using Remasking = DiscreteRemasking;
    // `steps`: the time grid's steps (euler, analytic, confidence); first_hitting takes the sequence length.
    // `block_length` (confidence, first_hitting; 0: the whole sequence is one block), `order` (confidence),
    // `remasking` (analytic).
    DiscreteSampler(const MaskSchedule& schedule, Kind kind, int64_t steps, int64_t block_length = 0,
                    Order order = Order::probability, Remasking remasking = {});
    Kind kind() const { return kind_; }
    bool remasks() const { return remasking_.strategy != Remasking::Strategy::none; }

    int64_t steps() const { return steps_; }
    double t(int64_t i) const;       // euler, analytic: 1 - i / steps; first_hitting: m^-1(1 - i / steps), at most 1
    double t_next(int64_t i) const;  // t(i + 1) (0 after the last)

    // All positions masked.
    at::Tensor init(int64_t batch, int64_t len, int64_t mask_id, const at::Device& device) const;

    // Which positions step i unmasks, bool [B, L], given `masked` (bool [B, L]): euler and analytic each masked
    // position independently with unmask_prob(i) (one uniform draw per position); first_hitting one masked position
    // per sequence, uniformly (none in a sequence with none masked; with block_length, within the block of its leftmost
    // masked position). Draws the same numbers whatever is masked.
    // confidence: the masked positions of step i's block, where a token is drawn (keep_most_confident says which
    // stay); draws nothing.
    at::Tensor choose(const at::Tensor& masked, int64_t i, at::Generator& gen) const;

    // confidence: the blocks of a sequence of `length` positions, and step i's block [begin, end) with the steps
    // left for it, step i included. Throws std::invalid_argument when there are fewer steps than blocks.
    int64_t blocks(int64_t length) const { return block_count(length, block_length_); }
    // The blocks of `block_length` positions (0: one block) a sequence of `length` positions splits into.
    static int64_t block_count(int64_t length, int64_t block_length);
    struct Block {
        int64_t begin = 0, end = 0, steps_left = 1;
    };
    Block block_of(int64_t i, int64_t length) const;

    // confidence: which of the step's `drawn` positions (bool [B, L]) are kept, bool [B, L]: in each sequence the
    // ceil(m / steps_left) with the highest `confidence` (float [B, L]), m its drawn positions (all of them when
    // fewer are left). Ties go to the leftmost position.
    static at::Tensor keep_most_confident(const at::Tensor& drawn, const at::Tensor& confidence, int64_t steps_left);
    // confidence, step i: of the rows drawn (flat `positions` [n] over [batch, length], ascending, their `scores`
    // [n, V] and drawn `tokens` [n]), the indices of those kept (int64 [m], ascending): keep_most_confident.
    at::Tensor kept_rows(const at::Tensor& positions, const at::Tensor& scores, const at::Tensor& tokens, int64_t batch,
                         int64_t length, int64_t i) const;
    // The confidence of each row's draw under the sampler's order: `scores` [n, V] (controlled, at the temperature;
    // -inf where not drawable), `tokens` int64 [n] the drawn tokens. float32 [n], higher = more confident.
    at::Tensor confidence(const at::Tensor& scores, const at::Tensor& tokens) const;

    // Keeps each row's `top_k` highest scores (0: all) and the smallest set of highest scores whose probabilities
    // (softmax of the row) sum to at least `top_p` (1: all); the rest become -inf. The row's best token is always
    // kept. `scores` [n, V] float, changed in place.
    static void truncate(at::Tensor& scores, int64_t top_k, double top_p);

    // One token per row of `scores` [n, V]: log-probabilities up to a constant per row, -inf for tokens that may not
    // be drawn. Gumbel-max in float64: float32 Gumbel noise is cut off at about 16, which at large vocabularies
    // measurably under-samples the tail (Zheng et al. 2024). Returns int64 [n]; throws NothingToSample.
    static at::Tensor draw(const at::Tensor& scores, at::Generator& gen);
    // Temperature 0: the arg-max of each row of `scores` [n, V] (the lowest id among equal maxima, as torch.argmax).
    // Returns int64 [n]; throws NothingToSample for a row with no finite score.
    static at::Tensor arg_max(const at::Tensor& scores);

    // choose + draw (+ keep_most_confident, + remask): one step on `logp0` [B, L, V] (the mask token must be -inf
    // there, or it may be drawn). For tests and simple loops; the generator calls the parts itself so that it scores
    // only the rows it draws.
    at::Tensor step(const at::Tensor& tokens, const at::Tensor& logp0, int64_t i, int64_t mask_id,
                    at::Generator& gen) const;

    // Probability that a masked position is unmasked during step i (euler, analytic; with remasking, ReMDM's).
    double unmask_prob(int64_t i) const;
    // Probability that a committed token is masked again during step i (sigma(i); 0 without remasking).
    double remask_prob(int64_t i) const;
    // Which of the `committed` positions (bool [B, L]: unmasked and free to change) step i masks again, bool [B, L]:
    // each with remask_prob(i), one uniform per position drawn only on steps where that is above 0.
    at::Tensor remask(const at::Tensor& committed, int64_t i, at::Generator& gen) const;

private:
    MaskSchedule schedule_;
    Kind kind_;
    int64_t steps_;
    int64_t block_length_;
    Order order_;
    Remasking remasking_;
};

// Discrete family with uniform noise (SEDD's uniform graph, nn/score_entropy.hpp): every position holds a token at
// all times and any token may change at any step, so a step draws every position anew. Steps run on t(i) = 1 - i /
// steps with the model's geometric noise; the last one goes to sigma_bar = 0, the clean data.
//   analytic: Tweedie tau-leaping, exact for one position given the clean-token distribution
//             (nn::uniform_tweedie_probs);
//   euler:    the first-order step of the reverse rates (nn::uniform_euler_probs).
class UniformSampler {
public:
    enum class Kind { euler, analytic };
    UniformSampler(const UniformNoiseSchedule& schedule, Kind kind, int64_t steps);

    int64_t steps() const { return steps_; }
    double t(int64_t i) const;       // 1 - i / steps
    double t_next(int64_t i) const;  // t(i + 1) (0 after the last)

    // x_1: every token uniform over the vocabulary (the noise's stationary distribution), drawn on the CPU from `gen`.
    at::Tensor init(int64_t batch, int64_t len, int64_t vocab_size, at::Generator& gen, const at::Device& device) const;

    // Log-probabilities of x_s [n, V] (float64; -inf where impossible) for rows at tokens `x_t` (int64 [n]), step i,
    // from the denoiser's clean-token posterior `log_post` [n, V] (given all of x_t): turned into the distribution
    // given the other positions (nn::uniform_rest_from_posterior), which the step is written with, and shaped by
    // `temperature` (0: certain of its arg-max), `top_k` and `top_p` (DiscreteSampler::truncate) as the model's
    // prediction.
    at::Tensor step_log_probs(const at::Tensor& log_post, const at::Tensor& x_t, int64_t i, double temperature = 1.0,
                              int64_t top_k = 0, double top_p = 1.0) const;

private:
    UniformNoiseSchedule schedule_;
    Kind kind_;
    int64_t steps_;
};

}  // namespace rudder
