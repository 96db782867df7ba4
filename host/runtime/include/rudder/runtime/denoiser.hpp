// The network (or closed-form posterior) the reverse loop calls at every step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rudder/nn/schedule.hpp>

namespace rudder {

// Hard constraints known at this step. A network cannot use them (the composer applies them to its output); the
// exact corpus posterior conditions on them, so a constraint selects exactly the sentences that satisfy it.
// Also what the loop estimated one step before, for a self-conditioned network.
struct Evidence {
    at::Tensor fixed;      // int64 [B, L], token id or -1 (undefined: none)
    at::Tensor forbidden;  // bool [B, L, V] (undefined: none)
    // Continuous: the previous step's clean estimate x0 [B, L, D] (undefined at the first step), read by a
    // self-conditioned network (CDCD's self-conditioning). Not a constraint: empty() does not count it.
    at::Tensor self_condition;
    bool empty() const { return !fixed.defined() && !forbidden.defined(); }
};

struct DenoiserOutput {
    at::Tensor logits;  // float32 [B, L, V]: log-probabilities of the clean token at every position
    at::Tensor x0;      // continuous only: float32 [B, L, D], the model's own x0 estimate (may be undefined)
    // Discrete networks with output rows the vocabulary leaves out (LLaDA, Dream): those rows, the mask token's first
    // and then the ids from V on, on the scale of `logits` (float32 [B, L, 1 + rows - V], meaningful where masked):
    // log_softmax over both together is the softmax over every row the network has, which the authors' samplers
    // take. Undefined for other models.
    at::Tensor outside;
    // SEDD's absorbing graph: the log of the network's total unmasking score at each position, log sum_{y != mask}
    // s_y (float32 [B, L], meaningful where masked); with `logits` it gives the score, s_y = p0(y) e^total, which
    // SEDD's own samplers read (the sedd sampler). Undefined for other models.
    at::Tensor log_score_total;
};

// What a denoiser is and can do, fixed when it is made (Denoiser's constructor takes it; a loader fills it once the
// weights are read) and the same for its whole life: the loop, the samplers' checks and the memory estimate read it
// instead of asking the denoiser feature by feature. Every field is set by the denoiser's own class; the defaults
// are what a plain network has (discrete, any length, unconditional, reading neither evidence nor the time).
struct DenoiserTraits {
    Family family = Family::discrete;
    int64_t vocab_size = 0;  // the rows of denoise()'s `logits`: the tokenizer's vocabulary
    int64_t embed_dim = 0;   // continuous family: the width D of x and of embedding(); 0 for the discrete family
    // The most positions denoise() accepts (a network's learned positions); 0 = any.
    int64_t max_length = 0;
    // Whether denoise() uses `conditions` (models trained with a condition, e.g. an E2E meaning representation).
    bool conditional = false;
    // Whether denoise() conditions on Evidence; if not, the loop never calls it again just for new evidence.
    bool uses_evidence = false;
    // Whether denoise()'s output depends on t (a time-conditioned network); if not, the discrete loop reuses an
    // output while no token changed, as MDLM's cache does (and, as there, not for a network that reads t).
    bool reads_time = false;
    // Whether denoise() gives DenoiserOutput::log_score_total (SEDD's checkpoints), which the sedd sampler reads.
    bool gives_score_total = false;
    // Discrete family: the noise schedule when the model diffuses with uniform noise (SEDD's uniform graph: every
    // position always holds a token, and any token may change at any step); empty for absorbing (masking) noise.
    std::optional<UniformNoiseSchedule> uniform_noise = std::nullopt;
    // Discrete family: > 0 when the network predicts a block of this many positions from the finished blocks before
    // it (BD3-LM's block diffusion, block-causal attention), so positions must be decoded block by block, left to
    // right; 0 when any order is fine.
    int64_t decoding_block = 0;
    // Whether window_decoder() gives a WindowDecoder (Fast-dLLM's key/value caches): a recipe's check asks this,
    // without making one.
    bool windows = false;
};

// Fast-dLLM's approximate key/value caches (Wu et al. 2025; discrete networks that read neither the time nor
// conditions, LLaDA's) for one run: the object owns the cache, so a denoiser shared by concurrent runs holds no run's
// state. Made by Denoiser::window_decoder(); it must not outlive the denoiser.
class WindowDecoder {
public:
    virtual ~WindowDecoder() = default;
    // denoise(x) at any t without conditions or evidence, keeping every layer's keys and values in the cache.
    virtual DenoiserOutput refresh(const at::Tensor& x) = 0;
    // The output of positions [begin, end) of `x` only ([B, end - begin, V], `outside` likewise), their queries
    // reading the cached keys and values of the other positions: the rest of the sequence is taken as it was at the
    // last refresh(), which must have come first.
    virtual DenoiserOutput window(const at::Tensor& x, int64_t begin, int64_t end) = 0;
};

class Denoiser {
public:
    virtual ~Denoiser() = default;

    // What it is and can do (DenoiserTraits), fixed at construction.
    const DenoiserTraits& traits() const { return traits_; }
    // The three read everywhere, as traits() has them.
    Family family() const { return traits_.family; }
    int64_t vocab_size() const { return traits_.vocab_size; }
    int64_t embed_dim() const { return traits_.embed_dim; }

