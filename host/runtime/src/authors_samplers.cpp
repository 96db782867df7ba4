#include "authors_samplers.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "sampler.hpp"

namespace rudder {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

at::Tensor full_rows(const at::Tensor& scores, const at::Tensor& outside, int64_t mask_id) {
    if (scores.dim() != 2 || outside.dim() != 2 || outside.size(0) != scores.size(0) || outside.size(1) < 1 ||
        mask_id < 0 || mask_id >= scores.size(1))
        throw std::invalid_argument("full_rows: scores [n, V] and outside [n, 1 + R] with the mask among the V");
    at::Tensor full = at::cat({scores.to(at::kFloat), outside.narrow(1, 1, outside.size(1) - 1).to(at::kFloat)}, 1);
    full.select(1, mask_id).copy_(outside.select(1, 0));
    return at::log_softmax(full, 1);
}

void PromptBlocks::lay_out(int64_t prompt_length, int64_t sequence_length, int64_t block_length,
                           const std::string& sampler) {
    const int64_t generated = sequence_length - prompt_length;
    if (prompt_length < 0 || generated < 1)
        throw std::invalid_argument("the " + sampler + " sampler found no masked position after the prompt (" +
                                    std::to_string(prompt_length) + " of " + std::to_string(sequence_length) +
                                    " positions)");
    size = block_length > 0 ? std::min(block_length, generated) : generated;
    count = (generated + size - 1) / size;
    prompt = prompt_length;
    length = sequence_length;
}

std::pair<int64_t, int64_t> PromptBlocks::range(int64_t b) const {
    return {prompt + b * size, std::min(length, prompt + (b + 1) * size)};
}

int64_t PromptBlocks::first_unfinished(int64_t from, const at::Tensor& masked) const {
    for (int64_t b = from; b < count; ++b) {
        const auto [begin, end] = range(b);
        if (masked.narrow(1, begin, end - begin).any().item<bool>()) return b;
    }
    return count;
}

// ---------------------------------------------------------------------------------------------------------------
// LLaDA

LladaSampler::LladaSampler(int64_t steps, int64_t block_length, Remasking remasking, double temperature,
                           Parallel parallel)
    : steps_(steps), block_length_(block_length), remasking_(remasking), temperature_(temperature),
      parallel_(parallel) {
    if (steps < 1) throw std::invalid_argument("llada sampler: steps must be >= 1");
    if (block_length < 0) throw std::invalid_argument("llada sampler: block_length must be >= 0");
    if (!(temperature >= 0.0)) throw std::invalid_argument("llada sampler: temperature must be >= 0");
}

void LladaSampler::start(int64_t prompt, int64_t length) {
    PromptBlocks blocks;
    blocks.lay_out(prompt, length, block_length_, "llada");
    if (!dynamic() && steps_ < blocks.count)
        throw std::invalid_argument("the llada sampler has " + std::to_string(steps_) + " steps for " +
                                    std::to_string(blocks.count) + " blocks of " + std::to_string(blocks.size) +
                                    " positions after the " + std::to_string(prompt) + "-position prompt (gen_length " +
                                    std::to_string(length - prompt) + "): each block needs a step");
    blocks_ = blocks;
}

namespace {
// Block of step i and the step's index within it: steps / blocks each, the first steps % blocks one more (LLaDA
// asks for steps divisible by the blocks; then every block has the same).
struct BlockStep {
    int64_t block = 0, index = 0, steps = 1;
};
BlockStep block_step(int64_t i, int64_t steps, int64_t blocks) {
    const int64_t base = steps / blocks, extra = steps % blocks;
    int64_t first = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t count = base + (b < extra ? 1 : 0);
        if (i < first + count) return {b, i - first, count};
        first += count;
    }
    throw std::out_of_range("llada sampler: step " + std::to_string(i) + " past the last");
}
}  // namespace

std::pair<int64_t, int64_t> LladaSampler::block(int64_t i) const {
    return blocks_.range(dynamic() ? current_block_ : block_step(i, steps_, blocks_.count).block);
}

bool LladaSampler::first_of_block(int64_t i) const { return block_step(i, steps_, blocks_.count).index == 0; }

bool LladaSampler::advance(const at::Tensor& masked) {
    current_block_ = blocks_.first_unfinished(current_block_, masked);
    return current_block_ < blocks_.count;
}

