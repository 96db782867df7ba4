// What a controller is handed at one step, for the guarded adapter (controller_instance.cpp) and the isolated
// child (controller_host_main.cpp) alike: which forms of the ABI it is spoken to in (the 1.2 and 1.3 negotiation),
// which inputs it reads and the shape of every output. Torch-free: the child links only the loader.
#pragma once

#include <rudder/rudder_plugin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rudder::plugins::forms {

// The capability bits ABI 1.2 added: the cheaper forms of a step's tensors.
constexpr uint64_t kCapabilities12 =
    RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_CANDIDATES | RUDDER_CAP_IGNORES_X0;

// The capability bit ABI 1.3 added: the COMMIT phase.
constexpr uint64_t kCapabilities13 = RUDDER_CAP_COMMIT;

// The structs as ABI 1.1 had them (each ends where 1.2 appended its first member): what a host that speaks to a
// controller as a 1.1 host sets struct_size to.
constexpr uint32_t kRunInfoSize11 = offsetof(rudder_run_info, candidates);
constexpr uint32_t kStepSize11 = offsetof(rudder_step, rows);
constexpr uint32_t kContributionSize11 = offsetof(rudder_contribution, token_bits);
// The structs as ABI 1.2 had them (1.3 appended to the step and the contribution only).
constexpr uint32_t kStepSize12 = offsetof(rudder_step, proposed);
constexpr uint32_t kContributionSize12 = offsetof(rudder_contribution, rejected);

// How one controller instance is spoken to.
struct Negotiated {
    bool abi12 = false;         // 1.2 struct sizes and members (rows; the forms it declares)
    bool abi13 = false;         // 1.3 struct sizes and members (proposed, rejected; the COMMIT phase if declared)
    uint64_t capabilities = 0;  // what the host honours: the declared bits, less those of a later minor
    uint32_t run_info_size() const { return abi12 ? sizeof(rudder_run_info) : kRunInfoSize11; }
    uint32_t step_size() const { return abi13 ? sizeof(rudder_step) : abi12 ? kStepSize12 : kStepSize11; }
    uint32_t contribution_size() const {
        return abi13 ? sizeof(rudder_contribution) : abi12 ? kContributionSize12 : kContributionSize11;
    }
};

// A controller built for ABI 1.1 cannot know the 1.2 bits, nor one built for 1.2 the 1.3 bit (any it sets mean
// nothing), and `dense` (the RUDDER_CONTROL_FORMS knob) speaks to every controller as a 1.1 host does.
inline Negotiated negotiate(uint32_t controller_abi_minor, uint64_t declared, bool dense) {
    Negotiated n;
    n.abi12 = controller_abi_minor >= 2 && !dense;
    n.abi13 = controller_abi_minor >= 3 && !dense;
    n.capabilities = declared;
    if (!n.abi12) n.capabilities &= ~kCapabilities12;
    if (!n.abi13) n.capabilities &= ~kCapabilities13;
    return n;
}

// The capability bits rudder_run_info.forms reports: the forms and the COMMIT phase the host honours.
inline uint64_t run_forms(const Negotiated& n) { return n.capabilities & (kCapabilities12 | kCapabilities13); }

// What a plugin changed in a tensor header it was handed (`dl`, against its `original` and the shape values
// `original_shape`; `shape` is the storage dl.shape was handed pointing at), or nullptr if nothing: the in-process
// adapter and the isolated child check every handed header this way.
inline const char* changed_header_field(const DLTensor& dl, const DLTensor& original, const int64_t* shape,
                                        const int64_t* original_shape) {
    if (dl.data != original.data) return "data pointer";
    if (dl.ndim != original.ndim) return "ndim";
    if (dl.shape != original.shape) return "shape pointer";
    if (std::memcmp(shape, original_shape, sizeof(int64_t) * static_cast<size_t>(original.ndim)) != 0) return "shape";
    if (dl.dtype.code != original.dtype.code || dl.dtype.bits != original.dtype.bits ||
        dl.dtype.lanes != original.dtype.lanes)
        return "dtype";
    if (dl.device.device_type != original.device.device_type || dl.device.device_id != original.device.device_id)
        return "device";
    if (dl.strides != original.strides) return "strides";
    if (dl.byte_offset != original.byte_offset) return "byte_offset";
    return nullptr;
}

// 32-bit words per row of token bits.
inline int64_t token_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }

constexpr DLDataType kF32{kDLFloat, 32, 1}, kI64{kDLInt, 64, 1}, kU8{kDLUInt, 8, 1}, kU32{kDLUInt, 32, 1};

// The outputs of a step, in RUDDER_WROTE_* order.
enum Output : size_t {
    kLogitDelta,
    kGrad,
    kLogProb,
    kFixedTokens,
    kForbidden,
    kTokenBits,
    kCandidateDelta,
    kRejected,
    kOutputs
};

struct OutputInfo {
    const char* name;
    uint32_t written;  // the RUDDER_WROTE_* bits that say it was written (token_bits has two meanings)
    DLDataType dtype;
    DLTensor* rudder_contribution::*member;
};

inline constexpr OutputInfo kOutputInfo[kOutputs] = {
    {"logit_delta", RUDDER_WROTE_LOGIT_DELTA, kF32, &rudder_contribution::logit_delta},
    {"grad", RUDDER_WROTE_GRAD, kF32, &rudder_contribution::grad},
    {"log_prob", RUDDER_WROTE_LOG_PROB, kF32, &rudder_contribution::log_prob},
    {"fixed_tokens", RUDDER_WROTE_FIXED_TOKENS, kI64, &rudder_contribution::fixed_tokens},
    {"forbidden", RUDDER_WROTE_FORBIDDEN, kU8, &rudder_contribution::forbidden},
    {"token_bits", RUDDER_WROTE_FORBIDDEN_BITS | RUDDER_WROTE_ALLOWED_BITS, kU32, &rudder_contribution::token_bits},
    {"candidate_delta", RUDDER_WROTE_CANDIDATE_DELTA, kF32, &rudder_contribution::candidate_delta},
    {"rejected", RUDDER_WROTE_REJECTED, kU8, &rudder_contribution::rejected},
};

