#include "particles.hpp"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace rudder {

Particles::Particles(int64_t samples, int64_t per_sample, double scale)
    : samples_(samples), per_sample_(per_sample), scale_(scale) {}

void Particles::score(const Reward& reward, int64_t step) {
    if (!reward.silent.empty())
        throw std::runtime_error("controller '" + reward.silent +
                                 "' steers without reporting log p(c | x) (the ABI's log_prob "
                                 "output) at step " +
                                 std::to_string(step + 1) +
                                 ", and particles are weighed by it; "
                                 "drop 'particles' or use controllers that report it");
    reward_ = reward.log_prob.to(at::kCPU, at::kDouble).reshape({samples_ * per_sample_});
    if (!reward_then_.defined()) reward_then_ = at::zeros_like(reward_);
}

at::Tensor Particles::resample(at::Generator& gen) {
    const at::Tensor gain = (reward_ - reward_then_).mul(scale_).view({samples_, per_sample_});
    const at::Tensor drawn = at::multinomial(at::softmax(gain, 1), per_sample_, /*replacement=*/true, gen);
    const at::Tensor rows = drawn.add(at::arange(samples_, drawn.options()).mul(per_sample_).unsqueeze(1)).view({-1});
    reward_ = reward_.index_select(0, rows);
    reward_then_ = reward_.clone();
    return rows;
}

at::Tensor Particles::leaders() const {
    const at::Tensor first = at::arange(samples_, at::kLong).mul(per_sample_);
    if (!reward_.defined()) return first;
    return std::get<1>(reward_.view({samples_, per_sample_}).max(1)).add(first);
}

at::Tensor Particles::chosen(const at::Tensor& sequences) const {
    if (per_sample_ > 1 && !scored())
        throw std::runtime_error("no controller steered, so the " + std::to_string(per_sample_) +
                                 " particles of a sample "
                                 "have no reward to choose between: give the controllers' 'active' windows steps to "
                                 "steer in, or drop 'particles'");
    return leading(sequences);
}

at::Tensor Particles::leading(const at::Tensor& sequences) const {
    return per_sample_ == 1 ? sequences : sequences.index_select(0, leaders().to(sequences.device()));
}

Combined select_sequences(const Combined& c, const at::Tensor& sequences, int64_t batch, int64_t seq_len) {
    if (c.rows.defined() && c.rows.size(0) != batch * seq_len)
        throw std::logic_error("select_sequences: the combination's rows are not every position of its sequences");
    // A tensor over every position, [B * L, ...]: taken a sequence at a time.
    auto take = [&](const at::Tensor& t) -> at::Tensor {
        if (!t.defined()) return t;
        std::vector<int64_t> per_sequence{batch, seq_len}, flat{-1};
        for (int64_t d = 1; d < t.dim(); ++d) {
            per_sequence.push_back(t.size(d));
            flat.push_back(t.size(d));
        }
        return t.reshape(per_sequence).index_select(0, sequences).reshape(flat);
    };
    Combined out;
    if (c.rows.defined()) out.rows = at::arange(sequences.size(0) * seq_len, c.rows.options());
    out.logit_delta = take(c.logit_delta);
    out.candidate_ids = take(c.candidate_ids);
    out.candidate_delta = take(c.candidate_delta);
    out.forbidden = take(c.forbidden);
    out.forbidden_bits = take(c.forbidden_bits);
    if (c.fixed.defined()) out.fixed = c.fixed.index_select(0, sequences);  // [B, L]
    return out;
}

}  // namespace rudder
