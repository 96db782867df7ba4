#include "composer.hpp"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstring>
#include <limits>
#include <sstream>

#include <rudder/base/parallel_rows.hpp>

namespace rudder {
namespace {

// The merge of fixed tokens and the conflict checks run at every step on a few rows: on CPU tensors they are loops
// (ATen's dispatch of the half dozen operators a check takes costs more than the check there); elsewhere ATen.
bool in_cpu_memory(const at::Tensor& t) { return t.device().is_cpu() && t.is_contiguous(); }

// Runs one call of a controller. A PluginError fails the run, unless the controller may fail alone ("on_failure":
// "continue"): then it is dropped from the rest of the run with a warning. False if it was (or is now) dropped.
template <class Call>
bool take_part(ComposedController& c, Call&& call) {
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

Composer::Composer(std::vector<ComposedController> controllers, Family family, int64_t mask_id, int64_t vocab_size)
    : controllers_(std::move(controllers)), family_(family), mask_id_(mask_id), vocab_size_(vocab_size) {
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
    const auto clash_at = [&](int64_t b, int64_t i) {
        const auto other = static_cast<size_t>(owners.index({b, i}).item<int64_t>());
        throw ConstraintConflict("controllers " + label(other) + " and " + label(owner) +
                                     " fix different tokens at position " + std::to_string(i) + ": " +
                                     token_name(out.fixed.index({b, i}).item<int64_t>()) + " and " +
                                     token_name(fixed.index({b, i}).item<int64_t>()),
                                 {other, owner});
    };
    if (!out.fixed.defined()) {
        out.fixed = fixed.clone();
        owners = at::full_like(fixed, -1).masked_fill_(fixed.ge(0), static_cast<int64_t>(owner));
        return;
    }
    if (in_cpu_memory(fixed) && in_cpu_memory(out.fixed) && in_cpu_memory(owners)) {
        // [B, L] at every step: a loop (see in_cpu_memory).
        const int64_t* theirs = fixed.data_ptr<int64_t>();
        int64_t* merged = out.fixed.data_ptr<int64_t>();
        int64_t* owner_of = owners.data_ptr<int64_t>();
        const int64_t L = fixed.size(1);
        for (int64_t p = 0, n = fixed.numel(); p < n; ++p) {
            if (theirs[p] < 0) continue;
            if (merged[p] >= 0 && merged[p] != theirs[p]) clash_at(p / L, p % L);
            merged[p] = theirs[p];
            owner_of[p] = static_cast<int64_t>(owner);
        }
        return;
    }
    const at::Tensor mine = fixed.ge(0);
    const at::Tensor clash = mine.logical_and(out.fixed.ge(0)).logical_and(out.fixed.ne(fixed));
    if (clash.any().item<bool>()) {
        const auto where = clash.nonzero()[0];
        clash_at(where[0].item<int64_t>(), where[1].item<int64_t>());
    }
    out.fixed = at::where(mine, fixed, out.fixed);
    owners.masked_fill_(mine, static_cast<int64_t>(owner));
}

uint64_t Composer::predict_capabilities() const {
    // A controller that writes candidate deltas only (CANDIDATES without LOGIT_DELTA) steers too.
    return RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_CANDIDATES |
           (family_ == Family::discrete ? RUDDER_CAP_GRADIENT : 0);
}

Composer::Reads Composer::reads(double t) const {
    Reads r;
    const uint64_t predict_caps = predict_capabilities();
    for (const auto& c : controllers_) {
        if (!c.active.contains(t) || !c.failure.empty() || (c.instance->capabilities() & predict_caps) == 0) continue;
        r.any = true;  // a controller takes part in this PREDICT step
        if (!c.instance->has(RUDDER_CAP_IGNORES_X0)) (c.instance->has(RUDDER_CAP_ROWS) ? r.x0_rows : r.whole_x0) = true;
        r.candidates = r.candidates || c.instance->has(RUDDER_CAP_CANDIDATES);
    }
    return r;
}

namespace {

// A controller's output over [B, L, X] (or already over the rows, [N, X]) at the step's rows, [N, X].
at::Tensor at_rows(const at::Tensor& t, const at::Tensor& rows) {
    if (t.dim() == 2) return t;
    const at::Tensor flat = t.reshape({t.size(0) * t.size(1), t.size(2)});
    return rows.size(0) == flat.size(0) ? flat : flat.index_select(0, rows);
}

// Packed token bits [N, W] (token v = bit v % 32 of word v / 32) as bool [N, V]. Little-endian words: byte j of word
// w holds tokens 32 w + 8 j ... 32 w + 8 j + 7 in its bits 0..7, so one gather from a 256 x 8 table of each byte's
// bits unpacks a row in token order (one pass that writes the mask, instead of a shift, an and and a compare).
at::Tensor unpack_bits(const at::Tensor& bits, int64_t V) {
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                  "unpack_bits reads the words' bytes in little-endian order");
    static const at::Tensor table = [] {
        at::Tensor t = at::empty({256, 8}, at::kBool);
        auto a = t.accessor<bool, 2>();
        for (int b = 0; b < 256; ++b)
            for (int k = 0; k < 8; ++k) a[b][k] = ((b >> k) & 1) != 0;
        return t;
    }();
    const int64_t N = bits.size(0);
    const at::Tensor bytes = bits.contiguous().view(at::kByte).reshape({-1}).to(at::kLong);
    return table.to(bits.device()).index_select(0, bytes).view({N, -1}).narrow(1, 0, V);
}

// The first row r whose token fixed_rows[r] (int64 [N], -1 where free) `mask` forbids (bool [N, V], or packed token
// bits [N, W] with `packed`), or -1.
int64_t first_forbidden_fixed(const at::Tensor& mask, bool packed, const at::Tensor& fixed_rows) {
    if (!in_cpu_memory(mask) || !in_cpu_memory(fixed_rows)) {
        const at::Tensor token = fixed_rows.clamp_min(0).unsqueeze(1);
        const at::Tensor forbidden = packed ? mask.gather(1, token.bitwise_right_shift(5))
                                                  .bitwise_right_shift(token.bitwise_and(31))
                                                  .bitwise_and(1)
                                                  .ne(0)
                                            : mask.gather(1, token);
        const at::Tensor hit = forbidden.squeeze(1).logical_and(fixed_rows.ge(0));
        return hit.any().item<bool>() ? hit.nonzero()[0][0].item<int64_t>() : -1;
    }
    const int64_t N = fixed_rows.size(0), width = mask.size(1);
    const int64_t* fixed = fixed_rows.data_ptr<int64_t>();
    for (int64_t r = 0; r < N; ++r) {
        const int64_t token = fixed[r];
        if (token < 0) continue;
        const bool forbidden =
            packed ? ((static_cast<const uint32_t*>(mask.data_ptr())[r * width + token / 32] >> (token % 32)) & 1u) != 0
                   : mask.data_ptr<bool>()[r * width + token];
        if (forbidden) return r;
    }
    return -1;
}

// The first row of packed forbidden token bits [N, W] that forbids every token of [0, V), token `also` (if >= 0)
// counted as forbidden, among the rows where fixed_rows (undefined: none fixed) is -1; or -1.
int64_t first_row_without_tokens(const at::Tensor& bits, int64_t V, int64_t also, const at::Tensor& fixed_rows) {
    const int64_t N = bits.size(0), W = bits.size(1);
    const auto past_end =
        static_cast<uint32_t>(~((uint64_t{1} << (V % 32 == 0 ? 32 : V % 32)) - 1));  // the last word's bits >= V
    if (!in_cpu_memory(bits) || (fixed_rows.defined() && !in_cpu_memory(fixed_rows))) {
        at::Tensor words = bits.clone();
        words.select(1, W - 1).bitwise_or_(static_cast<int32_t>(past_end));
        if (also >= 0) words.select(1, also / 32).bitwise_or_(static_cast<int32_t>(uint32_t{1} << (also % 32)));
        at::Tensor none_left = words.eq(-1).all(1);
        if (fixed_rows.defined()) none_left.logical_and_(fixed_rows.lt(0));
        return none_left.any().item<bool>() ? none_left.nonzero()[0][0].item<int64_t>() : -1;
    }
    const auto* words = static_cast<const uint32_t*>(bits.data_ptr());
    const int64_t* fixed = fixed_rows.defined() ? fixed_rows.data_ptr<int64_t>() : nullptr;
    for (int64_t r = 0; r < N; ++r) {
        if (fixed != nullptr && fixed[r] >= 0) continue;
        const uint32_t* row = words + r * W;
        bool every = true;
        for (int64_t w = 0; w < W && every; ++w) {
            uint32_t word = row[w];
            if (w == W - 1) word |= past_end;
            if (also >= 0 && w == also / 32) word |= uint32_t{1} << (also % 32);
            every = word == ~uint32_t{0};
        }
        if (every) return r;
    }
    return -1;
}

// The bits of -inf as float32.
int32_t negative_infinity_bits() {
    const float value = -std::numeric_limits<float>::infinity();
    int32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

// x[forbidden] = -inf. A contiguous float32 x is changed through its bits, x ^= (x ^ -inf) & m with m all ones where
// forbidden: branch-free, where masked_fill_ selects per element and mispredicts on a mask without long runs (a
// pseudo-random half of 151,936 tokens on 8 rows, one thread: 5.1 ms against 1.6, measured). The same values either
// way.
void fill_forbidden(at::Tensor& x, const at::Tensor& forbidden) {
    if (x.scalar_type() != at::kFloat || !x.is_contiguous()) {
        x.masked_fill_(forbidden, -std::numeric_limits<float>::infinity());
        return;
    }
    at::Tensor bits = x.view(at::kInt);
    bits.bitwise_xor_(bits.bitwise_xor(negative_infinity_bits()).bitwise_and_(forbidden.to(at::kInt).neg_()));
}

// to = from with -inf where the packed bits [n, W] are set, over [n, V], in one pass (`to` may be `from`): no [n, V]
// mask is made, and a copy needs no second pass. Within a word, a select per token against a table of the 32 bits,
// which vectorises (in place on 8 rows of 151,936 at one thread, 0.18 ms, where shifting the word by the token's bit
// took 0.9, measured).
void copy_forbidding_bits(const at::Tensor& from, const at::Tensor& bits, at::Tensor& to) {
    const int64_t n = to.size(0), V = to.size(1);
    if (!to.device().is_cpu() || to.scalar_type() != at::kFloat || !to.is_contiguous() ||
        from.scalar_type() != at::kFloat || !from.is_contiguous()) {
        if (!to.is_same(from)) to.copy_(from);
        fill_forbidden(to, unpack_bits(bits, V));
        return;
    }
    static constexpr auto kBit = [] {
        std::array<uint32_t, 32> bit{};
        for (int j = 0; j < 32; ++j) bit[j] = uint32_t{1} << j;
        return bit;
    }();
    const at::Tensor words = bits.contiguous();
    const int64_t W = words.size(1), whole_words = V / 32;
    const auto* source = reinterpret_cast<const uint32_t*>(from.data_ptr<float>());
    auto* target = reinterpret_cast<uint32_t*>(to.data_ptr<float>());
    const auto* word_data = reinterpret_cast<const uint32_t*>(words.data_ptr<int32_t>());
    const auto forbidden_value = static_cast<uint32_t>(negative_infinity_bits());
    rudder::parallel_rows(0, n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const uint32_t* in = source + r * V;
            uint32_t* out = target + r * V;
            const uint32_t* row_words = word_data + r * W;
            for (int64_t w = 0; w < whole_words; ++w) {
                const uint32_t m = row_words[w];
                const uint32_t* p = in + w * 32;
                uint32_t* q = out + w * 32;
                for (int j = 0; j < 32; ++j) {
                    const uint32_t select = (m & kBit[j]) != 0 ? ~uint32_t{0} : 0;
                    q[j] = (p[j] & ~select) | (forbidden_value & select);
                }
            }
            for (int64_t v = whole_words * 32; v < V; ++v)  // the short last word
                out[v] = (row_words[whole_words] & kBit[v % 32]) != 0 ? forbidden_value : in[v];
        }
    });
}

}  // namespace

at::Tensor Combined::forbidden_mask(int64_t vocab_size) const {
    return forbidden_bits.defined() ? unpack_bits(forbidden_bits, vocab_size) : forbidden;
}

// Who wrote what at one PREDICT step, to name them when the combination cannot be drawn from.
struct Composer::Authors {
    at::Tensor owners;  // [B, L]: which controller fixed each position
    // Who forbade what at the rows: bool [N, V], or packed forbidden bits [N, W] (`packed`).
    struct Forbidder {
        size_t owner;
        at::Tensor mask;
        bool packed;
    };
    std::vector<Forbidder> forbidders;
    at::Tensor packed;  // the packed forbidders' bits ORed [N, W]: unpacked once, after the loop
    std::vector<std::pair<size_t, at::Tensor>>
        whole_masks;                   // those that wrote [B, L, V]: checked at every fixed position
    std::vector<size_t> delta_owners;  // whose deltas are in logit_delta / candidate_delta
    bool may_overflow = false;         // the adapter checked each delta finite; a weight or a sum can still overflow
};

Combined Composer::predict(const plugins::StepInputs& in, bool constraints_only) {
    if (inputs_ != nullptr) inputs_->next_step();
    const int64_t B = in.tokens.size(0), L = in.tokens.size(1);
    Combined out;
    out.rows = in.rows.defined() ? in.rows : at::arange(B * L, in.tokens.options());
    Authors authors;
    auto add = [](at::Tensor& sum, const at::Tensor& term) { sum = sum.defined() ? sum.add_(term) : term; };
    for (size_t k = 0; k < controllers_.size(); ++k) {
        auto& c = controllers_[k];
        if (!c.active.contains(in.t)) continue;
        if ((c.instance->capabilities() & predict_capabilities()) == 0) continue;
        if (constraints_only && !c.instance->has(RUDDER_CAP_HARD_CONSTRAINT)) continue;
        plugins::StepOutputs o;
        if (!take_part(c, [&] { o = c.instance->step(in); })) continue;
        const bool sums = out.logit_delta.defined() || out.candidate_delta.defined();
        bool wrote_delta = false;
        if (o.logit_delta.defined()) {
            add(out.logit_delta, at_rows(o.logit_delta, out.rows).to(at::kFloat).mul(c.weight));
            wrote_delta = true;
        }
        if (o.grad.defined() && family_ == Family::discrete) {
            // First-order Taylor: changing position i from its current token to v changes log p(c) by about
            // g[i, v] - g[i, current].
            const at::Tensor g = at_rows(o.grad, out.rows);
            const at::Tensor current = in.tokens.reshape({-1}).index_select(0, out.rows).unsqueeze(1);
            add(out.logit_delta, (g - g.gather(1, current)).mul_(c.weight));
            wrote_delta = true;
            authors.may_overflow = true;
        }
        if (o.candidate_delta.defined()) {
            add(out.candidate_delta, o.candidate_delta.to(at::kFloat).mul(c.weight));
            out.candidate_ids = in.candidate_ids;
            wrote_delta = true;
        }
        if (wrote_delta) {
            authors.may_overflow = authors.may_overflow || sums || c.weight != 1.0;
            authors.delta_owners.push_back(k);
            out.reward.add(o.log_prob, c.weight, c.instance->label());
        }
        if (o.fixed_tokens.defined()) merge_fixed(out, o.fixed_tokens, k, authors.owners);
        if (o.forbidden.defined()) {
            if (o.forbidden.dim() == 3) authors.whole_masks.emplace_back(k, o.forbidden);
            const at::Tensor mask = at_rows(o.forbidden, out.rows).ne(0);
            authors.forbidders.push_back({k, mask, false});
            out.forbidden = out.forbidden.defined() ? mask.logical_or(out.forbidden) : mask;
        }
        if (o.token_bits.defined()) {
            // Kept packed: the masks combine as words, a thirty-second of the work.
            at::Tensor bits = at_rows(o.token_bits, out.rows);
            if (o.bits_allowed) bits = bits.bitwise_not();
            authors.forbidders.push_back({k, bits, true});
            // A controller in a process of its own wrote them in shared memory, which its next step (a COMMIT round
            // of this one) reuses: the combination keeps a copy.
            const bool shared = !o.bits_allowed && c.instance->isolation() == plugins::Isolation::process;
            authors.packed =
                authors.packed.defined() ? bits.bitwise_or(authors.packed) : (shared ? bits.clone() : bits);
        }
    }
    if (authors.packed.defined() && !out.forbidden.defined())
        out.forbidden_bits = authors.packed;  // applied to the scores as bits
    else if (authors.packed.defined())
        out.forbidden = unpack_bits(authors.packed, vocab_size_).logical_or(out.forbidden);
    last_delta_owners_ = authors.delta_owners;
    if (authors.may_overflow) {
        check_finite(out, out.logit_delta, authors, L);
        check_finite(out, out.candidate_delta, authors, L);
    }
    check_fixed(out, authors, B, L);
    check_every_row_allows_a_token(out, authors, L);
    return out;
}

size_t Composer::fixer_at(const Authors& authors, int64_t b, int64_t i) const {
    return static_cast<size_t>(authors.owners.index({b, i}).item<int64_t>());
}

void Composer::check_finite(const Combined& out, const at::Tensor& sum, const Authors& authors, int64_t L) const {
    if (!sum.defined()) return;
    // Finite iff its least and greatest values are (a NaN makes both NaN): one pass, no [N, V] temporaries.
    const auto [least, greatest] = at::aminmax(sum);
    if (least.isfinite().item<bool>() && greatest.isfinite().item<bool>()) return;
    const int64_t row = sum.isfinite().all(1).logical_not().nonzero()[0][0].item<int64_t>();
    const int64_t position = out.rows[row].item<int64_t>();
    throw CompositionError("the logit deltas of " + labels_with_weights(authors.delta_owners) +
                           " are not finite once weighted and summed (sample " + std::to_string(position / L) +
                           ", position " + std::to_string(position % L) +
                           "): each is finite, but float32 overflows; lower the weight or the delta");
}

std::string Composer::labels_with_weights(const std::vector<size_t>& indices) const {
    std::ostringstream who;
    for (size_t k : indices)
        who << (k == indices.front() ? "'" : ", '") << controllers_[k].instance->label() << "' (weight "
            << controllers_[k].weight << ")";
    return who.str();
}

std::string Composer::last_delta_authors() const { return labels_with_weights(last_delta_owners_); }

void Composer::check_fixed(const Combined& out, const Authors& authors, int64_t B, int64_t L) const {
    if (!out.fixed.defined()) return;
    if (mask_id_ >= 0) {
        const at::Tensor masked = out.fixed.eq(mask_id_);
        if (masked.any().item<bool>()) {
            const auto where = masked.nonzero()[0];
            const int64_t b = where[0].item<int64_t>(), i = where[1].item<int64_t>();
            throw CompositionError("controller " + label(fixer_at(authors, b, i)) + " fixes the mask token (id " +
                                       std::to_string(mask_id_) + ") at position " + std::to_string(i) +
                                       ": a finished sample cannot hold it",
                                   {fixer_at(authors, b, i)});
        }
    }
    if (authors.forbidders.empty()) return;
    // A fixed token that a controller forbids: at the rows for every forbidder, and at every position for those that
    // wrote whole masks (a fixed position is committed, so it may never be one of the step's rows).
    const at::Tensor fixed_flat = out.fixed.reshape({-1});
    auto conflict = [&](int64_t position, int64_t forbidder) {
        const int64_t b = position / L, i = position % L, token = fixed_flat[position].item<int64_t>();
        const size_t fixer = fixer_at(authors, b, i), forbids = static_cast<size_t>(forbidder);
        throw ConstraintConflict("controller " + label(fixer) + " fixes " + token_name(token) + " at position " +
                                     std::to_string(i) + ", which " + label(forbids) + " forbids",
                                 {fixer, forbids});
    };
    for (const auto& [k, whole] : authors.whole_masks) {
        const at::Tensor flat = whole.reshape({B * L, -1});
        const at::Tensor hit =
            flat.gather(1, fixed_flat.clamp_min(0).unsqueeze(1)).squeeze(1).ne(0).logical_and(fixed_flat.ge(0));
        if (hit.any().item<bool>()) conflict(hit.nonzero()[0][0].item<int64_t>(), static_cast<int64_t>(k));
    }
    const at::Tensor fixed_rows = fixed_flat.index_select(0, out.rows);
    for (const auto& f : authors.forbidders) {
        const int64_t row = first_forbidden_fixed(f.mask, f.packed, fixed_rows);
        if (row >= 0) conflict(out.rows[row].item<int64_t>(), static_cast<int64_t>(f.owner));
    }
}

void Composer::check_every_row_allows_a_token(const Combined& out, const Authors& authors, int64_t L) const {
    if (authors.forbidders.empty()) return;
    // The mask token is never drawn, so a row that allows only it allows nothing. Counted on the bits when every mask
    // came as bits, else per row as a sum (all(1) over bool [N, V] takes about twice as long).
    const at::Tensor fixed_rows =
        out.fixed.defined() ? out.fixed.reshape({-1}).index_select(0, out.rows) : at::Tensor();
    int64_t row = -1;
    if (out.forbidden_bits.defined()) {
        row = first_row_without_tokens(authors.packed, vocab_size_, mask_id_, fixed_rows);
    } else {
        at::Tensor forbidden_count = out.forbidden.sum(1, /*keepdim=*/false, at::kInt);
        if (mask_id_ >= 0) forbidden_count.add_(out.forbidden.select(1, mask_id_).logical_not());
        at::Tensor none_left = forbidden_count.eq(vocab_size_);
        if (fixed_rows.defined()) none_left.logical_and_(fixed_rows.lt(0));
        if (none_left.any().item<bool>()) row = none_left.nonzero()[0][0].item<int64_t>();
    }
    if (row < 0) return;
    const int64_t position = out.rows[row].item<int64_t>();
    std::string who;  // the forbidders at that row: one that leaves nothing alone, else all of them
    std::vector<size_t> blamed;
    for (const auto& forbidder : authors.forbidders) {
        const at::Tensor f =
            forbidder.packed ? unpack_bits(forbidder.mask.narrow(0, row, 1), vocab_size_)[0] : forbidder.mask[row];
        if (!f.any().item<bool>()) continue;
        const std::string name = "'" + controllers_[forbidder.owner].instance->label() + "'";
        if (f.all().item<bool>() ||
            (mask_id_ >= 0 && f.index_fill(0, at::tensor({mask_id_}, out.rows.options()), true).all().item<bool>())) {
            who = "controller " + name;
            blamed = {forbidder.owner};
            break;
        }
        who += (who.empty() ? "controllers " : ", ") + name;
        blamed.push_back(forbidder.owner);
    }
    throw ConstraintConflict(who + " forbid" + (who.rfind("controllers ", 0) == 0 ? "" : "s") +
                                 " every token at position " + std::to_string(position % L) + " (sample " +
                                 std::to_string(position / L) + ")",
                             blamed);
}

bool Composer::commits() const {
    for (const auto& c : controllers_)
        if (c.instance->has(RUDDER_CAP_COMMIT)) return true;
    return false;
}

at::Tensor Commit::committed() const {
    at::Tensor now = rejected.logical_not();
    if (rejected.size(0) > 0 && !now.any().item<bool>()) now[0] = true;
    return now;
}

Commit Composer::commit(const plugins::StepInputs& in) {
    if (inputs_ != nullptr) inputs_->next_step();
    const int64_t B = in.tokens.size(0), L = in.tokens.size(1);
    const at::Tensor rows = in.rows.defined() ? in.rows : at::arange(B * L, in.tokens.options());
    Commit out;
    out.rejected = at::zeros({rows.size(0)}, rows.options().dtype(at::kBool));
    std::vector<std::pair<size_t, at::Tensor>> writers;  // who forbade what, [N, W], to name them
    for (size_t k = 0; k < controllers_.size(); ++k) {
        auto& c = controllers_[k];
        if (!c.instance->has(RUDDER_CAP_COMMIT) || !c.active.contains(in.t)) continue;
        plugins::StepOutputs o;
        if (!take_part(c, [&] { o = c.instance->step(in); })) continue;
        if (o.rejected.defined()) out.rejected.logical_or_(o.rejected.ne(0));
        if (!o.token_bits.defined()) continue;
        const at::Tensor bits = o.bits_allowed ? o.token_bits.bitwise_not() : o.token_bits;
        writers.emplace_back(k, bits);
        // A copy, not a view of the controller's output (which its next round overwrites in process isolation).
        out.forbidden_bits = out.forbidden_bits.defined() ? bits.bitwise_or(out.forbidden_bits) : bits.clone();
    }
    if (out.forbidden_bits.defined()) check_redrawn_rows(out, rows, writers, L);
    return out;
}

void Composer::check_redrawn_rows(const Commit& out, const at::Tensor& rows,
                                  const std::vector<std::pair<size_t, at::Tensor>>& writers, int64_t L) const {
    // first_row_without_tokens skips the rows with a "fixed" token: here, those committed or accepted.
    const at::Tensor redrawn = out.rejected.logical_and(out.committed().logical_not());
    const at::Tensor skip = at::where(redrawn, at::full({}, -1, rows.options()), at::zeros({}, rows.options()));
    const int64_t row = first_row_without_tokens(out.forbidden_bits, vocab_size_, mask_id_, skip);
    if (row < 0) return;
    const int64_t position = rows[row].item<int64_t>();
    std::string who;  // the controllers that forbid anything there
    size_t named = 0;
    for (const auto& [k, bits] : writers) {
        if (!unpack_bits(bits.narrow(0, row, 1), vocab_size_).any().item<bool>()) continue;
        who += (named++ == 0 ? "'" : ", '") + controllers_[k].instance->label() + "'";
    }
    throw ConstraintConflict((named == 1 ? "controller " + who + " leaves" : "controllers " + who + " leave") +
                             " no token to draw again at position " + std::to_string(position % L) + " (sample " +
                             std::to_string(position / L) + ") once the proposals they accept are committed");
}

void Reward::add(const at::Tensor& lp, double weight, const std::string& controller) {
    if (!silent.empty()) return;
    if (!lp.defined()) {
        silent = controller;
        log_prob = at::Tensor();
        return;
    }
    const at::Tensor weighted = lp.to(at::kFloat).mul(weight);
    log_prob = log_prob.defined() ? log_prob.add_(weighted) : weighted;
}

Composer::Guided Composer::guide(const plugins::StepInputs& in) {
    if (inputs_ != nullptr) inputs_->next_step();
    Guided total;
    for (auto& c : controllers_) {
        if (!c.instance->has(RUDDER_CAP_GRADIENT) || !c.active.contains(in.t)) continue;
        plugins::StepOutputs o;
        if (!take_part(c, [&] { o = c.instance->step(in); })) continue;
        if (!o.grad.defined()) continue;
        const at::Tensor scaled = o.grad.mul(c.weight);
        total.grad = total.grad.defined() ? total.grad.add_(scaled) : scaled;
        total.reward.add(o.log_prob, c.weight, c.instance->label());
    }
    return total;
}

void Composer::forbid(at::Tensor& scores, const at::Tensor& forbidden_bits) {
    if (forbidden_bits.defined()) copy_forbidding_bits(scores, forbidden_bits, scores);
}

at::Tensor Composer::controlled(const at::Tensor& logits, const Combined& c, const at::Tensor& pick, int64_t never_id) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    auto at_pick = [&](const at::Tensor& t) {
        const at::Tensor rows = t.dim() == 3 ? t.reshape({-1, t.size(2)}) : t;
        return pick.defined() ? rows.index_select(0, pick) : rows;
    };
    at::Tensor x;
    if (c.logit_delta.defined()) x = logits + at_pick(c.logit_delta);
    if (c.forbidden_bits.defined()) {
        // Without a delta, copied and forbidden in the same pass. A candidate delta added after -inf leaves -inf.
        at::Tensor to = x.defined() ? x : at::empty_like(logits, at::MemoryFormat::Contiguous);
        copy_forbidding_bits(x.defined() ? x : logits, at_pick(c.forbidden_bits), to);
        x = to;
    } else if (!x.defined()) {
        x = logits.clone();
    }
    if (c.candidate_delta.defined()) x.scatter_add_(1, at_pick(c.candidate_ids), at_pick(c.candidate_delta));
    if (never_id >= 0) x.select(1, never_id).fill_(neg_inf);
    if (c.forbidden.defined()) fill_forbidden(x, at_pick(c.forbidden));
    if (c.fixed.defined()) {
        at::Tensor fixed = c.fixed.reshape({-1});
        if (c.rows.defined()) fixed = fixed.index_select(0, c.rows);
        if (pick.defined()) fixed = fixed.index_select(0, pick);
        // One-hot rows where fixed: only those rows are written.
        const at::Tensor fixed_rows = fixed.ge(0).nonzero().squeeze(1);
        if (fixed_rows.size(0) > 0) {
            x.index_fill_(0, fixed_rows, neg_inf);
            x.index_put_({fixed_rows, fixed.index_select(0, fixed_rows)}, at::zeros({}, x.options()));
        }
    }
    return x;
}

at::Tensor Composer::apply(const at::Tensor& logp, const Combined& combined, int64_t never_id) {
    const int64_t V = logp.size(-1);
    return at::log_softmax(controlled(logp.reshape({-1, V}), combined, {}, never_id), -1).view(logp.sizes());
}

}  // namespace rudder
