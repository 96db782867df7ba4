// mdlm and sedd: MDLM's _sample() (ddpm_cache) and SEDD's pc_sampler on its absorbing graph, step for step
// (authors_samplers.hpp). Both draw whether a position unmasks together with its token, by Gumbel-max over the tokens
// and the mask from uniforms over the whole grid of the network's rows; a noise removal's call may end the run.
#include <ATen/ATen.h>

#include "../authors_samplers.hpp"
#include "absorbing_loop.hpp"

namespace rudder::absorbing {
namespace {

using json = nlohmann::json;

struct GridSettings {
    double eps = 1e-5;          // its last time
    bool noise_removal = true;  // a last call commits the tokens where still masked
    SeddSampler::Predictor predictor = SeddSampler::Predictor::euler;  // sedd
};

// The step's uniforms for the whole grid, then at each masked position of the step's rows a Gumbel-max draw over
// every row the network has from the controlled clean-token probabilities (at the temperature, truncated), the mask's
// entry the chance to stay masked. What is drawn is committed through the COMMIT controllers.
template <class Sampler>
class GridUnmasking : public Unmasking {
public:
    explicit GridUnmasking(Sampler sampler) : sampler_(std::move(sampler)) {}
    int64_t steps() const override { return sampler_.grid().steps(); }
    double t(int64_t i) const override { return sampler_.grid().t(i); }
    double t_next(int64_t i) const override { return sampler_.grid().t_next(i); }
    // The draw says whether a position unmasks.
    at::Tensor choose(const at::Tensor& masked, int64_t /*i*/, AbsorbingLoop& /*loop*/) override {
        return masked.clone();
    }
    // The authors' loops draw their uniforms at every step, whatever is masked (a later batch reads on); MDLM's noise
    // removal draws none.
    void idle(int64_t i, AbsorbingLoop& loop) override {
        if (!takes_arg_max(i) && loop.grid_columns() > 0) uniforms(i, loop);
    }
    void draw(int64_t i, at::Tensor unmask, const Combined& combined, const at::Tensor& row_logits,
              AbsorbingLoop& loop) override {
        const bool arg_max = takes_arg_max(i);
        const at::Tensor u = arg_max ? at::Tensor() : uniforms(i, loop);
        auto rows = loop.rows_to_draw(unmask, combined, row_logits);
        if (!rows) return;
        const at::Tensor& positions = rows->positions;
        at::Tensor& scores = rows->scores;
        loop.temper(scores);
        loop.truncate(scores);
        const at::Tensor tokens = [&] {
            if (arg_max) return loop.draw_rows(i, scores, positions, true);
            loop.fault_if_any_empty(i, positions, scores);
            const at::Tensor rows_u = u.index_select(0, positions.cpu());
            return draw_tokens(loop.every_network_row(scores, positions, rows->drawn_at_row, combined), positions,
                               rows_u, i, loop);
        }();
        loop.reverse().stats.rows_drawn += positions.size(0);
        loop.commit_draws(i, positions, tokens, scores, arg_max);
    }

protected:
    // mdlm's noise removal takes the arg-max within the vocabulary.
    virtual bool takes_arg_max(int64_t i) const = 0;
    virtual at::Tensor uniforms(int64_t i, AbsorbingLoop& loop) const = 0;
    // The tokens drawn at `positions` from their log-probabilities over every row the network has, with their
    // uniforms `u`; the mask where a position stays masked.
    virtual at::Tensor draw_tokens(const at::Tensor& full, const at::Tensor& positions, const at::Tensor& u, int64_t i,
                                   const AbsorbingLoop& loop) const = 0;
    Sampler sampler_;
};

class MdlmUnmasking final : public GridUnmasking<MdlmSampler> {
public:
    using GridUnmasking::GridUnmasking;

private:
    bool takes_arg_max(int64_t i) const override { return sampler_.grid().removes_noise(i); }
    at::Tensor uniforms(int64_t /*i*/, AbsorbingLoop& loop) const override {
        return sampler_.uniforms(loop.batch(), loop.length(), loop.grid_columns(), loop.gen());
    }
    at::Tensor draw_tokens(const at::Tensor& full, const at::Tensor& /*positions*/, const at::Tensor& u, int64_t i,
                           const AbsorbingLoop& loop) const override {
        return sampler_.draw(full.exp(), u, loop.mask_id(), i);
    }
};

// sedd's draws read the network's total unmasking score; its noise removal draws over every row but the mask.
class SeddUnmasking final : public GridUnmasking<SeddSampler> {
public:
    using GridUnmasking::GridUnmasking;

private:
    bool takes_arg_max(int64_t /*i*/) const override { return false; }
    at::Tensor uniforms(int64_t i, AbsorbingLoop& loop) const override {
        return sampler_.uniforms(loop.batch(), loop.length(), loop.grid_columns(), i, loop.gen());
    }
    at::Tensor draw_tokens(const at::Tensor& full, const at::Tensor& positions, const at::Tensor& u, int64_t i,
                           const AbsorbingLoop& loop) const override {
        return sampler_.draw(full, loop.score_total().index_select(0, positions), u, loop.mask_id(), i);
    }
};

class GridSampler final : public AbsorbingSampler {
public:
    GridSampler(CommonSettings common, GridSettings own) : AbsorbingSampler(std::move(common)), own_(own) {}
    int64_t steps() const override { return common_.steps + (own_.noise_removal ? 1 : 0); }
    void describe(json& out) const override {
        out["eps"] = own_.eps;
        out["noise_removal"] = own_.noise_removal;
        if (is_sedd()) out["predictor"] = own_.predictor == SeddSampler::Predictor::analytic ? "analytic" : "euler";
    }
    void check(const Model& model, const Recipe& /*recipe*/, std::vector<RecipeIssue>& issues) const override {
        if (common_.temperature == 0.0)
            issues.push_back({"/sampler/temperature",
                              "the " + name() +
                                  " sampler draws whether a position unmasks together with its token (Gumbel-max over "
                                  "the tokens and the mask, as the authors' code draws), so temperature 0 has no "
                                  "arg-max to take; give a temperature above 0, or the confidence sampler to decode "
                                  "by arg-max"});
        if (is_sedd() && !model.denoiser->traits().gives_score_total)
            issues.push_back({"/sampler/name", "the sedd sampler reads SEDD's score, which model '" + model.name +
                                                   "' does not give (a SEDD checkpoint does)"});
    }
    std::unique_ptr<Unmasking> start(const AbsorbingLoop& /*loop*/) const override {
        if (is_sedd())
            return std::make_unique<SeddUnmasking>(
                SeddSampler(common_.steps, own_.eps, own_.predictor, own_.noise_removal));
        return std::make_unique<MdlmUnmasking>(MdlmSampler(common_.steps, own_.eps, own_.noise_removal));
    }

private:
    bool is_sedd() const { return name() == "sedd"; }
    GridSettings own_;
};

AbsorbingSamplerRow grid_row(std::string name, std::vector<std::string> keys) {
    AbsorbingSamplerRow r;
    r.name = std::move(name);
    r.keys = std::move(keys);
    r.default_steps = 128;  // their configs' sampling.steps
    r.read = [](SamplerObject& o, CommonSettings common) -> std::unique_ptr<AbsorbingSampler> {
        GridSettings own;
        read_eps(o, own.eps);
        if (o.applies("noise_removal"))
            if (auto v = o.reader.boolean("noise_removal")) own.noise_removal = *v;
        if (o.applies("predictor"))
            if (auto v = o.reader.choice("predictor", {"euler", "analytic"}))
                own.predictor = *v == "analytic" ? SeddSampler::Predictor::analytic : SeddSampler::Predictor::euler;
        return std::make_unique<GridSampler>(std::move(common), own);
    };
    return r;
}

}  // namespace

AbsorbingSamplerRow mdlm_sampler() { return grid_row("mdlm", {"eps", "noise_removal"}); }
AbsorbingSamplerRow sedd_sampler() { return grid_row("sedd", {"eps", "noise_removal", "predictor"}); }

}  // namespace rudder::absorbing
