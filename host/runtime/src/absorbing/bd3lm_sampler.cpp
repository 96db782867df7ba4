// bd3lm: BD3-LM's _semi_ar_sampler with first hitting, step for step (authors_samplers.hpp): block by block, one
// position of a sequence a step, starting a sequence again where its finished blocks hold too little entropy.
#include <ATen/ATen.h>

#include "../authors_samplers.hpp"
#include "absorbing_loop.hpp"

namespace rudder::absorbing {
namespace {

class Bd3lmUnmasking final : public UnmaskingOn<Bd3lmSampler> {
public:
    Bd3lmUnmasking(Bd3lmSampler sampler, int64_t batch)
        : UnmaskingOn(std::move(sampler)), starts_(static_cast<size_t>(batch), 1) {}
    bool ends_when_unmasked() const override { return true; }
    // The masked positions of each sequence's current block, the one holding its first masked position (every block
    // before it is finished).
    at::Tensor choose(const at::Tensor& masked, int64_t /*i*/, AbsorbingLoop& /*loop*/) override {
        const int64_t block = grid_.block();
        const at::Tensor first = masked.to(at::kByte).argmax(1);  // (a sequence with none masked draws nothing)
        const at::Tensor position = at::arange(masked.size(1), first.options()).unsqueeze(0);
        const at::Tensor begin = first.div(block, "floor").mul_(block).unsqueeze(1);
        return masked.logical_and(position.ge(begin)).logical_and_(position.lt(begin + block));
    }
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
              AbsorbingLoop& loop) override;

private:
    void start_again_where_low_entropy(const at::Tensor& drawn, int64_t i, AbsorbingLoop& loop);
    std::vector<int64_t> starts_;  // each sequence's starts so far
};

// The step's uniforms for every sequence's block, then for each sequence that has a masked position left in its
// block (`unmask`, after the controllers fixed theirs) the one it commits, picked among them, and its token by
// Gumbel-max over the nucleus of its controlled probabilities (at the temperature), over every row the network has.
// What is drawn is committed through the COMMIT controllers; a sequence whose finished block leaves too little
// entropy starts again.
void Bd3lmUnmasking::draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
                          AbsorbingLoop& loop) {
    if (!unmask.any().item<bool>()) return;  // the controllers filled the blocks: nothing to draw
    const int64_t block = grid_.block(), L = loop.length();
    const at::Tensor u = grid_.uniforms(loop.batch(), loop.grid_columns(), loop.gen());
    std::vector<int64_t> chosen, chosen_u;  // flat positions, and their rows of u viewed [B * block, W]
    const at::Tensor where = unmask.cpu();
    for (int64_t b = 0; b < loop.batch(); ++b) {
        const at::Tensor open = where[b].nonzero().squeeze(1);
        if (open.size(0) == 0) continue;
        const int64_t position = open[grid_.pick(open.size(0), loop.gen())].item<int64_t>();
        chosen.push_back(b * L + position);
        chosen_u.push_back(b * block + position % block);
    }
    const auto long_cpu = at::TensorOptions().dtype(at::kLong);
    const at::Tensor positions = at::tensor(chosen, long_cpu).to(combined.rows.device());
    // Each chosen position's index among the combination's rows (rows are in position order).
    const at::Tensor drawn_at_row = at::searchsorted(combined.rows, positions);
    at::Tensor scores =
        Composer::controlled(row_logits.index_select(0, drawn_at_row), combined, drawn_at_row, loop.mask_id());
    loop.temper(scores);
    const CommonSettings& s = loop.settings();
    if (s.top_k > 0) DiscreteSampler::truncate(scores, s.top_k, 1.0);  // (top_p is the nucleus of the draw)
    loop.fault_if_any_empty(i, positions, scores);
    const at::Tensor full = loop.every_network_row(scores, positions, drawn_at_row, combined);
    const at::Tensor rows_u = u.view({loop.batch() * block, -1}).index_select(0, at::tensor(chosen_u, long_cpu));
    const at::Tensor tokens = grid_.draw(full, rows_u);
    loop.reverse().stats.rows_drawn += positions.size(0);
    loop.commit_draws(i, positions, tokens, scores, s.temperature == 0.0);
    start_again_where_low_entropy(positions, i, loop);
}

