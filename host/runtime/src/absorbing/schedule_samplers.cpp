// Rudder's samplers on the model's mask schedule (sampler.hpp, DiscreteSampler): euler, analytic (with ReMDM's
// remasking), first_hitting and confidence (in blocks, by probability, margin or entropy).
#include <ATen/ATen.h>

#include "../sampler.hpp"
#include "absorbing_loop.hpp"

namespace rudder::absorbing {
namespace {

using json = nlohmann::json;

struct ScheduleSettings {
    DiscreteSampler::Kind kind = DiscreteSampler::Kind::analytic;
    // confidence: which drawn tokens are kept first.
    DiscreteSampler::Order order = DiscreteSampler::Order::probability;
    // confidence, first_hitting: positions unmask block by block, left to right (0: one block).
    int64_t block_length = 0;
    // analytic: committed tokens may be masked again (ReMDM, sampler.hpp); only while from_t >= t >= to_t.
    DiscreteSampler::Remasking remask{DiscreteSampler::Remasking::Strategy::none, 0.02, 1.0, 0.0};
};

const char* order_name(DiscreteSampler::Order order) {
    switch (order) {
        case DiscreteSampler::Order::margin: return "margin";
        case DiscreteSampler::Order::entropy: return "entropy";
        default: return "probability";
    }
}

const char* strategy_name(DiscreteSampler::Remasking::Strategy strategy) {
    using Strategy = DiscreteSampler::Remasking::Strategy;
    return strategy == Strategy::cap ? "cap" : strategy == Strategy::rescale ? "rescale" : "none";
}

class ScheduleUnmasking final : public UnmaskingOn<DiscreteSampler> {
public:
    using UnmaskingOn::UnmaskingOn;
    at::Tensor choose(const at::Tensor& masked, int64_t i, AbsorbingLoop& loop) override {
        return grid_.choose(masked, i, loop.gen());
    }
    bool remasks() const override { return grid_.remasks(); }
    at::Tensor remask(const at::Tensor& committed, int64_t i, at::Generator& gen) const override {
        return grid_.remask(committed, i, gen);
    }
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
              AbsorbingLoop& loop) override;
};

// Draws at the positions that unmask: the controlled scores of those rows only, at the temperature; commits them
// through the COMMIT controllers (commit.hpp), drawing again within what they allow the rows they refuse.
void ScheduleUnmasking::draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
                             AbsorbingLoop& loop) {
    auto rows = loop.rows_to_draw(unmask, combined, row_logits);
    if (!rows) return;
    const at::Tensor& positions = rows->positions;
    at::Tensor& scores = rows->scores;
    const CommonSettings& s = loop.settings();
    const bool greedy = s.temperature == 0.0;  // the arg-max
    loop.temper(scores);
    // A row a COMMIT controller refuses is drawn again from its scores before truncation, within what it allows.
    const at::Tensor untruncated = loop.reverse().composer.commits() && s.truncates() ? scores.clone() : scores;
    loop.truncate(scores);
    at::Tensor drawn = loop.draw_rows(i, scores, positions, greedy);
    at::Tensor committed = positions, kept;
    if (grid_.kind() == DiscreteSampler::Kind::confidence) {
        // Of the tokens drawn, the ones the model is most confident in are kept; the rest stay masked.
        kept = grid_.kept_rows(positions, scores, drawn, loop.batch(), loop.length(), i);
        committed = positions.index_select(0, kept);
        drawn = drawn.index_select(0, kept);
    }
    loop.reverse().stats.rows_drawn += positions.size(0);
    const Redraw redraw = [&](const at::Tensor& which, const at::Tensor& forbidden_bits) {
        const at::Tensor at_rows = kept.defined() ? kept.index_select(0, which) : which;
        at::Tensor again = untruncated.index_select(0, at_rows);
        Composer::forbid(again, forbidden_bits);
        loop.truncate(again);
        return loop.draw_rows(i, again, positions.index_select(0, at_rows), greedy);
    };
    loop.commit_rows(i, committed, drawn, redraw);
}

