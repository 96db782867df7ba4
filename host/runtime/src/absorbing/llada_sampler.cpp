// llada: LLaDA's generate() step for step (authors_samplers.hpp), with Fast-dLLM's threshold and factor decoding and
// its key/value caches.
#include <ATen/ATen.h>

#include "../authors_samplers.hpp"
#include "blocks_after_prompt.hpp"

namespace rudder::absorbing {
namespace {

using json = nlohmann::json;

struct LladaSettings {
    FastDllmSettings fast;
    LladaSampler::Remasking remasking = LladaSampler::Remasking::low_confidence;
    double factor = 0.0;  // Fast-dLLM's factor decoding (0: off)
    bool decodes_in_parallel() const { return fast.threshold > 0 || factor > 0; }
};

class LladaUnmasking final : public UnmaskingOn<LladaSampler> {
public:
    using UnmaskingOn::UnmaskingOn;
    bool ends_when_unmasked() const override { return grid_.dynamic(); }
    at::Tensor choose(const at::Tensor& masked, int64_t i, AbsorbingLoop& /*loop*/) override {
        return choose_in_blocks(grid_, masked, i);
    }
    void after_fixed(at::Tensor& unmask, int64_t i, AbsorbingLoop& loop) override {
        start_blocks(grid_, unmask, i, loop);
    }
    std::optional<std::pair<int64_t, int64_t>> cache_block(int64_t i) const override {
        if (!grid_.started()) return std::nullopt;
        return grid_.block(i);
    }
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
              AbsorbingLoop& loop) override;

private:
    at::Tensor block_schedule_;  // the current block's commits per step, int64 [B, steps of the block]
};

// Draws at every position of the step's rows over every row the network has, keeps those the block's schedule (or
// parallel decoding) commits this step, the most confident, and commits them through the COMMIT controllers.
void LladaUnmasking::draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
                          AbsorbingLoop& loop) {
    const at::Tensor masked = loop.tokens().eq(loop.mask_id());  // with this step's fixed tokens
    if (!grid_.started()) return;                                // nothing masked
    // How many each sequence commits this step (parallel decoding: once the confidences are known).
    at::Tensor count;
    const bool parallel = grid_.dynamic();
    if (!parallel) {
        if (grid_.first_of_block(i) || !block_schedule_.defined())
            block_schedule_ = grid_.schedule(in_block(grid_, masked, i).sum(1), i);
        count = block_schedule_.select(1, grid_.step_in_block(i)).contiguous();
    }
    const auto rows = loop.rows_to_draw(unmask, combined, row_logits);
    if (!rows) return;
    const at::Tensor &positions = rows->positions, &scores = rows->scores;
    const at::Tensor full = loop.every_network_row(scores, positions, rows->drawn_at_row, combined);
    const at::Tensor tokens = loop.fault_if_empty(i, positions, [&] { return grid_.draw(full, loop.gen()); });
    const at::Tensor confidence = grid_.confidence(full, tokens, positions, loop.batch(), loop.length(), loop.gen());
    loop.reverse().stats.rows_drawn += positions.size(0);

    // Which of the drawn the sampler commits: the most confident `count`.
    const at::Tensor drawn =
        at::zeros({loop.batch() * loop.length()}, masked.options()).index_fill_(0, positions, true);
    const at::Tensor d = drawn.view({loop.batch(), loop.length()});
    const at::Tensor c = confidence_over_batch(confidence, positions, loop);
    if (parallel) count = grid_.parallel_count(d, c);
    commit_kept(i, keep_highest(d, c, count).view({-1}), positions, tokens, scores, loop,
                [&](const at::Tensor& within) { return grid_.draw(within, loop.gen()); });
}

class Llada final : public AbsorbingSampler {
public:
    Llada(CommonSettings common, LladaSettings own) : AbsorbingSampler(std::move(common)), own_(own) {}
    // Threshold and factor decoding: blocks take the steps they need, so the loop's bound is one step a position.
    void fit(const Recipe& recipe) override {
        if (own_.decodes_in_parallel()) common_.steps = recipe.max_length;
    }
    void describe(json& out) const override {
        describe_fast_dllm(own_.fast, out);
        out["remasking"] = own_.remasking == LladaSampler::Remasking::random ? "random" : "low_confidence";
        if (own_.factor > 0) out["factor"] = own_.factor;
    }
    void check(const Model& model, const Recipe& recipe, std::vector<RecipeIssue>& issues) const override {
        check_block_length(own_.fast.block_length, recipe, issues);
        check_kv_cache(own_.fast, common_, model, issues);
    }
    KeyValueCache key_value_cache() const override { return own_.fast.kv_cache; }
    std::unique_ptr<Unmasking> start(const AbsorbingLoop& /*loop*/) const override {
        LladaSampler::Parallel parallel;
        using Rule = LladaSampler::Parallel::Rule;
        if (own_.fast.threshold > 0) parallel = {Rule::threshold, own_.fast.threshold};
        if (own_.factor > 0) parallel = {Rule::factor, own_.factor};
        return std::make_unique<LladaUnmasking>(
            LladaSampler(common_.steps, own_.fast.block_length, own_.remasking, common_.temperature, parallel));
    }

private:
    LladaSettings own_;
};

}  // namespace

AbsorbingSamplerRow llada_sampler() {
    AbsorbingSamplerRow r;
    r.name = "llada";
    r.keys = {"block_length", "remasking", "threshold", "factor", "kv_cache"};
    const std::string whole =
        "does not apply to the llada sampler: LLaDA's generate() draws from the whole distribution";
    r.refuses = {{"top_k", "'top_k' " + whole}, {"top_p", "'top_p' " + whole}};
    r.default_temperature = 0.0;  // the arg-max, as LLaDA's code defaults
    r.read = [](SamplerObject& o, CommonSettings common) -> std::unique_ptr<AbsorbingSampler> {
        LladaSettings own;
        auto& r = o.reader;
        read_fast_dllm(o, own.fast);
        if (o.applies("remasking"))
            if (auto v = r.choice("remasking", {"low_confidence", "random"}))
                own.remasking =
                    *v == "random" ? LladaSampler::Remasking::random : LladaSampler::Remasking::low_confidence;
        if (o.applies("factor"))
            if (auto v = r.number("factor", 0.0, 100.0)) own.factor = *v;
        if (r.has("threshold") && r.has("factor"))
            r.issue("factor", "'threshold' and 'factor' are two rules of Fast-dLLM's parallel decoding: give one");
        return std::make_unique<Llada>(std::move(common), own);
    };
    return r;
}

}  // namespace rudder::absorbing