at::Tensor LladaSampler::parallel_count(const at::Tensor& drawn, const at::Tensor& confidence) const {
    return parallel_commits(parallel_, drawn, confidence);
}

at::Tensor parallel_commits(const ParallelDecoding& parallel, const at::Tensor& drawn, const at::Tensor& confidence) {
    const at::Tensor m = drawn.sum(1).cpu();
    if (parallel.rule == ParallelDecoding::Rule::threshold) {
        // The most confident always; every other reaching the threshold (Fast-dLLM drops those below it).
        const at::Tensor reaching = confidence.ge(parallel.value).logical_and(drawn).sum(1).cpu();
        return at::where(m.gt(0), reaching.clamp_min(1), m);
    }
    // factor: confidences sorted c_1 >= c_2 >= ... over the m drawn, thresholds 1 - factor / (n + 1) with the first
    // -1; n = the first position whose confidence is below its threshold, or m when none is. As Fast-dLLM's loop
    // gives it, a miss at the last position (n = m - 1) still commits all m.
    const at::Tensor sorted = std::get<0>(confidence.to(at::kDouble).cpu().sort(1, /*descending=*/true));
    at::Tensor out = at::zeros_like(m);
    auto count = out.accessor<int64_t, 1>();
    const auto c = sorted.accessor<double, 2>();
    const auto masked_count = m.accessor<int64_t, 1>();
    for (int64_t b = 0; b < sorted.size(0); ++b) {
        const int64_t total = masked_count[b];
        if (total == 0) continue;
        int64_t n = total;
        for (int64_t j = 1; j < total; ++j)
            if (c[b][j] < 1.0 - parallel.value / static_cast<double>(j + 2)) {
                n = j == total - 1 ? total : j;
                break;
            }
        count[b] = n;
    }
    return out;
}

int64_t LladaSampler::step_in_block(int64_t i) const { return block_step(i, steps_, blocks_.count).index; }

at::Tensor LladaSampler::schedule(const at::Tensor& masked, int64_t i) const {
    const int64_t n = block_step(i, steps_, blocks_.count).steps;
    const at::Tensor m = masked.to(at::kLong).cpu().unsqueeze(1);
    const at::Tensor base = m.div(n, "floor"), extra = m.remainder(n);
    return base + at::arange(n, at::kLong).unsqueeze(0).lt(extra).to(at::kLong);
}

at::Tensor LladaSampler::draw(const at::Tensor& full, at::Generator& gen) const {
    if (temperature_ == 0.0) return DiscreteSampler::arg_max(full);
    // LLaDA's exp(logits) / (-log u)^T is Gumbel-max at the temperature, in float64.
    return DiscreteSampler::draw(full.to(at::kDouble).div(temperature_), gen);
}

at::Tensor LladaSampler::confidence(const at::Tensor& full, const at::Tensor& tokens, const at::Tensor& positions,
                                    int64_t batch, int64_t length, at::Generator& gen) const {
    if (remasking_ == Remasking::low_confidence) return full.gather(1, tokens.unsqueeze(1)).squeeze(1).exp();
    const at::Tensor u = at::rand({batch * length}, gen, at::TensorOptions().dtype(at::kFloat));
    return u.index_select(0, positions.cpu()).to(full.device());
}

// ---------------------------------------------------------------------------------------------------------------
// Dream

DreamSampler::DreamSampler(int64_t steps, double eps, Alg alg, double alg_temp, double temperature, int64_t top_k,
                           double top_p, DreamBlocks blocks)
    : steps_(steps), times_(at::linspace(1.0, eps, steps + 1, at::TensorOptions().dtype(at::kFloat))), alg_(alg),
      alg_temp_(alg_temp), temperature_(temperature), top_k_(top_k), top_p_(top_p), blocks_(blocks) {
    if (steps < 1) throw std::invalid_argument("dream sampler: steps must be >= 1");
    if (!(eps > 0.0 && eps < 1.0)) throw std::invalid_argument("dream sampler: eps must be in (0, 1)");
}