class ScheduleSampler final : public AbsorbingSampler {
public:
    ScheduleSampler(CommonSettings common, ScheduleSettings own) : AbsorbingSampler(std::move(common)), own_(own) {}
    void fit(const Recipe& recipe) override {
        if (own_.kind == DiscreteSampler::Kind::first_hitting) common_.steps = recipe.max_length;
    }
    void describe(json& out) const override {
        using Kind = DiscreteSampler::Kind;
        if (own_.kind == Kind::confidence) out["order"] = order_name(own_.order);
        if ((own_.kind == Kind::confidence || own_.kind == Kind::first_hitting) && own_.block_length > 0)
            out["block_length"] = own_.block_length;
        if (own_.kind == Kind::analytic && own_.remask.strategy != DiscreteSampler::Remasking::Strategy::none)
            out["remask"] = {{"strategy", strategy_name(own_.remask.strategy)},
                             {"eta", own_.remask.eta},
                             {"from_t", own_.remask.from_t},
                             {"to_t", own_.remask.to_t}};
    }
    void check(const Model& /*model*/, const Recipe& recipe, std::vector<RecipeIssue>& issues) const override {
        using Kind = DiscreteSampler::Kind;
        if (own_.kind == Kind::confidence || own_.kind == Kind::first_hitting)
            check_block_length(own_.block_length, recipe, issues);
        if (own_.kind != Kind::confidence) return;
        const int64_t blocks = DiscreteSampler::block_count(recipe.max_length, own_.block_length);
        if (common_.steps < blocks)
            issues.push_back({"/sampler/steps", std::to_string(common_.steps) + " steps for " + std::to_string(blocks) +
                                                    " blocks of " + std::to_string(own_.block_length) +
                                                    " positions: the confidence sampler needs a step per block"});
    }
    // first_hitting and confidence decode a block-diffusion model when their blocks divide the model's.
    void check_model_blocks(const Model& model, int64_t block, std::vector<RecipeIssue>& issues) const override {
        if (own_.kind != DiscreteSampler::Kind::first_hitting && own_.kind != DiscreteSampler::Kind::confidence)
            return AbsorbingSampler::check_model_blocks(model, block, issues);
        const int64_t b = own_.block_length;
        if (b < 1 || block % b != 0)
            issues.push_back({"/sampler/block_length", blocks_of(model, block) + ": block_length must divide " +
                                                           std::to_string(block) +
                                                           (b < 1 ? " (none given)" : ", not be " + std::to_string(b)) +
                                                           how_to_sample_blocks(block)});
    }
    // The analytic sampler skips a step's evaluation when no position of the batch unmasks (most steps, for one
    // short sequence; almost none in a large batch).
    bool batching_pays() const override { return own_.kind != DiscreteSampler::Kind::analytic; }
    std::unique_ptr<Unmasking> start(const AbsorbingLoop& loop) const override {
        return std::make_unique<ScheduleUnmasking>(DiscreteSampler(
            loop.reverse().model.mask_schedule, own_.kind, common_.steps, own_.block_length, own_.order, own_.remask));
    }

private:
    ScheduleSettings own_;
};

AbsorbingSamplerRow schedule_row(std::string name, DiscreteSampler::Kind kind, std::vector<std::string> keys) {
    AbsorbingSamplerRow r;
    r.name = std::move(name);
    r.keys = std::move(keys);
    r.read = [kind](SamplerObject& o, CommonSettings common) -> std::unique_ptr<AbsorbingSampler> {
        ScheduleSettings own;
        own.kind = kind;
        auto& r = o.reader;
        if (o.applies("order"))
            if (auto v = r.choice("order", {"probability", "margin", "entropy"}))
                own.order = *v == "margin"    ? DiscreteSampler::Order::margin
                            : *v == "entropy" ? DiscreteSampler::Order::entropy
                                              : DiscreteSampler::Order::probability;
        read_block_length(o, own.block_length);
        if (o.applies("remask"))
            if (auto remask = r.object("remask")) {
                using Strategy = DiscreteSampler::Remasking::Strategy;
                json_input::ObjectReader m(*remask, r.pointer("remask"), r.issues());
                if (auto v = m.choice("strategy", {"none", "cap", "rescale"}, json_input::kRequired))
                    own.remask.strategy = *v == "cap"       ? Strategy::cap
                                          : *v == "rescale" ? Strategy::rescale
                                                            : Strategy::none;
                if (auto v = m.number("eta", 0.0, 1.0)) own.remask.eta = *v;
                read_time_window(m, r, "remask", own.remask.from_t, own.remask.to_t);
            }
        return std::make_unique<ScheduleSampler>(std::move(common), own);
    };
    return r;
}

}  // namespace

AbsorbingSamplerRow euler_sampler() { return schedule_row("euler", DiscreteSampler::Kind::euler, {}); }
AbsorbingSamplerRow analytic_sampler() { return schedule_row("analytic", DiscreteSampler::Kind::analytic, {"remask"}); }
AbsorbingSamplerRow first_hitting_sampler() {
    AbsorbingSamplerRow r = schedule_row("first_hitting", DiscreteSampler::Kind::first_hitting, {"block_length"});
    r.refuses = {{"steps", kOneStepAPosition}};
    return r;
}
AbsorbingSamplerRow confidence_sampler() {
    return schedule_row("confidence", DiscreteSampler::Kind::confidence, {"order", "block_length"});
}

}  // namespace rudder::absorbing
