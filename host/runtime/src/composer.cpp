#include "composer.hpp"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <limits>
#include <sstream>

namespace rudder {
namespace {

// Runs one call of a controller. A PluginError fails the run, unless the controller may fail alone ("on_failure":
// "continue"): then it is dropped from the rest of the run with a warning. False if it was (or is now) dropped.
template <class Call> bool take_part(ComposedController& c, Call&& call) {
    if (!c.failure.empty()) return false;
    if (!c.continue_on_failure) {
        call();
        return true;
    }
    try {
        call();
        return true;
    } catch (const plugins::PluginError& e) {
        c.failure = e.what();
        spdlog::warn("{}; the run goes on without it (on_failure: continue)", c.failure);
        return false;
    }
}

}  // namespace

Composer::Composer(std::vector<ComposedController> controllers, Family family, int64_t mask_id)
    : controllers_(std::move(controllers)), family_(family), mask_id_(mask_id) {
    // Controllers in processes of their own read each step's inputs from one shared copy.
    for (auto& c : controllers_) {
        if (c.instance->isolation() != plugins::Isolation::process) continue;
        if (inputs_ == nullptr) inputs_ = std::make_shared<plugins::StepInputShare>();
        c.instance->share_step_inputs(inputs_);
    }
}

void Composer::start_run() {
    for (auto& c : controllers_) c.failure.clear();
}

void Composer::begin(const plugins::RunShape& shape, plugins::RunServices* services) {
    for (auto& c : controllers_) take_part(c, [&] { c.instance->begin(shape, services); });
}

bool Composer::needs_fresh_logits() const {
    for (const auto& c : controllers_)
        if (c.instance->has(RUDDER_CAP_NEEDS_FRESH_LOGITS)) return true;
    return false;
}

bool Composer::wants_guidance(double t) const {
    for (const auto& c : controllers_)
        if (c.instance->has(RUDDER_CAP_GRADIENT) && c.active.contains(t)) return true;
    return false;
}

void Composer::merge_fixed(Combined& out, const at::Tensor& fixed, size_t owner, at::Tensor& owners) {
    const at::Tensor mine = fixed.ge(0);
    if (!out.fixed.defined()) {
        out.fixed = fixed.clone();
        owners = at::full_like(fixed, -1).masked_fill_(mine, static_cast<int64_t>(owner));
        return;
    }
    const at::Tensor clash = mine.logical_and(out.fixed.ge(0)).logical_and(out.fixed.ne(fixed));
    if (clash.any().item<bool>()) {
        const auto where = clash.nonzero()[0];
        const int64_t b = where[0].item<int64_t>(), i = where[1].item<int64_t>();
        const auto& other = controllers_[static_cast<size_t>(owners.index({b, i}).item<int64_t>())];
        throw ConstraintConflict("controllers '" + other.instance->label() + "' and '" +
                                 controllers_[owner].instance->label() + "' fix different tokens at position " +
                                 std::to_string(i) + " (ids " + std::to_string(out.fixed.index({b, i}).item<int64_t>()) +
                                 " and " + std::to_string(fixed.index({b, i}).item<int64_t>()) + ")");
    }
    out.fixed = at::where(mine, fixed, out.fixed);
    owners.masked_fill_(mine, static_cast<int64_t>(owner));
}

Combined Composer::predict(const plugins::StepInputs& in) {
    if (inputs_ != nullptr) inputs_->next_step();
    Combined out;
    at::Tensor owners;                                    // [B, L]: which controller fixed each position
    std::vector<std::pair<size_t, at::Tensor>> forbidders;  // who forbade what, to name them in a conflict
    std::vector<size_t> delta_owners;                       // whose deltas are in out.logit_delta
    bool may_overflow = false;  // the adapter checked each delta finite; a weight or a sum can still overflow
    for (size_t k = 0; k < controllers_.size(); ++k) {
        auto& c = controllers_[k];
        if (!c.active.contains(in.t)) continue;
        const uint64_t predict_caps = RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_HARD_CONSTRAINT |
                                      (family_ == Family::discrete ? RUDDER_CAP_GRADIENT : 0);
        if ((c.instance->capabilities() & predict_caps) == 0) continue;
        plugins::StepOutputs o;
        if (!take_part(c, [&] { o = c.instance->step(in); })) continue;
        auto add_delta = [&](const at::Tensor& d, bool derived) {
            const at::Tensor scaled = d.to(at::kFloat).mul(c.weight);
            may_overflow = may_overflow || derived || c.weight != 1.0 || out.logit_delta.defined();
            out.logit_delta = out.logit_delta.defined() ? out.logit_delta.add_(scaled) : scaled;
            delta_owners.push_back(k);
        };
        if (o.logit_delta.defined()) add_delta(o.logit_delta, false);
        if (o.grad.defined() && family_ == Family::discrete) {
            // First-order Taylor: changing position i from its current token to v changes log p(c) by about
            // g[i, v] - g[i, current].
            const at::Tensor current = o.grad.gather(-1, in.tokens.unsqueeze(-1));
            add_delta(o.grad - current, true);
        }
        if (o.fixed_tokens.defined()) merge_fixed(out, o.fixed_tokens, k, owners);
        if (o.forbidden.defined()) {
            const at::Tensor f = o.forbidden.ne(0);
            forbidders.emplace_back(k, f);
            out.forbidden = out.forbidden.defined() ? f.logical_or(out.forbidden) : f;
        }
    }
    if (may_overflow && !out.logit_delta.isfinite().all().item<bool>()) {
        const at::Tensor where = out.logit_delta.isfinite().logical_not().nonzero()[0];
        std::ostringstream who;
        for (size_t k : delta_owners)
            who << (k == delta_owners.front() ? "'" : ", '") << controllers_[k].instance->label() << "' (weight "
                << controllers_[k].weight << ")";
        throw CompositionError("the logit deltas of " + who.str() + " are not finite once weighted and summed (sample " +
                               std::to_string(where[0].item<int64_t>()) + ", position " +
                               std::to_string(where[1].item<int64_t>()) +
                               "): each is finite, but float32 overflows; lower the weight or the delta");
    }
    if (out.fixed.defined() && mask_id_ >= 0) {
        const at::Tensor masked = out.fixed.eq(mask_id_);
        if (masked.any().item<bool>()) {
            const auto where = masked.nonzero()[0];
            const int64_t b = where[0].item<int64_t>(), i = where[1].item<int64_t>();
            throw CompositionError(
                "controller '" + controllers_[static_cast<size_t>(owners.index({b, i}).item<int64_t>())].instance->label() +
                "' fixes the mask token (id " + std::to_string(mask_id_) + ") at position " + std::to_string(i) +
                ": a finished sample cannot hold it");
        }
    }
    if (out.fixed.defined() && out.forbidden.defined()) {
        const at::Tensor is_fixed = out.fixed.ge(0);
        const at::Tensor hit = out.forbidden.gather(-1, out.fixed.clamp_min(0).unsqueeze(-1)).squeeze(-1).logical_and(is_fixed);
        if (hit.any().item<bool>()) {
            const auto where = hit.nonzero()[0];
            const int64_t b = where[0].item<int64_t>(), i = where[1].item<int64_t>();
            const int64_t token = out.fixed.index({b, i}).item<int64_t>();
            std::string forbidder = "another controller";
            for (const auto& [k, f] : forbidders) {
                if (f.index({b, i, token}).item<bool>()) {
                    forbidder = "'" + controllers_[k].instance->label() + "'";
                    break;
                }
            }
            throw ConstraintConflict("controller '" +
                                     controllers_[static_cast<size_t>(owners.index({b, i}).item<int64_t>())].instance->label() +
                                     "' fixes token id " + std::to_string(token) + " at position " + std::to_string(i) +
                                     ", which " + forbidder + " forbids");
        }
    }
    if (out.forbidden.defined()) {
        const at::Tensor none_left = out.forbidden.all(-1);
        if (out.fixed.defined()) none_left.logical_and_(out.fixed.lt(0));
        if (none_left.any().item<bool>()) {
            const int64_t i = none_left.nonzero()[0][1].item<int64_t>();
            throw ConstraintConflict("the controllers forbid every token at position " + std::to_string(i));
        }
    }
    return out;
}

at::Tensor Composer::guide(const plugins::StepInputs& in) {
    if (inputs_ != nullptr) inputs_->next_step();
    at::Tensor total;
    for (auto& c : controllers_) {
        if (!c.instance->has(RUDDER_CAP_GRADIENT) || !c.active.contains(in.t)) continue;
        plugins::StepOutputs o;
        if (!take_part(c, [&] { o = c.instance->step(in); })) continue;
        if (!o.grad.defined()) continue;
        const at::Tensor scaled = o.grad.mul(c.weight);
        total = total.defined() ? total.add_(scaled) : scaled;
    }
    return total;
}

at::Tensor Composer::apply(const at::Tensor& logp, const Combined& combined, int64_t never_id) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    at::Tensor x = combined.logit_delta.defined() ? logp + combined.logit_delta : logp.clone();
    if (never_id >= 0) x.select(-1, never_id).fill_(neg_inf);
    if (combined.forbidden.defined()) x.masked_fill_(combined.forbidden, neg_inf);
    if (combined.fixed.defined()) {
        const at::Tensor is_fixed = combined.fixed.ge(0).unsqueeze(-1);
        const at::Tensor onehot = at::full_like(x, neg_inf).scatter_(-1, combined.fixed.clamp_min(0).unsqueeze(-1), 0.0);
        x = at::where(is_fixed, onehot, x);
    }
    return at::log_softmax(x, -1);
}

}  // namespace rudder