// A sequence whose block (of its position among `drawn`, flat int64 [n]) is now finished, past position 256, with
// less than 4 nats of entropy in its last 256 tokens starts again, all masked (the controllers fix their tokens again
// at the next step); its 10th start fails the run, as BD3-LM's sampler gives up.
void Bd3lmUnmasking::start_again_where_low_entropy(const at::Tensor& drawn, int64_t i, AbsorbingLoop& loop) {
    const int64_t block = grid_.block(), L = loop.length();
    const at::Tensor tokens = loop.tokens().cpu(), flat = drawn.cpu();
    for (int64_t k = 0; k < flat.size(0); ++k) {
        const int64_t b = flat[k].item<int64_t>() / L, begin = flat[k].item<int64_t>() % L / block * block;
        const int64_t end = std::min(L, begin + block);
        const at::Tensor row = tokens[b];
        if (end <= 256 || row.narrow(0, begin, end - begin).eq(loop.mask_id()).any().item<bool>() ||
            !Bd3lmSampler::low_entropy(row.narrow(0, 0, end)))
            continue;
        if (++starts_[static_cast<size_t>(b)] > Bd3lmSampler::kStarts)
            throw GenerationFault("the bd3lm sampler gave up at step " + std::to_string(i + 1) +
                                  ": each of a sample's " + std::to_string(Bd3lmSampler::kStarts) +
                                  " starts ended in a block whose last 256 tokens hold less than 4 nats of entropy "
                                  "(BD3-LM's _check_stop_conds)");
        loop.tokens().select(0, b).fill_(loop.mask_id());
        loop.changed();
    }
}

class Bd3lm final : public AbsorbingSampler {
public:
    using AbsorbingSampler::AbsorbingSampler;
    void fit(const Recipe& recipe) override { common_.steps = recipe.max_length; }
    void check(const Model& model, const Recipe& /*recipe*/, std::vector<RecipeIssue>& issues) const override {
        if (model.denoiser->traits().decoding_block <= 0)
            issues.push_back({"/sampler/name",
                              "the bd3lm sampler decodes a block-diffusion model (a BD3-LM checkpoint) block by "
                              "block; model '" +
                                  model.name + "' has no blocks"});
    }
    // Its blocks are the model's; its checkpoints are not time-conditioned, and its sampler passes the network a
    // noise level of its own (-log(1 - t) at first-hitting times from NumPy's generator), which Rudder does not.
    void check_model_blocks(const Model& model, int64_t /*block*/, std::vector<RecipeIssue>& issues) const override {
        if (model.denoiser->traits().reads_time)
            issues.push_back({"/sampler/name",
                              "the bd3lm sampler runs BD3-LM's checkpoints without time conditioning (as "
                              "published); model '" +
                                  model.name + "' is time-conditioned: use first_hitting"});
    }
    std::unique_ptr<Unmasking> start(const AbsorbingLoop& loop) const override {
        return std::make_unique<Bd3lmUnmasking>(
            Bd3lmSampler(loop.length(), loop.reverse().model.denoiser->traits().decoding_block, common_.top_p,
                         common_.temperature),
            loop.batch());
    }
};

}  // namespace

AbsorbingSamplerRow bd3lm_sampler() {
    AbsorbingSamplerRow r;
    r.name = "bd3lm";
    r.refuses = {{"steps", kOneStepAPosition}};
    r.read = [](SamplerObject& /*o*/, CommonSettings common) -> std::unique_ptr<AbsorbingSampler> {
        return std::make_unique<Bd3lm>(std::move(common));
    };
    return r;
}

}  // namespace rudder::absorbing
