// The sequence layout every Rudder model uses: content tokens, then pad_id up to seq_len. Writing "exactly n
// content tokens" as hard constraints is shared by the length and span controllers.
#pragma once

#include <rudder/rudder_controller.hpp>

#include <cstdint>
#include <string>

namespace rudder::layout {

// Checks that n content tokens fit the run.
inline void check_fits(int64_t n, const rudder_run_info& run, const std::string& what) {
    if (n > run.seq_len)
        throw Error(what + " needs " + std::to_string(n) + " positions but the run has max_length " +
                        std::to_string(run.seq_len),
                    RUDDER_ERR_INVALID_ARGUMENT);
}

// Checks that a text of exactly n content tokens can be written: they fit, and the model has a padding token to
// end it with (GPT-2's tokenizer, for one, has none: its models' texts are the whole sequence).
inline void check_length(int64_t n, const rudder_run_info& run, const std::string& what) {
    check_fits(n, run, what);
    if (run.pad_id < 0)
        throw Error(what +
                        " ends the text with the model's padding token, and this model has none (its texts are the "
                        "whole sequence of max_length tokens)",
                    RUDDER_ERR_INVALID_ARGUMENT);
}

// Hard constraints for exactly n content tokens (check_length first): pad is forbidden before n and fixed from n on.
// fixed_tokens is [B, L] in every form; the pad ban is written in the form the host gave: bits at the step's rows
// (RUDDER_CAP_ROWS and RUDDER_CAP_PACKED_MASK on a 1.2 host), else bytes at every position.
inline void write_length(const rudder_step& step, rudder_contribution& out, const rudder_run_info& run, int64_t n) {
    View<int64_t> fixed(out.fixed_tokens);
    for (int64_t b = 0; b < fixed.size(0); ++b)
        for (int64_t i = n; i < fixed.size(1); ++i) fixed(b, i) = run.pad_id;
    const Rows rows(step, run);
    TokenMask mask(out, run, TokenMask::kForbid);
    for (int64_t r = 0; r < rows.size(); ++r)
        if (rows.position(r) < n) mask.forbid(r, run.pad_id);
    out.written |= RUDDER_WROTE_FIXED_TOKENS;
}

// What length and span declare: hard constraints in the cheapest forms (the pad ban as bits, at the step's rows),
// and that they never read x0.
constexpr uint64_t kHardConstraintForms =
    RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_IGNORES_X0;

}  // namespace rudder::layout
