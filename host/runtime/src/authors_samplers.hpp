// The public masked diffusion LMs' own samplers, step for step as their authors' code takes them, so that a script
// moved onto Rudder writes the same tokens (docs/checkpoints.md, "The authors' samplers"):
//   llada: LLaDA's generate() (ML-GSAI/LLaDA, generate.py; Nie et al. 2025): the part after the prompt in blocks of
//          block_length, steps / blocks steps each; every step commits a precomputed number of the block's masked
//          positions (the block's masked count split evenly over its steps, the remainder to the first), those with
//          the highest confidence: the untempered probability of the drawn token ("low_confidence") or a uniform
//          number ("random"). Temperature 0 is the arg-max; above it Gumbel-max at the temperature.
//          With Fast-dLLM's parallel decoding (NVlabs/Fast-dLLM, llada/generate.py; Wu et al. 2025) a step commits
//          instead the most confident position and every other whose confidence reaches `threshold`, or (`factor`)
//          the n most confident while the n-th reaches 1 - factor / (n + 1); a block then takes as many steps as it
//          needs, and the run ends when no position is masked.
//   dream: Dream's diffusion_generate() (Dream-org/Dream-v0-Base-7B, generation_utils.py; Ye et al. 2025): times
//          linspace(1, eps, steps + 1); "origin" commits each masked position with probability 1 - s / t (every one at
//          the last step); the other algs commit int(m (1 - s / t)) of the m masked (all at the last step), chosen by
//          the drawn token's probability (maskgit_plus), the gap between the two most probable tokens (topk_margin)
//          or the negative entropy (entropy), or drawn in proportion to softmax(confidence / alg_temp). Tokens are
//          drawn from the distribution at the temperature, top_p then top_k applied, as Dream does.
//          With Fast-dLLM's block decoding (NVlabs/Fast-dLLM, dream/model/generation_utils_block.py: a block_length,
//          a threshold or a key/value cache), the part after the prompt goes in blocks of block_length (default: one):
//          a block's first call commits its first position alone (the draw there); then each step commits as above
//          over the block's masked positions, with times linspace(1, eps, steps / blocks + 1) from the second and the
//          entropy order (as that code fixes it), or with `threshold` the most probable draw and every other whose
//          probability reaches it, until the block is done.
//   mdlm:  MDLM's _sample() with its default predictor, ddpm_cache (kuleshov-group/mdlm, diffusion.py; Sahoo et al.
//          2024): times linspace(1, eps, steps + 1) in float32, dt = (1 - eps) / steps; the step from t draws a token
//          at every position by Gumbel-max over q = p0 (t - s) with the mask's entry s = t - dt (a masked position
//          stays masked with probability s / t), from a float32 uniform per position and row of the whole grid, as
//          its _sample_categorical draws them; with noise_removal a last call at t = eps commits the arg-max where
//          still masked.
//   sedd:  SEDD's pc_sampler (louaaron/Score-Entropy-Discrete-Diffusion, sampling.py; Lou et al. 2024) on its absorbing
//          graph: times linspace(1, eps, steps + 1), dt = (1 - eps) / steps; the step from t draws at every position by
//          Gumbel-max over the predictor's probabilities, at a masked position c s_y for each token y and 1 - c S for
//          the mask (s the network's score, S its sum over y; euler: c = dt sigma'(t), analytic: c = e^dsigma - 1 with
//          dsigma = sigma(t) - sigma(t - dt)), a float32 uniform per position and row of the grid; its noise removal
//          (the Denoiser step at t = eps) draws each still-masked position from the score over every row but the
//          mask, by Gumbel-max over the grid less the mask's column.
//   bd3lm: BD3-LM's _semi_ar_sampler with first hitting (kuleshov-group/bd3lms, diffusion.py; Arriola et al. 2025), as
//          its scripts run it, one sequence a batch: block by block, left to right; each step draws a token at every
//          position of the block by Gumbel-max over the float64 clean-token probabilities after its nucleus (the most
//          probable tokens while their cumulative probability stays within top_p, the first always; renormalised),
//          from a float64 uniform per position and row of the block, then commits the one masked position of the
//          block that torch.randint(0, masked) picks, in position order. A block ending past position 256 whose last
//          256 tokens hold less than 4 nats of entropy starts the sequence again (its _check_stop_conds); the 10th
//          such start is a failure (its 'Sampling failed.').
// They take the softmax over every row the network has (DenoiserOutput::outside), and a draw of the mask token leaves
// the position masked, as it does in the authors' code (a draw of a row past the tokenizer too, which is no text).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rudder {

