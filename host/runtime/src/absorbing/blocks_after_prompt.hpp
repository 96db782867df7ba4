// What the llada and dream samplers share: blocks laid out after the prompt once the controllers have fixed it
// (LLaDA's generate(), Fast-dLLM's Dream block decoding), the settings of Fast-dLLM's parallel decoding and caches,
// and their checks. `Blocks` is LladaSampler or DreamSampler (authors_samplers.hpp): started(), start(), block(i),
// dynamic(), advance().
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "absorbing_loop.hpp"

namespace rudder::absorbing {

// Step i's block of `masked` (bool [B, L]).
template <class Blocks>
at::Tensor in_block(const Blocks& blocks, const at::Tensor& masked, int64_t i) {
    const auto [begin, end] = blocks.block(i);
    at::Tensor inside = at::zeros_like(masked);
    inside.narrow(1, begin, end - begin).fill_(true);
    return masked.logical_and(inside);
}

// Which of the `masked` positions step i may unmask: every one until the prompt is known (the first step, where the
// controllers fix it), then the step's block (none once parallel decoding has finished every block).
template <class Blocks>
at::Tensor choose_in_blocks(Blocks& blocks, const at::Tensor& masked, int64_t i) {
    if (!blocks.started()) return masked.clone();
    if (blocks.dynamic() && !blocks.advance(masked)) return at::zeros_like(masked);
    return in_block(blocks, masked, i);
}

// The prompt is the positions before the first one still masked once the controllers have fixed theirs (a span
// prefix); from it the blocks, and step i's (`unmask` is narrowed to it).
template <class Blocks>
void start_blocks(Blocks& blocks, at::Tensor& unmask, int64_t i, const AbsorbingLoop& loop) {
    if (blocks.started()) return;
    const at::Tensor masked = loop.tokens().eq(loop.mask_id());
    const at::Tensor any = masked.any(1);
    if (!any.any().item<bool>()) return;
    const int64_t prompt = masked.to(at::kByte).argmax(1).masked_select(any).min().item<int64_t>();
    try {
        blocks.start(prompt, loop.length());
    } catch (const std::invalid_argument& e) {
        throw GenerationFault(e.what());
    }
    if (blocks.dynamic()) blocks.advance(masked);
    unmask = in_block(blocks, unmask, i);
}

// Fast-dLLM's settings that llada and dream share: the block length after the prompt, threshold decoding and the
// key/value caches.
struct FastDllmSettings {
    int64_t block_length = 0;  // 0: the part after the prompt is one block
    double threshold = 0.0;    // threshold decoding (0: off)
    KeyValueCache kv_cache = KeyValueCache::none;
};

inline const char* kv_cache_name(KeyValueCache cache) {
    return cache == KeyValueCache::prefix ? "prefix" : cache == KeyValueCache::dual ? "dual" : "none";
}

inline void read_fast_dllm(SamplerObject& o, FastDllmSettings& out) {
    read_block_length(o, out.block_length);
    if (o.applies("threshold"))
        if (auto v = o.reader.number("threshold", 0.0, 1.0)) out.threshold = *v;
    if (o.applies("kv_cache"))
        if (auto v = o.reader.choice("kv_cache", {"none", "prefix", "dual"}))
            out.kv_cache = *v == "prefix" ? KeyValueCache::prefix
                           : *v == "dual" ? KeyValueCache::dual
                                          : KeyValueCache::none;
}

inline void describe_fast_dllm(const FastDllmSettings& s, nlohmann::json& out) {
    if (s.block_length > 0) out["block_length"] = s.block_length;
    if (s.threshold > 0) out["threshold"] = s.threshold;
    out["kv_cache"] = kv_cache_name(s.kv_cache);
}

inline void check_kv_cache(const FastDllmSettings& s, const CommonSettings& common, const Model& model,
                           std::vector<RecipeIssue>& issues) {
    if (s.kv_cache == KeyValueCache::none) return;
    if (!model.denoiser->traits().windows)
        issues.push_back({"/sampler/kv_cache", "model '" + model.name +
                                                   "' keeps no key/value cache of the kind Fast-dLLM's are (LLaDA's "
                                                   "and Dream's checkpoints do)"});
    if (common.prompt_guidance > 0)
        issues.push_back({"/sampler/prompt_guidance",
                          "Fast-dLLM's caches take one pass per step; prompt_guidance's second pass (the prompt "
                          "masked) would need a cache of its own"});
}

// Commits the rows of `kept_at` (bool [B * L], over the step's drawn `positions`) whose draw in `tokens` is a token
// (a draw of the mask or of a row past the tokenizer leaves the position masked, as in the authors' code), through
// the COMMIT controllers; a row they refuse is given a token by `draw_within` from its controlled `scores`, as
// log-probabilities within the vocabulary, and what they still allow.
template <class DrawWithin>
void commit_kept(int64_t i, const at::Tensor& kept_at, const at::Tensor& positions, const at::Tensor& tokens,
                 const at::Tensor& scores, AbsorbingLoop& loop, const DrawWithin& draw_within) {
    const at::Tensor kept = kept_at.index_select(0, positions)
                                .logical_and_(tokens.lt(loop.vocab_size()))
                                .logical_and_(tokens.ne(loop.mask_id()))
                                .nonzero()
                                .squeeze(1);
    if (kept.size(0) == 0) return;
    const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
        const at::Tensor again_rows = kept.index_select(0, which);
        at::Tensor again = scores.index_select(0, again_rows);
        Composer::forbid(again, forbidden_bits);
        const at::Tensor within = at::log_softmax(again, 1);
        return loop.fault_if_empty(i, positions.index_select(0, again_rows), [&] { return draw_within(within); });
    };
    loop.commit_rows(i, positions.index_select(0, kept), tokens.index_select(0, kept), redraw);
}

// The step's `confidence` (float [n], at the drawn `positions`) laid over the batch: -inf where nothing was drawn.
// float [B, L].
inline at::Tensor confidence_over_batch(const at::Tensor& confidence, const at::Tensor& positions,
                                        const AbsorbingLoop& loop) {
    return at::full({loop.batch() * loop.length()}, -std::numeric_limits<float>::infinity(),
                    confidence.options().dtype(at::kFloat))
        .index_copy_(0, positions, confidence.to(at::kFloat))
        .view({loop.batch(), loop.length()});
}

}  // namespace rudder::absorbing
