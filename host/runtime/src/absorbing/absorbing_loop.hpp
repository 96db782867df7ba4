// One batch's reverse loop of absorbing (masked) diffusion: positions start masked and unmask once (unless a sampler
// remasks). The loop owns what every sampler shares (absorbing_sampler.hpp): the network's calls (MDLM's cache that
// skips the network while no token changed; Fast-dLLM's key/value caches), prompt guidance, the controllers'
// PREDICT and COMMIT phases, remasking's bookkeeping and the particles chosen at the end. Its public part below is
// what the samplers' draws are written with: the shared draw pipeline.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "../commit.hpp"
#include "../composer.hpp"
#include "../particles.hpp"
#include "../sampler.hpp"
#include "absorbing_sampler.hpp"

namespace rudder::absorbing {

class AbsorbingLoop {
public:
    AbsorbingLoop(const AbsorbingSampler& sampler, ReverseRun& run, int64_t samples);
    // The batch's tokens [samples, max_length].
    at::Tensor run();

    // What the samplers read: the run, the batch's shape and the common settings.
    ReverseRun& reverse() const { return run_; }
    at::Generator& gen() const { return run_.gen; }
    int64_t batch() const { return batch_; }
    int64_t length() const { return L_; }
    int64_t vocab_size() const { return V_; }
    int64_t mask_id() const { return mask_id_; }
    const CommonSettings& settings() const { return s_; }
    // The tokens as they stand [B, L]; a sampler that writes them (a sequence starting again) calls changed().
    at::Tensor& tokens() { return tokens_; }
    const at::Tensor& tokens() const { return tokens_; }
    void changed() { stale_ = true; }
    // sedd: the log of each position's total unmasking score [B * L] (DenoiserOutput::log_score_total).
    const at::Tensor& score_total() const { return score_total_; }
    // The columns of the grid of every row the network has (mdlm, sedd, bd3lm draw over it); 0 before its first call.
    int64_t grid_columns() const {
        return !logits_.defined() ? 0 : outside_.defined() ? V_ + outside_.size(1) - 1 : logits_.size(1);
    }

    // The draw pipeline. The rows of the step's `unmask` positions (bool [B, L]) among the combination's, their flat
    // positions and the controlled scores there ([n, V]); none when no position of the combination unmasks.
    struct DrawRows {
        at::Tensor drawn_at_row, positions, scores;
    };
    std::optional<DrawRows> rows_to_draw(const at::Tensor& unmask, const Combined& combined,
                                         const at::Tensor& row_logits) const;
    // The scores at the temperature (unchanged at 0, the arg-max, and at 1), in place.
    void temper(at::Tensor& scores) const;
    // The scores truncated to the recipe's top_k and top_p, in place (nothing when neither truncates).
    void truncate(at::Tensor& scores) const;
    // A token per row of `scores` at `positions`: the arg-max with `arg_max`, else a draw; a row with nothing to
    // draw is the run's fault at step i (fault_if_empty).
    at::Tensor draw_rows(int64_t i, const at::Tensor& scores, const at::Tensor& positions, bool arg_max) const;
    // The log-probabilities over every row the network has (full_rows) of `scores` [n, V] at `positions`, rows
    // `drawn_at_row` of the combination. A row a hard constraint restricts (tokens forbidden, or one fixed) draws
    // only among the tokens it leaves: the network's rows outside the vocabulary (the mask's, the padding's) would
    // leave the position masked, outside the constraint.
    at::Tensor every_network_row(const at::Tensor& scores, const at::Tensor& positions, const at::Tensor& drawn_at_row,
                                 const Combined& combined) const;
    // `pick()`'s rows drawn; a row with nothing to draw (NothingToSample) is the run's fault at step i, at its position
    // of `at_positions`.
    template <class Pick>
    at::Tensor fault_if_empty(int64_t i, const at::Tensor& at_positions, const Pick& pick) const {
        try {
            return pick();
        } catch (const NothingToSample& e) {
            throw fault_at(i, at_positions, e.row);
        }
    }
    // Gumbel-max takes an arg-max whatever a row holds: a row of `scores` with no token left (NaN, or every one
    // forbidden) is the run's fault at step i, reported as DiscreteSampler::draw reports it.
    void fault_if_any_empty(int64_t i, const at::Tensor& positions, const at::Tensor& scores) const;
    // Commits the `drawn` tokens at `positions` through the COMMIT controllers (commit.hpp), which see the tokens with
    // the rows not committed yet still masked; `redraw` draws a refused row again within what they allow.
    void commit_rows(int64_t i, const at::Tensor& positions, const at::Tensor& drawn, const Redraw& redraw);
    // Commits the `tokens` drawn at `positions` from the controlled `scores` (a row each), as commit_rows does; a draw
    // of the mask (or of a row past the tokenizer) leaves its position masked, and a row a COMMIT controller refuses
    // is drawn again from its scores within what it allows (the arg-max with `arg_max`).
    void commit_draws(int64_t i, const at::Tensor& positions, const at::Tensor& tokens, const at::Tensor& scores,
                      bool arg_max);

private:
    GenerationFault fault_at(int64_t i, const at::Tensor& at_positions, int64_t row) const;
    void step(int64_t i);
    void denoise(double t, const Combined& constraints);
    void call_denoiser(double t, const Combined& constraints);
    // The current best guess: committed tokens, and the network's most likely token where still masked.
    at::Tensor best_guess() const;

    const CommonSettings& s_;
    ReverseRun& run_;
    // Each sample is `particles_` sequences, particle j of sample s at row s * particles_ + j; the one whose reward
    // (the steering controllers' weighted log p(c | x) at the last step they scored) is highest is the sample.
    const int64_t particles_, batch_, L_, V_, mask_id_;
    at::Tensor tokens_;
    std::unique_ptr<Unmasking> unmasking_;
    // Fast-dLLM's key/value cache: the run's decoder (which holds the cache), the block it was refreshed for (-1: none
    // yet), and whether a window runs to the end of the sequence (prefix) or to the block's end (dual).
    std::unique_ptr<WindowDecoder> kv_;
    const bool kv_prefix_;
    int64_t cached_block_ = -1;
    int64_t step_ = 0;  // the step being taken
    const bool always_fresh_;
    // A denoiser that conditions on the constraints takes them whole: the controllers then see every position.
    const bool every_row_;
    Particles swarm_;
    at::Tensor logits_, logp_;  // the network's scores for `tokens_` [B * L, V], and their log-softmax once needed
    at::Tensor outside_;        // the network's rows outside the vocabulary [B * L, 1 + R] (DenoiserOutput::outside)
    at::Tensor score_total_;    // sedd: the log of each position's total unmasking score [B * L]
    Combined seen_;             // the constraints the denoiser's last call was given
    bool stale_ = true;
    // Prompt guidance (LLaDA's unsupervised classifier-free guidance): the positions hard constraints have fixed are
    // the prompt; the unconditional pass sees them masked again, without the constraints as evidence.
    at::Tensor prompt_;
    at::Tensor pinned_;  // remasking: the positions a controller fixed
};

}  // namespace rudder::absorbing