void DreamSampler::start(int64_t prompt, int64_t length) {
    PromptBlocks layout;
    layout.lay_out(prompt, length, blocks_.block_length, "dream");
    const int64_t per_block = steps_ / layout.count;
    // Fast-dLLM's loop: a block's first call commits one position, its other steps the rest; one step would leave
    // the block masked.
    if (!dynamic() && per_block < 2)
        throw std::invalid_argument("the dream sampler's block decoding has " + std::to_string(steps_) + " steps for " +
                                    std::to_string(layout.count) + " blocks of " + std::to_string(layout.size) +
                                    " positions after the " + std::to_string(prompt) +
                                    "-position prompt: each block needs two steps or more");
    layout_ = layout;
    steps_per_block_ = per_block;
    block_times_ =
        at::linspace(1.0, times_[steps_].item<double>(), steps_per_block_ + 1, at::TensorOptions().dtype(at::kFloat));
    opening_ = true;
}

std::pair<int64_t, int64_t> DreamSampler::block(int64_t i) const {
    return layout_.range(dynamic() ? current_block_ : std::min(i / steps_per_block_, layout_.count - 1));
}

bool DreamSampler::advance(const at::Tensor& masked) {
    const int64_t next = layout_.first_unfinished(current_block_, masked);
    if (next != current_block_) opening_ = true;
    current_block_ = next;
    return current_block_ < layout_.count;
}

bool DreamSampler::opens_block(int64_t i) {
    if (!dynamic()) return i % steps_per_block_ == 0;
    const bool opening = opening_;
    opening_ = false;
    return opening;
}

at::Tensor DreamSampler::block_commits(const at::Tensor& masked, int64_t i) const {
    const int64_t j = i % steps_per_block_;
    if (j >= steps_per_block_ - 1) return masked.to(at::kLong).cpu();
    const at::Tensor share = 1 - block_times_[j + 1] / block_times_[j];
    return (masked.to(at::kFloat).cpu() * share).to(at::kLong);
}

at::Tensor DreamSampler::threshold_commits(const at::Tensor& drawn, const at::Tensor& confidence) const {
    return parallel_commits({ParallelDecoding::Rule::threshold, blocks_.threshold}, drawn, confidence);
}

double DreamSampler::t(int64_t i) const { return times_[i].item<float>(); }
double DreamSampler::t_next(int64_t i) const { return times_[i + 1].item<float>(); }

at::Tensor DreamSampler::choose(const at::Tensor& masked, int64_t i, at::Generator& gen) const {
    if (i == steps_ - 1) return masked.clone();
    const at::Tensor where = masked.reshape({-1}).nonzero().squeeze(1);
    // One float32 uniform per masked position, in order, against 1 - s / t in float32: Dream's draw.
    const at::Tensor p = 1 - times_[i + 1] / times_[i];
    const at::Tensor u = at::rand({where.size(0)}, gen, at::TensorOptions().dtype(at::kFloat));
    at::Tensor out = at::zeros({masked.numel()}, masked.options().dtype(at::kBool));
    out.index_put_({where}, u.lt(p).to(masked.device()));
    return out.view(masked.sizes());
}

at::Tensor DreamSampler::shaped(at::Tensor full) const {
    full = full.to(at::kFloat);
    if (temperature_ > 0.0) full = full / temperature_;
    if (top_p_ < 1.0) {
        // Dream's top_p: a token goes when the tokens above it hold more than top_p (float32 sums).
        const auto [sorted, index] = full.sort(1, /*descending=*/true);
        const at::Tensor p = at::softmax(sorted, 1);
        const at::Tensor gone = (p.cumsum(1) - p).gt(top_p_);
        full = full.masked_fill(at::zeros_like(gone).scatter_(1, index, gone), kNegInf);
    }
    if (top_k_ > 0 && top_k_ < full.size(1)) {
        const at::Tensor kth = std::get<0>(full.topk(top_k_, 1)).narrow(1, top_k_ - 1, 1);
        full = full.masked_fill(full.lt(kth), kNegInf);
    }
    return at::log_softmax(full, 1);
}

at::Tensor DreamSampler::draw(const at::Tensor& shaped, at::Generator& gen) const {
    return temperature_ == 0.0 ? DiscreteSampler::arg_max(shaped) : DiscreteSampler::draw(shaped, gen);
}

at::Tensor DreamSampler::confidence(const at::Tensor& shaped, const at::Tensor& tokens) const {
    if (!blocks_.on) return confidence_as(alg_, shaped, tokens);
    return confidence_as(dynamic() ? Alg::maskgit_plus : Alg::entropy, shaped, tokens);
}