// The full rows of the drawn positions: `scores` [n, V] (the controlled log-probabilities over the vocabulary, the
// mask's column impossible) with `outside` [n, 1 + R] (DenoiserOutput::outside) as log-probabilities over the
// network's V + R rows, column = network id (the mask's column from `outside`). float32 [n, V + R].
at::Tensor full_rows(const at::Tensor& scores, const at::Tensor& outside, int64_t mask_id);

// Fast-dLLM's parallel decoding: none (LLaDA's commits per step), threshold or factor.
struct ParallelDecoding {
    enum class Rule { none, threshold, factor } rule = Rule::none;
    double value = 0.0;
};

// How many of each sequence's `drawn` (bool [B, L]) a step of parallel decoding commits given their `confidence`
// (float [B, L]): threshold: max(1, those reaching it); factor: Fast-dLLM's rule (see the .cpp). int64 [B].
at::Tensor parallel_commits(const ParallelDecoding& parallel, const at::Tensor& drawn, const at::Tensor& confidence);

// The blocks of `block_length` positions after a prompt (0: one block; the last may be shorter), as LLaDA's generate()
// and Fast-dLLM's Dream code lay them out. Unknown until the first step has fixed the prompt.
struct PromptBlocks {
    int64_t prompt = -1, length = 0, size = 0, count = 1;
    bool known() const { return prompt >= 0; }
    // Throws std::invalid_argument naming `sampler` when no position follows the prompt.
    void lay_out(int64_t prompt, int64_t length, int64_t block_length, const std::string& sampler);
    std::pair<int64_t, int64_t> range(int64_t b) const;  // block b's positions [begin, end)
    // The first block from `from` on with a position of `masked` (bool [B, L]); `count` when none has.
    int64_t first_unfinished(int64_t from, const at::Tensor& masked) const;
};

class LladaSampler {
public:
    enum class Remasking { low_confidence, random };
    using Parallel = ParallelDecoding;
    // `steps`, `block_length` (0: the generated part is one block) as LLaDA's generate() takes them; `temperature` 0
    // is the arg-max. With parallel decoding `steps` is the loop's bound (the room gives max_length: one position a
    // step), which stops once nothing is masked.
    LladaSampler(int64_t steps, int64_t block_length, Remasking remasking, double temperature, Parallel parallel = {});

    int64_t steps() const { return steps_; }
    bool dynamic() const { return parallel_.rule != Parallel::Rule::none; }
    double t(int64_t i) const { return 1.0 - static_cast<double>(i) / static_cast<double>(steps_); }
    double t_next(int64_t i) const { return i + 1 >= steps_ ? 0.0 : t(i + 1); }

    // Whether the prompt is known: it is set at the first step that draws, after the controllers fixed their tokens.
    bool started() const { return blocks_.known(); }
    // The prompt is the first `prompt` positions of sequences of `length`; throws std::invalid_argument (with LLaDA's
    // numbers) when the steps cannot be shared among the blocks.
    void start(int64_t prompt, int64_t length);
    // Step i's block [begin, end) of positions.
    std::pair<int64_t, int64_t> block(int64_t i) const;
    // Whether step i is its block's first (its schedule is made there, from the block's masked positions then).
    bool first_of_block(int64_t i) const;
    // Parallel decoding: moves on to the first block (from the current one on) that still has a masked position
    // among `masked` (bool [B, L]); false when none has (the run is finished).
    bool advance(const at::Tensor& masked);
    // Parallel decoding: how many of each sequence's `drawn` (bool [B, L]) to commit given their `confidence` (float
    // [B, L]): threshold: max(1, those reaching it); factor: Fast-dLLM's rule (see the .cpp). int64 [B].
    at::Tensor parallel_count(const at::Tensor& drawn, const at::Tensor& confidence) const;
    // At step i, its block's first: each sequence's commits per step of the block (int64 [B, steps of the block])
    // from its masked count in the block `masked` (int64 [B]), as LLaDA's get_num_transfer_tokens.
    at::Tensor schedule(const at::Tensor& masked, int64_t i) const;
    // The index of step i within its block.
    int64_t step_in_block(int64_t i) const;

    // Draws a token at each row of `full` [n, V + R] (full_rows): the arg-max at temperature 0, Gumbel-max at the
    // temperature otherwise.
    at::Tensor draw(const at::Tensor& full, at::Generator& gen) const;
    // The confidence of each row's draw: low_confidence the untempered probability of `tokens` under `full`; random a
    // uniform number per position, drawn for all `batch` x `length` positions as LLaDA draws them (`positions` the
    // rows' flat positions).
    at::Tensor confidence(const at::Tensor& full, const at::Tensor& tokens, const at::Tensor& positions, int64_t batch,
                          int64_t length, at::Generator& gen) const;

private:
    int64_t steps_, block_length_;
    Remasking remasking_;
    double temperature_;
    Parallel parallel_;
    PromptBlocks blocks_;
    int64_t current_block_ = 0;  // parallel decoding
};

