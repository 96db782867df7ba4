// MDLM's and SEDD's public checkpoints (nn/dit_checkpoint.hpp) as the Denoiser the reverse loop calls, and the
// model loader's seam for them. docs/checkpoints.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/runtime/denoiser.hpp>
#include <rudder/runtime/loaded_model.hpp>

namespace rudder {

// Discrete family. denoise() gives the clean-token log-probabilities (nn::DitNetwork::clean_log_probs) at the noise
// level sigma(t) of the checkpoint's log-linear schedule (MDLM-OWT, trained without time conditioning, ignores it).
// Absorbing (MDLM, SEDD, BD3-LM): the mask token is the last id (GPT-2's 50,257 tokens, then the mask). Uniform (DUO):
// the posterior given all of x_t from the network's x_theta (nn::uniform_posterior_from_rest), and
// traits().uniform_noise is the log-linear schedule. Unconditional: a condition is an error.
//
// BD3-LM (without time conditioning, as every released checkpoint) is run with its key/value cache of finished
// blocks: each row's current block is the one holding its first masked position; the blocks before it are finished
// (no mask), their keys and values are computed once and kept while the row's tokens there stay the same, and a call
// runs the network over the current block only. The current block's clean-token log-probabilities are the network's
// (equal to the uncached forward's); a finished position carries its token, as SUBS does; a masked position past the
// current block gets no prediction (uniform over the tokens): BD3-LM predicts a block only from finished ones, and
// its samplers draw there only once the blocks before it are finished. `block_cache` false runs the whole sequence
// at every call instead (the benchmark's baseline).
class DitCheckpointDenoiser final : public Denoiser {
public:
    explicit DitCheckpointDenoiser(std::shared_ptr<nn::DitNetwork> network, bool block_cache = true);
    ~DitCheckpointDenoiser() override;

    // Traits: discrete, the checkpoint's vocabulary and positions; reads_time for MDLM with time_conditioning, SEDD
    // and DUO; gives_score_total for SEDD; uniform_noise for UDLM and DUO (the log-linear schedule); decoding_block
    // BD3-LM's block_size.
    void to(const at::Device& device) override;
    // Per sample: a block's activations (residual, q/k/v, attention output, the 4H MLP layer and its activation),
    // the attention scores and their softmax, and the output with its log-softmax.
    uint64_t working_bytes(int64_t batch, int64_t length) const override;
    DenoiserOutput denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                           const Evidence& evidence = {}) override;

    const nn::DitNetwork& network() const { return *network_; }

    // Whether denoise() runs BD3-LM's cached path (a block-causal network without time conditioning).
    bool caches_blocks() const;

private:
    at::Tensor denoise_by_blocks(const at::Tensor& x);

    std::shared_ptr<nn::DitNetwork> network_;
    bool block_cache_ = true;
    // BD3-LM's cache, per batch row: the tokens of its finished positions [B, capacity] (CPU) and how many are
    // cached, and their keys and values [B, heads, capacity, head_dim] per network block. One run at a time.
    std::mutex cache_mutex_;
    at::Tensor cached_tokens_;
    std::vector<int64_t> cached_length_;
    nn::DitKeyValues cached_;
    std::array<at::Tensor, 2> output_buffers_;  // denoise_by_blocks' outputs, reused once the caller lets go
};

// Which tokenizer files a checkpoint's folder holds: tokenizer.json (by its model.type), GPT-2's vocab.json +
// merges.txt, BERT's vocab.txt, or none; and that in words, for `rudder models`.
enum class TokenizerFiles { none, bpe_json, bpe_pair, wordpiece_json, wordpiece_txt };
TokenizerFiles tokenizer_files(const std::filesystem::path& dir);
std::string describe_tokenizer_files(TokenizerFiles files);

// A model directory whose config.json is an MDLM, SEDD, BD3-LM, DUO or UDLM checkpoint's
// (nn::is_dit_checkpoint_config), with its tokenizer beside it: the discrete model of the network
// (DitCheckpointDenoiser) and, for the GPT-2-vocabulary ones, GPT-2's byte-level BPE (tokenizer.json, or vocab.json
// and merges.txt) with the checkpoint's last id as one token more (WithMaskToken: the mask, or DUO's "[PAD]"), a text
// ending at the first "<|endoftext|>" (the loop's padding token, so `length` works); for UDLM, bert-base-uncased's
// WordPiece (tokenizer.json or vocab.txt), "[PAD]" padding. A BD3-LM model recommends its authors' sampler: first
// hitting, block by block, nucleus 0.9. The config is checked first, then the tokenizer (a folder without one is
// refused before its weights are read), then the weights.
Model load_dit_checkpoint_model(const std::filesystem::path& dir, const nlohmann::json& config,
                                std::optional<Family> family);
// Its tokenizer alone, checked as the loader checks it (no weights are read).
std::shared_ptr<const Tokenizer> load_dit_checkpoint_tokenizer(const std::filesystem::path& dir,
                                                               const nlohmann::json& config);

// The sampler the checkpoint's authors use where it is not Rudder's default (BD3-LM's), as a recipe's "sampler"
// object without "steps"; null otherwise.
nlohmann::json dit_checkpoint_sampler(const nn::DitConfig& config);

}  // namespace rudder
