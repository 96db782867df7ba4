// maskgit: MaskGIT's iterative decoding with its cosine schedule (Chang et al. 2022, "MaskGIT: Masked Generative
// Image Transformer"; google-research/maskgit, libml/parallel_decode.py). Step k of T draws a token at every masked
// position, scores each draw by its log-probability plus Gumbel noise at choice_temperature (1 - r), r = (k + 1) / T,
// and leaves masked the n lowest-scored, n = floor(N cos(pi r / 2)) kept within [1, m - 1] (N the positions masked at
// the start, m those masked now); the last step commits every draw. The noise on the choice anneals to none: early
// steps explore which positions go first, late ones commit the most confident.
#include <ATen/ATen.h>

#include <cmath>

#include "absorbing_loop.hpp"

namespace rudder::absorbing {
namespace {

// The share of positions masked after step i of `steps` on the cosine schedule: cos(pi / 2 (i + 1) / steps).
double masked_share_after(int64_t i, int64_t steps) {
    return std::cos(M_PI / 2 * static_cast<double>(i + 1) / static_cast<double>(steps));
}

// The time grid: step i starts where the schedule has masked the share cos(pi / 2 i / steps), t = m^-1 of it.
class CosineGrid {
public:
    CosineGrid(const MaskSchedule& schedule, int64_t steps) : schedule_(schedule), steps_(steps) {}
    int64_t steps() const { return steps_; }
    double t(int64_t i) const {
        return std::min(1.0, masked_share_after(i - 1, steps_) / schedule_.mask_prob(1.0));  // m(t) = (1 - eps) t
    }
    double t_next(int64_t i) const { return i + 1 >= steps_ ? 0.0 : t(i + 1); }

private:
    MaskSchedule schedule_;
    int64_t steps_;
};

class MaskgitUnmasking final : public UnmaskingOn<CosineGrid> {
public:
    MaskgitUnmasking(CosineGrid grid, double choice_temperature)
        : UnmaskingOn(grid), choice_temperature_(choice_temperature) {}
    at::Tensor choose(const at::Tensor& masked, int64_t /*i*/, AbsorbingLoop& /*loop*/) override {
        return masked.clone();
    }
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
              AbsorbingLoop& loop) override;

private:
    // Each sequence's commits at step i, from its masked positions now (`masked`, int64 [B]).
    at::Tensor commits(const at::Tensor& masked, int64_t i) const;
    double choice_temperature_;
    at::Tensor initial_;  // each sequence's masked positions at its first draw (after the controllers fixed theirs)
};

at::Tensor MaskgitUnmasking::commits(const at::Tensor& masked, int64_t i) const {
    if (i + 1 >= steps()) return masked.clone();
    const at::Tensor left = initial_.to(at::kDouble).mul(masked_share_after(i, steps())).floor_().to(at::kLong);
    return masked - at::maximum(at::minimum(masked - 1, left), at::ones_like(left));
}

// Draws at every position still masked (at the temperature, truncated), keeps the cosine schedule's count of the
// highest-scored draws in each sequence, and commits them through the COMMIT controllers.
void MaskgitUnmasking::draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
                            AbsorbingLoop& loop) {
    const at::Tensor masked = loop.tokens().eq(loop.mask_id());  // with this step's fixed tokens
    if (!initial_.defined()) initial_ = masked.sum(1);
    auto rows = loop.rows_to_draw(unmask, combined, row_logits);
    if (!rows) return;
    const at::Tensor& positions = rows->positions;
    at::Tensor& scores = rows->scores;
    loop.temper(scores);
    loop.truncate(scores);
    const bool greedy = loop.settings().temperature == 0.0;
    const at::Tensor tokens = loop.draw_rows(i, scores, positions, greedy);
    loop.reverse().stats.rows_drawn += positions.size(0);
    // The choice's score: the draw's log-probability, and Gumbel noise annealed to none at the last step.
    at::Tensor score = at::log_softmax(scores, 1).gather(1, tokens.unsqueeze(1)).squeeze(1).to(at::kFloat);
    const double noise = choice_temperature_ * (1.0 - static_cast<double>(i + 1) / static_cast<double>(steps()));
    if (noise > 0) {
        const at::Tensor u = rand_like_device({positions.size(0)}, loop.gen(), score);
        score.add_(u.clamp_min(1e-20).log_().neg_().log_().neg_(), noise);
    }
    const int64_t B = loop.batch(), L = loop.length();
    const at::Tensor drawn = at::zeros({B * L}, masked.options()).index_fill_(0, positions, true).view({B, L});
    const at::Tensor scored =
        at::full({B * L}, -std::numeric_limits<float>::infinity(), score.options()).index_copy_(0, positions, score);
    const at::Tensor kept =
        keep_highest(drawn, scored.view({B, L}), commits(masked.sum(1), i)).view({-1}).index_select(0, positions);
    const at::Tensor kept_rows = kept.nonzero().squeeze(1);
    if (kept_rows.size(0) == 0) return;
    const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
        const at::Tensor at_rows = kept_rows.index_select(0, which);
        at::Tensor again = scores.index_select(0, at_rows);
        Composer::forbid(again, forbidden_bits);
        return loop.draw_rows(i, again, positions.index_select(0, at_rows), greedy);
    };
    loop.commit_rows(i, positions.index_select(0, kept_rows), tokens.index_select(0, kept_rows), redraw);
}

class Maskgit final : public AbsorbingSampler {
public:
    Maskgit(CommonSettings common, double choice_temperature)
        : AbsorbingSampler(std::move(common)), choice_temperature_(choice_temperature) {}
    void describe(nlohmann::json& out) const override { out["choice_temperature"] = choice_temperature_; }
    std::unique_ptr<Unmasking> start(const AbsorbingLoop& loop) const override {
        return std::make_unique<MaskgitUnmasking>(CosineGrid(loop.reverse().model.mask_schedule, common_.steps),
                                                  choice_temperature_);
    }

private:
    double choice_temperature_;
};

}  // namespace

AbsorbingSamplerRow maskgit_sampler() {
    AbsorbingSamplerRow r;
    r.name = "maskgit";
    r.keys = {"choice_temperature"};
    r.default_steps = 12;  // MaskGIT decodes in 8 to 12 steps
    r.read = [](SamplerObject& o, CommonSettings common) -> std::unique_ptr<AbsorbingSampler> {
        double choice_temperature = 4.5;  // MaskGIT's default
        if (o.applies("choice_temperature"))
            if (auto v = o.reader.number("choice_temperature", 0.0, 100.0)) choice_temperature = *v;
        return std::make_unique<Maskgit>(std::move(common), choice_temperature);
    };
    return r;
}

}  // namespace rudder::absorbing