// Fast-dLLM's Dream block decoding (see above); off unless `on`.
struct DreamBlocks {
    bool on = false;
    int64_t block_length = 0;  // 0: the generated part is one block
    double threshold = 0.0;    // > 0: threshold decoding
};

class DreamSampler {
public:
    enum class Alg { origin, maskgit_plus, topk_margin, entropy };
    // With block decoding and a threshold, `steps` is the loop's bound (the room gives max_length).
    DreamSampler(int64_t steps, double eps, Alg alg, double alg_temp, double temperature, int64_t top_k, double top_p,
                 DreamBlocks blocks = {});

    int64_t steps() const { return steps_; }
    Alg alg() const { return alg_; }

    // Block decoding (DreamBlocks): as LladaSampler's, the prompt known at the first step.
    bool blocks_on() const { return blocks_.on; }
    bool dynamic() const { return blocks_.threshold > 0; }
    bool started() const { return layout_.known(); }
    void start(int64_t prompt, int64_t length);
    std::pair<int64_t, int64_t> block(int64_t i) const;
    bool advance(const at::Tensor& masked);  // threshold: on to the first block with a masked position
    // Whether step i opens its block (its call commits the block's first position alone); with a threshold, the first
    // call since advance moved on, which this consumes.
    bool opens_block(int64_t i);
    // Block decoding without a threshold: how many of each sequence's `masked` (int64 [B], in the block) step i
    // commits: int(m (1 - s / t)) on the block's times, all at its last step.
    at::Tensor block_commits(const at::Tensor& masked, int64_t i) const;
    // Block decoding with a threshold: the most probable draw and every other reaching the threshold, of `drawn` (bool
    // [B, L]) with their `confidence` (float [B, L]). int64 [B].
    at::Tensor threshold_commits(const at::Tensor& drawn, const at::Tensor& confidence) const;
    double t(int64_t i) const;       // Dream's timesteps (float32 linspace(1, eps, steps + 1))
    double t_next(int64_t i) const;  // t(i + 1) (the last is eps)

    // origin: which of the `masked` positions (bool [B, L]) step i commits: a float32 uniform per masked position in
    // order, below 1 - s / t (every one at the last step). The other algs commit by confidence (commits, keep).
    at::Tensor choose(const at::Tensor& masked, int64_t i, at::Generator& gen) const;
    // The rows' distribution as Dream samples it: `full` [n, V + R] at the temperature, top_p then top_k.
    at::Tensor shaped(at::Tensor full) const;
    // A token per row of `shaped` (the arg-max at temperature 0).
    at::Tensor draw(const at::Tensor& shaped, at::Generator& gen) const;
    // The rows' confidence under the alg (float32 [n]); in block decoding the order that code fixes (entropy, or the
    // drawn token's probability with a threshold).
    at::Tensor confidence(const at::Tensor& shaped, const at::Tensor& tokens) const;
    // How many of a sequence's `masked` (int64 [B]) step i commits: int(m (1 - s / t)) in float32, all at the last.
    at::Tensor commits(const at::Tensor& masked, int64_t i) const;
    // Which rows are committed, bool [B, L] over `drawn` (bool [B, L]) with their `confidence` (float [B, L]): the
    // `count` (int64 [B]) most confident, or drawn without replacement by softmax(confidence / alg_temp).
    at::Tensor keep(const at::Tensor& drawn, const at::Tensor& confidence, const at::Tensor& count,
                    at::Generator& gen) const;

private:
    at::Tensor confidence_as(Alg alg, const at::Tensor& shaped, const at::Tensor& tokens) const;
    int64_t steps_;
    at::Tensor times_;  // float32 [steps + 1]
    Alg alg_;
    double alg_temp_, temperature_;
    int64_t top_k_;
    double top_p_;
    DreamBlocks blocks_;
    PromptBlocks layout_;
    int64_t steps_per_block_ = 1;
    int64_t current_block_ = 0;
    bool opening_ = false;
    at::Tensor block_times_;  // float32 [steps per block + 1]
};

// Gumbel-max as MDLM and SEDD draw from unnormalised probabilities: argmax of q / (1e-10 - log(u + 1e-10)), in
// float32 (`q` [n, W], its uniforms `u` [n, W]). int64 [n].
at::Tensor gumbel_argmax(const at::Tensor& q, const at::Tensor& u);

// MDLM's and SEDD's time grid: times linspace(1, eps, steps + 1) in float32 and dt = (1 - eps) / steps; with the noise
// removal, one more call at t = eps (a step of Rudder's loop).
class NoiseRemovalGrid {
public:
    // Throws std::invalid_argument naming `sampler` for steps below 1 or eps outside (0, 1).
    NoiseRemovalGrid(int64_t steps, double eps, bool noise_removal, const std::string& sampler);