at::Tensor DreamSampler::confidence_as(Alg alg, const at::Tensor& shaped, const at::Tensor& tokens) const {
    const at::Tensor p = shaped.exp();
    switch (alg) {
        case Alg::origin: return at::zeros({shaped.size(0)}, p.options());
        case Alg::maskgit_plus: return p.gather(1, tokens.unsqueeze(1)).squeeze(1);
        case Alg::topk_margin: {
            const at::Tensor top = std::get<0>(p.topk(2, 1));
            return top.select(1, 0) - top.select(1, 1);
        }
        case Alg::entropy: return (p * (p + 1e-10).log()).sum(1);  // minus the entropy, Dream's epsilon
    }
    throw std::logic_error("DreamSampler::confidence: unknown alg");
}

at::Tensor DreamSampler::commits(const at::Tensor& masked, int64_t i) const {
    if (i == steps_ - 1) return masked.to(at::kLong);
    const at::Tensor share = 1 - times_[i + 1] / times_[i];
    return (masked.to(at::kFloat).cpu() * share).to(at::kLong);  // int(): towards zero
}

at::Tensor DreamSampler::keep(const at::Tensor& drawn, const at::Tensor& confidence, const at::Tensor& count,
                              at::Generator& gen) const {
    if (alg_temp_ <= 0.0) return keep_highest(drawn, confidence, count);
    // Drawing `count` positions without replacement in proportion to softmax(confidence / alg_temp), as Dream's
    // multinomial does: the highest of confidence / alg_temp plus Gumbel noise (the Gumbel-top-k trick).
    const at::Tensor u = at::rand(drawn.sizes(), gen, at::TensorOptions().dtype(at::kDouble)).to(drawn.device());
    const at::Tensor gumbel = -(-u.clamp_min(std::numeric_limits<double>::min()).log()).log();
    return keep_highest(drawn, (confidence.to(at::kDouble) / alg_temp_ + gumbel).to(at::kFloat), count);
}

// ---------------------------------------------------------------------------------------------------------------
// MDLM

NoiseRemovalGrid::NoiseRemovalGrid(int64_t steps, double eps, bool noise_removal, const std::string& sampler)
    : steps_(steps), noise_removal_(noise_removal) {
    if (steps < 1) throw std::invalid_argument(sampler + " sampler: steps must be >= 1");
    if (!(eps > 0.0 && eps < 1.0)) throw std::invalid_argument(sampler + " sampler: eps must be in (0, 1)");
    // Read once: the loop asks for a time several times a step.
    const at::Tensor times = at::linspace(1.0, eps, steps + 1, at::TensorOptions().dtype(at::kFloat)).contiguous();
    times_.assign(times.data_ptr<float>(), times.data_ptr<float>() + steps + 1);
    dt_ = static_cast<float>((1.0 - eps) / static_cast<double>(steps));
}

float NoiseRemovalGrid::time(int64_t i) const { return times_[static_cast<size_t>(std::min(i, steps_))]; }

double NoiseRemovalGrid::t(int64_t i) const { return time(i); }

double NoiseRemovalGrid::t_next(int64_t i) const { return i + 1 >= steps() ? 0.0 : t(i + 1); }

