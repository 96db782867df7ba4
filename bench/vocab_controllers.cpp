// Controllers for the large-vocabulary benchmark (large_vocab_bench.cpp): the same work in the dense forms of ABI 1.1
// and in the forms of ABI 1.2, so what differs between the two is what the host and the ABI cost. Params: none.
//
//   vocab_mask              forbids a fixed pseudo-random half of the vocabulary at every row. Declares
//                           HARD_CONSTRAINT + ROWS + PACKED_MASK: on a 1.2 host it copies a precomputed row of bits
//                           into each of the step's N rows of token_bits; under RUDDER_CONTROL_FORMS=dense (or on a
//                           1.1 host) a precomputed row of bytes into each of the B * L rows of forbidden.
//   vocab_boost             adds 1 to the log-probability of 16 fixed tokens at every position: dense logit_delta
//                           [B, L, V] (LOGIT_DELTA only, so it gets the dense form on any host).
//   vocab_boost_candidates  the same boost over the 1.2 candidates: adds 1 to candidate_delta [N, k] where a row's
//                           candidate is one of the 16 tokens (CANDIDATES + ROWS; the form reaches only the
//                           candidates, so a boosted token outside a row's k most likely gets nothing there).
//
// Tokens below kFree are never forbidden or boosted: the pad (fixed by `length` after its last token), the mask
// token, and the words a benchmark recipe's `span` fixes, so that no run ends in a conflict.
#include <rudder/rudder_controller.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "common/params.hpp"

namespace {

constexpr int64_t kFree = 1024;
constexpr int64_t kBoosted = 16;
constexpr float kBoost = 1.0f;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a fixed, well-spread hash of the token id
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

bool in_mask(int64_t v) { return v >= kFree && (mix(static_cast<uint64_t>(v)) & 1) != 0; }

// The boosted tokens: spread over [kFree, V).
std::array<int64_t, kBoosted> boosted(int64_t V) {
    std::array<int64_t, kBoosted> ids{};
    for (int64_t j = 0; j < kBoosted; ++j)
        ids[static_cast<size_t>(j)] =
            kFree + static_cast<int64_t>(mix(static_cast<uint64_t>(j) + 7) % static_cast<uint64_t>(V - kFree));
    return ids;
}

void no_params(std::string_view params_json) {
    rudder::Params p(params_json);
    p.finish();
}

void check_vocabulary(const rudder_run_info& run) {
    if (run.vocab_size <= kFree)
        throw rudder::Error("needs a vocabulary of more than " + std::to_string(kFree) + " tokens",
                            RUDDER_ERR_UNSUPPORTED);
}

class Mask final : public rudder::Controller {
public:
    Mask(const rudder_host&, std::string_view params_json) { no_params(params_json); }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        check_vocabulary(run);
        // One row of the mask in each form, built once: a step only copies it.
        bytes_.assign(static_cast<size_t>(run.vocab_size), 0);
        words_.assign(static_cast<size_t>((run.vocab_size + 31) / 32), 0);
        for (int64_t v = 0; v < run.vocab_size; ++v) {
            if (!in_mask(v)) continue;
            bytes_[static_cast<size_t>(v)] = 1;
            words_[static_cast<size_t>(v / 32)] |= uint32_t{1} << (v % 32);
        }
    }

    void step(const rudder_step& s, rudder_contribution& out) override {
        if (s.phase != RUDDER_PHASE_PREDICT) return;
        if (DLTensor* bits = rudder::token_bits_of(out)) {
            const rudder::RowView<uint32_t> rows(bits);
            for (int64_t r = 0; r < rows.rows(); ++r)
                std::memcpy(rows[r], words_.data(), words_.size() * sizeof(uint32_t));
            out.written |= RUDDER_WROTE_FORBIDDEN_BITS;
        } else {
            const rudder::RowView<uint8_t> rows(out.forbidden);
            for (int64_t r = 0; r < rows.rows(); ++r) std::memcpy(rows[r], bytes_.data(), bytes_.size());
            out.written |= RUDDER_WROTE_FORBIDDEN;
        }
    }

private:
    std::vector<uint8_t> bytes_;
    std::vector<uint32_t> words_;
};

class Boost final : public rudder::Controller {
public:
    Boost(const rudder_host&, std::string_view params_json) { no_params(params_json); }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        check_vocabulary(run);
        ids_ = boosted(run.vocab_size);
    }

    void step(const rudder_step& s, rudder_contribution& out) override {
        if (s.phase != RUDDER_PHASE_PREDICT) return;
        const rudder::RowView<float> delta(out.logit_delta);
        for (int64_t r = 0; r < delta.rows(); ++r)
            for (int64_t id : ids_) delta(r, id) = kBoost;
        out.written |= RUDDER_WROTE_LOGIT_DELTA;
    }

private:
    std::array<int64_t, kBoosted> ids_{};
};

class BoostCandidates final : public rudder::Controller {
public:
    BoostCandidates(const rudder_host&, std::string_view params_json) { no_params(params_json); }

    void begin(const rudder_run_info& run) override {
        Controller::begin(run);
        check_vocabulary(run);
        boosted_.assign(static_cast<size_t>(run.vocab_size), 0);
        for (int64_t id : boosted(run.vocab_size)) boosted_[static_cast<size_t>(id)] = 1;
    }

    void step(const rudder_step& s, rudder_contribution& out) override {
        if (s.phase != RUDDER_PHASE_PREDICT) return;
        DLTensor* delta_out = rudder::candidate_delta_of(out);
        if (delta_out == nullptr) return;  // the run offers no candidates (k = 0)
        const rudder::View<const int64_t> ids(rudder::candidate_ids_of(s));
        const rudder::View<float> delta(delta_out);
        for (int64_t r = 0; r < ids.size(0); ++r)
            for (int64_t j = 0; j < ids.size(1); ++j)
                if (boosted_[static_cast<size_t>(ids(r, j))] != 0) delta(r, j) = kBoost;
        out.written |= RUDDER_WROTE_CANDIDATE_DELTA;
    }

private:
    std::vector<uint8_t> boosted_;  // [V]: 1 for a boosted token
};

}  // namespace

RUDDER_CONTROLLER(mask_desc, Mask, "vocab_mask", "1.0.0",
                  "benchmark: forbids a fixed pseudo-random half of the vocabulary", "{}",
                  RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_IGNORES_X0 |
                      RUDDER_CAP_THREAD_SAFE)
RUDDER_CONTROLLER(boost_desc, Boost, "vocab_boost", "1.0.0", "benchmark: +1 to 16 tokens, dense logit_delta", "{}",
                  RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_IGNORES_X0 | RUDDER_CAP_THREAD_SAFE)
RUDDER_CONTROLLER(boost_candidates_desc, BoostCandidates, "vocab_boost_candidates", "1.0.0",
                  "benchmark: +1 to 16 tokens where they are candidates (candidate_delta)", "{}",
                  RUDDER_CAP_CANDIDATES | RUDDER_CAP_ROWS | RUDDER_CAP_IGNORES_X0 | RUDDER_CAP_THREAD_SAFE)
RUDDER_PLUGIN("rudder-bench-vocab", &mask_desc, &boost_desc, &boost_candidates_desc)