// fixed_tokens starts at -1 (free), every other output at 0.
inline int64_t initial_value(size_t output) { return output == kFixedTokens ? -1 : 0; }

// A tensor's shape; ndim 0 means "not handed out".
struct Dims {
    int32_t ndim = 0;
    int64_t size[3] = {0, 0, 0};
    bool present() const { return ndim > 0; }
    int64_t numel() const {  // 0 when not handed out
        if (ndim == 0) return 0;
        int64_t n = 1;
        for (int32_t d = 0; d < ndim; ++d) n *= size[d];
        return n;
    }
};

// The run and the step as they decide what a controller gets.
struct StepShape {
    rudder_family family = RUDDER_FAMILY_DISCRETE;
    int64_t B = 0, L = 0, V = 0, D = 0;
    int64_t rows = 0;        // N (PREDICT, COMMIT)
    int64_t candidates = 0;  // k the host offers this controller (0: none)
    rudder_phase phase = RUDDER_PHASE_PREDICT;
    Negotiated negotiated;
    bool predict() const { return phase == RUDDER_PHASE_PREDICT; }
    bool has(uint64_t capability) const { return (negotiated.capabilities & capability) != 0; }
};

// The run as it decides what a controller gets (the step's rows and phase are set per step). `run_candidates`: the k
// the run offers; a controller gets it only if it declares RUDDER_CAP_CANDIDATES (as negotiated).
inline StepShape run_shape(rudder_family family, int64_t B, int64_t L, int64_t V, int64_t D, int64_t run_candidates,
                           const Negotiated& negotiated) {
    StepShape s;
    s.family = family;
    s.B = B;
    s.L = L;
    s.V = V;
    s.D = family == RUDDER_FAMILY_CONTINUOUS ? D : 0;
    s.negotiated = negotiated;
    s.candidates = s.has(RUDDER_CAP_CANDIDATES) ? run_candidates : 0;
    return s;
}

// Which inputs beyond the dense ones a controller reads at this step.
struct InputForms {
    bool rows = false;        // rudder_step.rows [N]
    bool x0 = true;           // x0_logits at all (PREDICT; not with RUDDER_CAP_IGNORES_X0)
    bool x0_rows = false;     // x0_logits is [N, V] at the rows instead of [B, L, V]
    bool candidates = false;  // candidate_ids, candidate_logp [N, k]
    bool proposed = false;    // COMMIT: rudder_step.proposed [N], and no x0 at all
};

inline InputForms input_forms(const StepShape& s) {
    InputForms f;
    if (s.phase == RUDDER_PHASE_COMMIT) {
        f.rows = f.proposed = true;
        f.x0 = false;
        return f;
    }
    if (!s.predict() || !s.negotiated.abi12) return f;
    f.rows = true;
    f.x0 = !s.has(RUDDER_CAP_IGNORES_X0);
    f.x0_rows = f.x0 && s.has(RUDDER_CAP_ROWS);
    f.candidates = s.has(RUDDER_CAP_CANDIDATES) && s.candidates > 0;
    return f;
}

// The outputs handed out: those the controller declared (as negotiated) and the phase uses, each in its form.
inline std::array<Dims, kOutputs> output_dims(const StepShape& s) {
    std::array<Dims, kOutputs> dims{};
    const auto set = [&dims](size_t output, std::initializer_list<int64_t> sizes) {
        Dims& d = dims[output];
        for (int64_t size : sizes) d.size[d.ndim++] = size;
    };
    const bool gradient = s.has(RUDDER_CAP_GRADIENT);
    if (s.phase == RUDDER_PHASE_COMMIT) {  // COMMIT controllers only; the bits always at the rows
        if (!s.has(RUDDER_CAP_COMMIT)) return dims;
        set(kRejected, {s.rows});
        set(kTokenBits, {s.rows, token_words(s.V)});
        return dims;
    }
    if (!s.predict()) {  // GUIDE: continuous, GRADIENT controllers only
        set(kGrad, {s.B, s.L, s.D});
        set(kLogProb, {s.B});
        return dims;
    }
    // [N, width] over the step's rows with ROWS, [B, L, width] otherwise.
    const bool by_row = s.has(RUDDER_CAP_ROWS);
    const auto per_position = [&](size_t output, int64_t width) {
        if (by_row)
            set(output, {s.rows, width});
        else
            set(output, {s.B, s.L, width});
    };
    if (s.has(RUDDER_CAP_LOGIT_DELTA)) per_position(kLogitDelta, s.V);
    if (gradient && s.family == RUDDER_FAMILY_DISCRETE) per_position(kGrad, s.V);
    if (gradient) set(kLogProb, {s.B});
    if (s.has(RUDDER_CAP_HARD_CONSTRAINT)) {
        set(kFixedTokens, {s.B, s.L});
        if (s.has(RUDDER_CAP_PACKED_MASK))
            per_position(kTokenBits, token_words(s.V));
        else
            per_position(kForbidden, s.V);
    }
    if (s.has(RUDDER_CAP_CANDIDATES) && s.candidates > 0) set(kCandidateDelta, {s.rows, s.candidates});
    return dims;
}

}  // namespace rudder::plugins::forms