at::Tensor MdlmSampler::uniforms(int64_t batch, int64_t length, int64_t columns, at::Generator& gen) const {
    return at::rand({batch * length, columns}, gen, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor gumbel_argmax(const at::Tensor& q, const at::Tensor& u) {
    const at::Tensor gumbel = at::rsub(u.to(q.device()).add(1e-10).log_(), 1e-10);
    return q.div(gumbel).argmax(1);
}

at::Tensor MdlmSampler::draw(const at::Tensor& probs, const at::Tensor& u, int64_t mask_column, int64_t i) const {
    if (grid_.removes_noise(i)) return probs.argmax(1);
    // MDLM's float32 arithmetic: move_chance_s = t - dt, q = p0 (t - move_chance_s), q[mask] = move_chance_s.
    const float t_now = grid_.time(i);
    const float s = t_now - grid_.dt();
    at::Tensor q = probs.to(at::kFloat).mul(t_now - s);
    q.select(1, mask_column).fill_(s);
    return gumbel_argmax(q, u);
}

// ---------------------------------------------------------------------------------------------------------------
// SEDD

namespace {
// SEDD's log-linear noise (its noise_lib, eps 1e-3) in float32, as it computes it: total noise and its rate.
float sedd_total_noise(float t) { return -std::log1p(-(1.0f - 1e-3f) * t); }
float sedd_rate_noise(float t) { return (1.0f - 1e-3f) / (1.0f - (1.0f - 1e-3f) * t); }
}  // namespace

at::Tensor SeddSampler::uniforms(int64_t batch, int64_t length, int64_t rows, int64_t i, at::Generator& gen) const {
    const int64_t columns = grid_.removes_noise(i) ? rows - 1 : rows;
    return at::rand({batch * length, columns}, gen, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor SeddSampler::draw(const at::Tensor& log_p0, const at::Tensor& log_total, const at::Tensor& u,
                             int64_t mask_column, int64_t i) const {
    const at::Tensor p0 = log_p0.to(at::kFloat).exp();
    if (grid_.removes_noise(i)) {
        if (mask_column != p0.size(1) - 1)
            throw std::invalid_argument("sedd sampler: SEDD's mask is its last row, not " +
                                        std::to_string(mask_column));
        // The Denoiser's probabilities at a masked position are the score times e^sigma - 1 over every row but the
        // mask (truncated): p0 itself up to a factor of the row, which Gumbel-max does not see.
        return gumbel_argmax(p0.narrow(1, 0, p0.size(1) - 1), u);
    }
    const float t_now = grid_.time(i);
    float c;
    if (predictor_ == Predictor::euler) {
        c = grid_.dt() * sedd_rate_noise(t_now);
    } else {
        const float dsigma = sedd_total_noise(t_now) - sedd_total_noise(t_now - grid_.dt());
        c = std::exp(dsigma) - 1.0f;
    }
    const at::Tensor total = log_total.to(at::kFloat).exp().unsqueeze(1);  // S per row
    at::Tensor q = p0.mul(total).mul_(c);
    q.select(1, mask_column).copy_(total.squeeze(1).mul(-c).add_(1.0f));
    return gumbel_argmax(q, u);
}

// ---------------------------------------------------------------------------------------------------------------
// BD3-LM

Bd3lmSampler::Bd3lmSampler(int64_t length, int64_t block, double top_p, double temperature)
    : length_(length), block_(block), top_p_(top_p), temperature_(temperature) {
    if (length < 1 || block < 1) throw std::invalid_argument("bd3lm sampler: length and block must be >= 1");
}

double Bd3lmSampler::t(int64_t i) const {
    return std::max(0.0, 1.0 - static_cast<double>(i) / static_cast<double>(length_));
}

at::Tensor Bd3lmSampler::uniforms(int64_t batch, int64_t columns, at::Generator& gen) const {
    return at::rand({batch, block_, columns}, gen, at::TensorOptions().dtype(at::kDouble));
}

int64_t Bd3lmSampler::pick(int64_t masked, at::Generator& gen) const {
    return at::randint(0, masked, {1}, gen, at::TensorOptions().dtype(at::kLong)).item<int64_t>();
}

at::Tensor Bd3lmSampler::draw(const at::Tensor& full, const at::Tensor& u) const {
    // BD3-LM widens its float32 log-probabilities, then exponentiates; top_p 1 leaves them unnormalised, as it does.
    at::Tensor p = full.to(at::kFloat).to(at::kDouble).exp();
    if (top_p_ < 1.0) {
        const auto [ordered, order] = p.sort(1, /*descending=*/true);
        at::Tensor keep = ordered.cumsum(1).le(top_p_);
        keep.select(1, 0).fill_(true);
        p = at::zeros_like(p).scatter_(1, order, ordered.mul(keep));
        p.div_(p.sum(1, /*keepdim=*/true));
    }
    if (temperature_ == 0.0) return p.argmax(1);
    return gumbel_argmax(p, u.to(at::kDouble));
}

bool Bd3lmSampler::low_entropy(const at::Tensor& tokens) {
    constexpr int64_t kWindow = 256;
    if (tokens.size(0) <= kWindow) return false;
    const at::Tensor counts = std::get<2>(at::_unique2(tokens.narrow(0, tokens.size(0) - kWindow, kWindow),
                                                       /*sorted=*/true, /*return_inverse=*/false,
                                                       /*return_counts=*/true));
    const at::Tensor share = counts.to(at::kFloat).div(counts.sum());
    return at::special_entr(share).sum().item<float>() < 4.0f;
}

}  // namespace rudder
