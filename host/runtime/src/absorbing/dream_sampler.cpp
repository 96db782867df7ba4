// dream: Dream's diffusion_generate() step for step (authors_samplers.hpp), with Fast-dLLM's block decoding, its
// threshold and its key/value caches.
#include <ATen/ATen.h>

#include "../authors_samplers.hpp"
#include "blocks_after_prompt.hpp"

namespace rudder::absorbing {
namespace {

using json = nlohmann::json;

struct DreamSettings {
    FastDllmSettings fast;
    DreamSampler::Alg alg = DreamSampler::Alg::origin;
    double alg_temp = 0.0;  // > 0 draws the positions by softmax(confidence / alg_temp)
    double eps = 1e-3;      // its last time
    // Fast-dLLM's block decoding: any of its settings turns it on.
    bool blocks() const { return fast.block_length > 0 || fast.threshold > 0 || fast.kv_cache != KeyValueCache::none; }
};

const char* alg_name(DreamSampler::Alg alg) {
    switch (alg) {
        case DreamSampler::Alg::maskgit_plus: return "maskgit_plus";
        case DreamSampler::Alg::topk_margin: return "topk_margin";
        case DreamSampler::Alg::entropy: return "entropy";
        default: return "origin";
    }
}

class DreamUnmasking final : public UnmaskingOn<DreamSampler> {
public:
    using UnmaskingOn::UnmaskingOn;
    bool ends_when_unmasked() const override { return grid_.blocks_on() && grid_.dynamic(); }
    // Without blocks: chosen among the positions still masked once the controllers have fixed theirs (draw), as
    // Dream draws them around its prompt.
    at::Tensor choose(const at::Tensor& masked, int64_t i, AbsorbingLoop& /*loop*/) override {
        return grid_.blocks_on() ? choose_in_blocks(grid_, masked, i) : masked.clone();
    }
    void after_fixed(at::Tensor& unmask, int64_t i, AbsorbingLoop& loop) override {
        if (grid_.blocks_on()) start_blocks(grid_, unmask, i, loop);
    }
    std::optional<std::pair<int64_t, int64_t>> cache_block(int64_t i) const override {
        if (!grid_.blocks_on() || !grid_.started()) return std::nullopt;
        return grid_.block(i);
    }
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
              AbsorbingLoop& loop) override;
};

// Draws at every position of the step's rows over every row the network has, keeps those Dream commits this step
// (origin: each drawn with its chance; the other algs and the blocks: the most confident, or by threshold) and
// commits them through the COMMIT controllers.
void DreamUnmasking::draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
                          AbsorbingLoop& loop) {
    const at::Tensor masked = loop.tokens().eq(loop.mask_id());  // with this step's fixed tokens
    const bool blocks = grid_.blocks_on();
    if (blocks && !grid_.started()) return;  // nothing masked
    // How many each sequence commits this step. Block decoding: a block's first call commits its first position
    // alone; with a threshold, the count comes from the confidences.
    at::Tensor count;
    const bool opening = blocks && grid_.opens_block(i);
    const bool threshold = blocks && grid_.dynamic() && !opening;
    if (opening) {
        at::Tensor first = at::zeros_like(unmask);
        first.select(1, grid_.block(i).first).fill_(true);
        unmask = unmask.logical_and(first);
    } else if (blocks) {
        if (!grid_.dynamic()) count = grid_.block_commits(in_block(grid_, masked, i).sum(1), i);
    } else if (grid_.alg() != DreamSampler::Alg::origin) {
        count = grid_.commits(masked.sum(1), i);
    } else {
        unmask = unmask.logical_and(grid_.choose(masked, i, loop.gen()));
    }
    const auto rows = loop.rows_to_draw(unmask, combined, row_logits);
    if (!rows) return;
    const at::Tensor &positions = rows->positions, &scores = rows->scores;
    const at::Tensor shaped = grid_.shaped(loop.every_network_row(scores, positions, rows->drawn_at_row, combined));
    const at::Tensor tokens = loop.fault_if_empty(i, positions, [&] { return grid_.draw(shaped, loop.gen()); });
    const at::Tensor confidence = grid_.confidence(shaped, tokens);
    loop.reverse().stats.rows_drawn += positions.size(0);

    // Which of the drawn Dream commits: the most confident `count` (origin: every one drawn).
    const at::Tensor drawn =
        at::zeros({loop.batch() * loop.length()}, masked.options()).index_fill_(0, positions, true);
    at::Tensor kept_at = drawn;
    if (count.defined() || threshold) {
        const at::Tensor d = drawn.view({loop.batch(), loop.length()});
        const at::Tensor c = confidence_over_batch(confidence, positions, loop);
        if (threshold) count = grid_.threshold_commits(d, c);
        kept_at = grid_.keep(d, c, count, loop.gen()).view({-1});
    }
    commit_kept(i, kept_at, positions, tokens, scores, loop,
                [&](const at::Tensor& within) { return grid_.draw(grid_.shaped(within), loop.gen()); });
}

