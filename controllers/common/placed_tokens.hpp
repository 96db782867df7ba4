// The tokens in place at a step, for controls that judge a token by its neighbours (no_repeats, well_formed): the
// step's tokens where not masked, the proposals kept so far in a COMMIT (put), and, where a control reads them, the
// COMMIT's other draws standing in for their positions until their turn (propose).
#pragma once

#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace rudder::layout {

class PlacedTokens {
public:
    static constexpr int64_t kNone = -1;  // outside the sequence, or nothing placed
    static constexpr int64_t kEnd = -2;   // past the sequence's last position: the text ends there

    PlacedTokens(const rudder_step& step, const rudder_run_info& run) : L_(run.seq_len) {
        tokens_.assign(static_cast<size_t>(run.batch_size * run.seq_len), kNone);
        if (step.tokens == nullptr) return;
        const View<const int64_t> tokens(step.tokens);
        const bool has_mask = step.masked != nullptr;
        View<const uint8_t> masked;
        if (has_mask) masked = View<const uint8_t>(step.masked);
        // The continuous family's PREDICT tokens are only the current argmax: nothing is placed.
        const bool placed = run.family == RUDDER_FAMILY_DISCRETE || has_mask;
        if (!placed) return;
        for (int64_t b = 0; b < tokens.size(0); ++b)
            for (int64_t i = 0; i < L_; ++i)
                if (!has_mask || masked(b, i) == 0) put(b, i, tokens(b, i));
    }
    // The token at (b, i): placed, else proposed, else kNone (also outside the sequence).
    int64_t operator()(int64_t b, int64_t i) const {
        if (i < 0 || i >= L_) return kNone;
        const auto at = static_cast<size_t>(b * L_ + i);
        return tokens_[at] != kNone || proposals_.empty() ? tokens_[at] : proposals_[at];
    }
    void put(int64_t b, int64_t i, int64_t token) { tokens_[static_cast<size_t>(b * L_ + i)] = token; }
    // A COMMIT's draw at (b, i), read where nothing is placed yet; kNone takes it back.
    void propose(int64_t b, int64_t i, int64_t token) {
        if (proposals_.empty()) proposals_.assign(tokens_.size(), kNone);
        proposals_[static_cast<size_t>(b * L_ + i)] = token;
    }
    // The token at i, or kEnd past the sequence; kNone before it or where nothing is.
    int64_t at_or_end(int64_t b, int64_t i) const { return i >= L_ ? kEnd : (*this)(b, i); }
    int64_t left(int64_t b, int64_t i) const { return (*this)(b, i - 1); }
    int64_t right(int64_t b, int64_t i) const { return at_or_end(b, i + 1); }
    bool placed(int64_t b, int64_t i) const { return (*this)(b, i) != kNone; }
    // Not kept yet: masked, or only proposed (its draw still to be judged).
    bool masked(int64_t b, int64_t i) const {
        return i >= 0 && i < L_ && tokens_[static_cast<size_t>(b * L_ + i)] == kNone;
    }

private:
    int64_t L_;
    std::vector<int64_t> tokens_, proposals_;
};

// The step's rows in position order (sequence by sequence, left to right): the order a COMMIT keeps draws in, so
// that each is judged against the neighbours kept before it.
inline std::vector<int64_t> rows_in_position_order(const Rows& rows) {
    std::vector<int64_t> order(static_cast<size_t>(rows.size()));
    for (int64_t r = 0; r < rows.size(); ++r) order[static_cast<size_t>(r)] = r;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows.flat(a) < rows.flat(b); });
    return order;
}

}  // namespace rudder::layout