    int64_t steps() const { return steps_ + (noise_removal_ ? 1 : 0); }  // the noise removal's call a step
    double t(int64_t i) const;                                           // times[i] (the noise removal's: eps)
    double t_next(int64_t i) const;                                      // times[i + 1]; 0 after the last
    bool removes_noise(int64_t i) const { return i >= steps_; }
    float time(int64_t i) const;  // times[i] as the float32 the authors compute with
    float dt() const { return dt_; }

private:
    int64_t steps_;
    bool noise_removal_;
    std::vector<float> times_;  // float32 linspace(1, eps, steps + 1), as torch.linspace makes it
    float dt_;                  // (1 - eps) / steps, as the float32 the authors' t - dt subtracts
};

class MdlmSampler {
public:
    MdlmSampler(int64_t steps, double eps, bool noise_removal) : grid_(steps, eps, noise_removal, "mdlm") {}
    const NoiseRemovalGrid& grid() const { return grid_; }

    // Step i's uniforms: one per position and row of the [batch, length, columns] grid, float32, drawn whatever is
    // masked (a step where nothing is still draws them, as the authors' loop does). CPU.
    at::Tensor uniforms(int64_t batch, int64_t length, int64_t columns, at::Generator& gen) const;
    // Step i's draw at rows whose clean-token probabilities are `probs` [n, W] (W the grid's columns, the mask's
    // column `mask_column`) with their uniforms `u` [n, W]: argmax of q / (1e-10 - log(u + 1e-10)), q = probs
    // (t - s) and s in the mask's column, in float32 as MDLM computes it. int64 [n]; the mask where the row stays
    // masked. The noise removal's: the arg-max of `probs`.
    at::Tensor draw(const at::Tensor& probs, const at::Tensor& u, int64_t mask_column, int64_t i) const;

private:
    NoiseRemovalGrid grid_;
};

class SeddSampler {
public:
    enum class Predictor { euler, analytic };
    SeddSampler(int64_t steps, double eps, Predictor predictor, bool noise_removal)
        : grid_(steps, eps, noise_removal, "sedd"), predictor_(predictor) {}
    const NoiseRemovalGrid& grid() const { return grid_; }

    // Step i's uniforms, float32 [batch * length, columns], drawn whatever is masked: the grid of the network's rows
    // at a step, less the mask's column at the noise removal (SEDD truncates it). CPU.
    at::Tensor uniforms(int64_t batch, int64_t length, int64_t rows, int64_t i, at::Generator& gen) const;
    // Step i's draw at masked rows: `log_p0` [n, V] the (controlled) clean-token log-probabilities, `log_total` [n]
    // the log of each row's total unmasking score, `u` the rows' uniforms, the mask's column `mask_column` (SEDD's
    // last). int64 [n]; the mask where the row stays masked.
    at::Tensor draw(const at::Tensor& log_p0, const at::Tensor& log_total, const at::Tensor& u, int64_t mask_column,
                    int64_t i) const;

private:
    NoiseRemovalGrid grid_;
    Predictor predictor_;
};

class Bd3lmSampler {
public:
    // `length` the sequence's positions, `block` the model's block size.
    Bd3lmSampler(int64_t length, int64_t block, double top_p, double temperature);

    // The loop's bound: a position a step, for every start a sequence may take.
    int64_t steps() const { return length_ * kStarts; }
    // The share of one pass's steps left (controllers read it; the network does not: BD3-LM's checkpoints are not
    // time-conditioned).
    double t(int64_t i) const;
    double t_next(int64_t i) const { return t(i + 1); }
    int64_t block() const { return block_; }

    // A step's uniforms: float64 [batch, block, columns] (CPU), as torch.rand_like over BD3-LM's block of
    // probabilities.
    at::Tensor uniforms(int64_t batch, int64_t columns, at::Generator& gen) const;
    // Which of a block's `masked` positions (in order) a sequence commits: torch.randint(0, masked, (1,)).
    int64_t pick(int64_t masked, at::Generator& gen) const;
    // The tokens drawn at rows of log-probabilities `full` [n, W] over every row the network has, with their
    // uniforms `u` [n, W]: Gumbel-max over the nucleus of exp(full) in float64 (temperature 0: its arg-max). int64 [n].
    at::Tensor draw(const at::Tensor& full, const at::Tensor& u) const;
    // Whether a sequence whose first `end` tokens are `tokens` (int64 [end]) starts again: past 256, less than 4 nats
    // of entropy in the last 256.
    static bool low_entropy(const at::Tensor& tokens);
    static constexpr int64_t kStarts = 10;

private:
    int64_t length_, block_;
    double top_p_, temperature_;
};

}  // namespace rudder