class Dream final : public AbsorbingSampler {
public:
    Dream(CommonSettings common, DreamSettings own) : AbsorbingSampler(std::move(common)), own_(own) {}
    // Threshold decoding: blocks take the steps they need, so the loop's bound is one step a position.
    void fit(const Recipe& recipe) override {
        if (own_.blocks() && own_.fast.threshold > 0) common_.steps = recipe.max_length;
    }
    void describe(json& out) const override {
        describe_fast_dllm(own_.fast, out);
        out["alg"] = alg_name(own_.alg);
        out["alg_temp"] = own_.alg_temp;
        out["eps"] = own_.eps;
    }
    void check(const Model& model, const Recipe& recipe, std::vector<RecipeIssue>& issues) const override {
        check_block_length(own_.fast.block_length, recipe, issues);
        if (own_.blocks() && own_.alg != DreamSampler::Alg::entropy)
            issues.push_back({"/sampler/alg",
                              "Fast-dLLM's Dream block decoding (block_length, threshold, kv_cache) orders positions "
                              "by entropy (or, with a threshold, by the drawn token's probability) whatever alg says; "
                              "leave 'alg' out or give 'entropy', not '" +
                                  std::string(alg_name(own_.alg)) + "'"});
        check_kv_cache(own_.fast, common_, model, issues);
    }
    KeyValueCache key_value_cache() const override { return own_.fast.kv_cache; }
    std::unique_ptr<Unmasking> start(const AbsorbingLoop& /*loop*/) const override {
        const DreamBlocks blocks{own_.blocks(), own_.fast.block_length, own_.fast.threshold};
        return std::make_unique<DreamUnmasking>(DreamSampler(common_.steps, own_.eps, own_.alg, own_.alg_temp,
                                                             common_.temperature, common_.top_k, common_.top_p,
                                                             blocks));
    }

private:
    DreamSettings own_;
};

}  // namespace

AbsorbingSamplerRow dream_sampler() {
    AbsorbingSamplerRow r;
    r.name = "dream";
    r.keys = {"block_length", "threshold", "kv_cache", "alg", "alg_temp", "eps"};
    r.default_temperature = 0.0;  // the arg-max, as Dream's code defaults
    r.read = [](SamplerObject& o, CommonSettings common) -> std::unique_ptr<AbsorbingSampler> {
        DreamSettings own;
        auto& r = o.reader;
        read_fast_dllm(o, own.fast);
        // Fast-dLLM's Dream block decoding orders by entropy: its default alg.
        if (own.blocks()) own.alg = DreamSampler::Alg::entropy;
        if (o.applies("alg"))
            if (auto v = r.choice("alg", {"origin", "maskgit_plus", "topk_margin", "entropy"}))
                own.alg = *v == "maskgit_plus"  ? DreamSampler::Alg::maskgit_plus
                          : *v == "topk_margin" ? DreamSampler::Alg::topk_margin
                          : *v == "entropy"     ? DreamSampler::Alg::entropy
                                                : DreamSampler::Alg::origin;
        if (o.applies("alg_temp"))
            if (auto v = r.number("alg_temp", 0.0, 100.0)) own.alg_temp = *v;
        read_eps(o, own.eps);
        return std::make_unique<Dream>(std::move(common), own);
    };
    return r;
}

}  // namespace rudder::absorbing