    // Continuous family: the token embedding table [V, D] on the device. Undefined for discrete.
    virtual at::Tensor embedding() const { return {}; }
    // Moves every tensor the denoiser owns to `device`.
    virtual void to(const at::Device& device) = 0;
    // Replaces the network's weight matrices by int8 with a float32 scale per row, computing in float32 over them
    // (weight-only quantisation: a recipe's "weights": "int8"). False, with nothing changed, for a denoiser without
    // such a path.
    virtual bool quantize_int8() { return false; }
    // About how many bytes one denoise() call on `batch` sequences of `length` positions holds at its peak
    // (activations and outputs, not the weights): the run-memory estimate is built on it. The default counts the
    // output logits and their log-softmax.
    virtual uint64_t working_bytes(int64_t batch, int64_t length) const {
        return static_cast<uint64_t>(batch) * static_cast<uint64_t>(length) * static_cast<uint64_t>(vocab_size()) * 8;
    }
    // x: continuous float32 [B, L, D] (x_t); discrete int64 [B, L] with mask_id at masked positions (uniform noise:
    // any token anywhere).
    // t: diffusion time in (0, 1] shared by the batch. `conditions`: empty, or one text per batch row.
    virtual DenoiserOutput denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                                   const Evidence& evidence = {}) = 0;
    // A WindowDecoder for one run, with its own empty cache; nullptr (the default) when the denoiser has none.
    // Gives one exactly when traits().windows is set.
    virtual std::unique_ptr<WindowDecoder> window_decoder() { return nullptr; }

protected:
    explicit Denoiser(DenoiserTraits traits) : traits_(std::move(traits)) {}

private:
    DenoiserTraits traits_;
};

// Exact denoiser for a finite corpus of sentences: the posterior over the corpus in closed form, for either
// family. Makes the whole loop runnable and measurable without a trained network.
//   discrete:   p(s | x_t) ∝ prior(s) * prod_{i unmasked} [s_i == x_i]; a sentence that disagrees at a position
//               keeps weight `mismatch` per disagreement so the posterior is defined for any state.
//   uniform:    (discrete, Options::uniform_noise set) p(s | x_t) ∝ prior(s) * prod_i (alpha [s_i == x_i] + (1 - alpha)
//               / V), alpha = exp(-sigma_bar(t)): every position is evidence, weighed by the noise level.
//   evidence:   a sentence that breaks a fixed or forbidden token also keeps weight `mismatch` per breach.
//   continuous: p(s | x_t) ∝ prior(s) * exp(-|x_t - sqrt(ab) E[s]|^2 / (2 (1 - ab))), ab = alpha_bar(t).
// Logits are log of the posterior's per-position token marginals; x0 is the posterior mean embedding.
class CorpusDenoiser final : public Denoiser {
public:
    struct Options {
        Family family = Family::discrete;
        int64_t vocab_size = 0;
        int64_t pad_id = 0;
        int64_t mask_id = 2;
        int64_t embed_dim = 16;   // continuous: width of the random embedding table
        uint64_t embed_seed = 0;  // continuous: seed of the embedding table
        double mismatch = 1e-6;   // discrete: weight per disagreeing unmasked position (and per breached constraint)
        std::optional<UniformNoiseSchedule> uniform_noise;  // discrete: diffuse with uniform noise on this schedule
        double min_logprob = -30.0;  // floor of the returned log-probabilities (keeps them finite)
    };
    // `sentences`: token ids without padding; each is padded with pad_id to the length the loop asks for.
    // Sentences longer than that length are left out of that call's posterior. `schedule` is used by the
    // continuous family to get alpha_bar(t). Its traits: the options' family, vocabulary, embedding width
    // (continuous) and uniform noise; uses_evidence.
    CorpusDenoiser(std::vector<std::vector<int64_t>> sentences, Options options, GaussianSchedule schedule);

    at::Tensor embedding() const override { return embedding_; }
    void to(const at::Device& device) override;
    // One-hot float64 tensors over [B, L, V] and the posterior over the corpus per sample.
    uint64_t working_bytes(int64_t batch, int64_t length) const override;
    DenoiserOutput denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                           const Evidence& evidence = {}) override;
    int64_t corpus_size() const { return static_cast<int64_t>(sentences_.size()); }

private:
    const at::Tensor& padded(int64_t L);  // [N_L, L] int64 of the sentences that fit in L (cached per L)
    // Sparse incidence of the padded sentences, O[n, i * V + s_n,i] = 1, [N_L, L * V] float64, and its transpose
    // in float32. Every per-sentence sum over positions is a product with O: B * N * L work without ever holding
    // a [B, N, L] tensor.
    const at::Tensor& incidence(int64_t L);
    const at::Tensor& incidence_t(int64_t L);

    std::vector<std::vector<int64_t>> sentences_;
    Options options_;
    GaussianSchedule schedule_;
    at::Tensor embedding_;  // [V, D] continuous; unit-norm rows
    at::Device device_;
    int64_t cached_len_ = -1;
    at::Tensor cached_;
    at::Tensor cached_incidence_;
    at::Tensor cached_incidence_t_;
};

}  // namespace rudder
