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
// Both take the softmax over every row the network has (DenoiserOutput::outside), and a draw of the mask token leaves
// the position masked, as it does in the authors' code (a draw of a row past the tokenizer too, which is no text).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

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

class LladaSampler {
public:
    enum class Remasking { low_confidence, random };
    using Parallel = ParallelDecoding;
    // `steps`, `block_length` (0: the generated part is one block) as LLaDA's generate() takes them; `temperature` 0
    // is the arg-max. With parallel decoding `steps` is not used: a run takes at most `length` steps.
    LladaSampler(int64_t steps, int64_t block_length, Remasking remasking, double temperature, Parallel parallel = {},
                 int64_t length = 0);

    // The steps the loop runs: with parallel decoding an upper bound (one position per step), the loop stopping once
    // nothing is masked (finished).
    int64_t steps() const { return dynamic() ? max_steps_ : steps_; }
    bool dynamic() const { return parallel_.rule != Parallel::Rule::none; }
    double t(int64_t i) const { return 1.0 - static_cast<double>(i) / static_cast<double>(steps_); }
    double t_next(int64_t i) const { return i + 1 >= steps_ ? 0.0 : t(i + 1); }

    // Whether the prompt is known: it is set at the first step that draws, after the controllers fixed their tokens.
    bool started() const { return prompt_ >= 0; }
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
    int64_t max_steps_;
    int64_t prompt_ = -1, blocks_ = 1, block_size_ = 0, length_ = 0;
    int64_t current_block_ = 0;  // parallel decoding
};

class DreamSampler {
public:
    enum class Alg { origin, maskgit_plus, topk_margin, entropy };
    DreamSampler(int64_t steps, double eps, Alg alg, double alg_temp, double temperature, int64_t top_k, double top_p);

    int64_t steps() const { return steps_; }
    Alg alg() const { return alg_; }
    double t(int64_t i) const;       // Dream's timesteps (float32 linspace(1, eps, steps + 1))
    double t_next(int64_t i) const;  // t(i + 1) (the last is eps)

    // origin: which of the `masked` positions (bool [B, L]) step i commits: a float32 uniform per masked position in
    // order, below 1 - s / t (every one at the last step). The other algs commit by confidence (commits, keep).
    at::Tensor choose(const at::Tensor& masked, int64_t i, at::Generator& gen) const;
    // The rows' distribution as Dream samples it: `full` [n, V + R] at the temperature, top_p then top_k.
    at::Tensor shaped(at::Tensor full) const;
    // A token per row of `shaped` (the arg-max at temperature 0).
    at::Tensor draw(const at::Tensor& shaped, at::Generator& gen) const;
    // The rows' confidence under the alg (float32 [n]).
    at::Tensor confidence(const at::Tensor& shaped, const at::Tensor& tokens) const;
    // How many of a sequence's `masked` (int64 [B]) step i commits: int(m (1 - s / t)) in float32, all at the last.
    at::Tensor commits(const at::Tensor& masked, int64_t i) const;
    // Which rows are committed, bool [B, L] over `drawn` (bool [B, L]) with their `confidence` (float [B, L]): the
    // `count` (int64 [B]) most confident, or drawn without replacement by softmax(confidence / alg_temp).
    at::Tensor keep(const at::Tensor& drawn, const at::Tensor& confidence, const at::Tensor& count,
                    at::Generator& gen) const;

private:
    int64_t steps_;
    at::Tensor times_;  // float32 [steps + 1]
    Alg alg_;
    double alg_temp_, temperature_;
    int64_t top_k_;
    double top_p_;
};

}  // namespace rudder
