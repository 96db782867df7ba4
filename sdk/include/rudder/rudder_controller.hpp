// rudder_controller.hpp — write a Rudder controller as a C++17 class; one macro makes it a plugin.
//
//     class Banned : public rudder::Controller {
//     public:
//         Banned(const rudder_host&, std::string_view params_json) { ...parse, throw rudder::Error on bad input... }
//         void step(const rudder_step& s, rudder_contribution& out) override {
//             auto ban = rudder::View<uint8_t>(out.forbidden);   // [B, L, V]
//             ...ban(b, i, v) = 1...;
//             out.written |= RUDDER_WROTE_FORBIDDEN;
//         }
//     };
//     RUDDER_CONTROLLER(banned_desc, Banned, "banned", "1.0.0", "forbids words", "{}", RUDDER_CAP_HARD_CONSTRAINT)
//     RUDDER_PLUGIN("rudder-banned", &banned_desc)
//
// Every exception is caught at the boundary and becomes a status plus last_error(); no C++ type crosses the ABI.
// Header-only and free of LibTorch, so a plugin needs nothing but this folder and DLPack.
//
// ABI 1.2 forms (RUDDER_CAP_ROWS, RUDDER_CAP_PACKED_MASK, RUDDER_CAP_CANDIDATES): Rows, RowView, TokenMask and
// Candidates read and write a step in whichever form the host gave, so one controller source runs on a 1.1 host (and
// under RUDDER_CONTROL_FORMS=dense) with the dense buffers and on a 1.2 host with the forms it declares:
//
//     const rudder::Rows rows(s, run_.info());                 // row r -> position (batch(r), position(r))
//     rudder::TokenMask mask(out, run_.info());                // bits in token_bits, or bytes in forbidden
//     for (int64_t r = 0; r < rows.size(); ++r) if (rows.position(r) < n) mask.forbid(r, pad);
//
// ABI 1.3, the COMMIT phase (declare RUDDER_CAP_COMMIT with RUDDER_CAP_HARD_CONSTRAINT and RUDDER_CAP_PACKED_MASK):
// the host asks, after each draw, which of the proposed tokens the controller accepts together. Override commit(),
// which the helper calls instead of step() in that phase; Proposals reads the proposals and writes the rejections,
// and TokenMask writes what each row allows (token_bits, always [N, W] at the rows in this phase):
//
//     void commit(const rudder_step& s, rudder_contribution& out) override {
//         const rudder::Rows rows(s, run_.info());               // the rows still to be committed
//         rudder::Proposals proposals(s, out);                   // proposals.token(r), proposals.reject(r)
//         rudder::TokenMask mask(out, run_.info(), rudder::TokenMask::kAllow);
//         for (int64_t r = 0; r < rows.size(); ++r) { ...reject what clashes with the accepted rows, allow... }
//     }
//
// Accepting a set must mean accepting each of its subsets: the host may commit fewer rows than a controller accepts.
#ifndef RUDDER_CONTROLLER_HPP
#define RUDDER_CONTROLLER_HPP

#include <rudder/rudder_plugin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rudder {

// Thrown by controller code; `status` is what the host sees (INVALID_ARGUMENT for bad params or requests).
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message, rudder_status status = RUDDER_ERR_INVALID_ARGUMENT)
        : std::runtime_error(message), status_(status) {}
    rudder_status status() const noexcept { return status_; }

private:
    rudder_status status_;
};

template <class T>
constexpr DLDataType dl_dtype() {
    static_assert(std::is_arithmetic_v<T>, "View needs an arithmetic element type");
    return DLDataType{static_cast<uint8_t>(std::is_floating_point_v<T> ? kDLFloat
                                           : std::is_signed_v<T>       ? kDLInt
                                                                       : kDLUInt),
                      static_cast<uint8_t>(sizeof(T) * 8), 1};
}

// A typed, bounds-aware view of a compact row-major DLTensor in CPU memory. Checks dtype, device and layout once
// at construction so that indexing in the hot loop is plain arithmetic.
template <class T>
class View {
public:
    View() = default;
    explicit View(const DLTensor* t) {
        if (t == nullptr) throw Error("tensor not provided by the host", RUDDER_ERR_INTERNAL);
        const DLDataType want = dl_dtype<T>();
        if (t->dtype.code != want.code || t->dtype.bits != want.bits || t->dtype.lanes != 1)
            throw Error("tensor has an unexpected dtype", RUDDER_ERR_INTERNAL);
        if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
            throw Error("rudder::View reads CPU memory only; do not declare RUDDER_CAP_ANY_DEVICE",
                        RUDDER_ERR_UNSUPPORTED);
        data_ = reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
        shape_.assign(t->shape, t->shape + t->ndim);
        if (t->strides != nullptr) {
            int64_t expect = 1;
            for (int d = t->ndim - 1; d >= 0; --d) {
                if (shape_[d] != 1 && t->strides[d] != expect)
                    throw Error("tensor is not compact", RUDDER_ERR_INTERNAL);
                expect *= shape_[d];
            }
        }
    }
    int ndim() const { return static_cast<int>(shape_.size()); }
    int64_t size(int d) const { return shape_.at(static_cast<size_t>(d)); }
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t s : shape_) n *= s;
        return n;
    }
    T* data() const { return data_; }
    T& operator()(int64_t i) const { return data_[i]; }
    T& operator()(int64_t i, int64_t j) const { return data_[i * shape_[1] + j]; }
    T& operator()(int64_t i, int64_t j, int64_t k) const { return data_[(i * shape_[1] + j) * shape_[2] + k]; }

private:
    T* data_ = nullptr;
    std::vector<int64_t> shape_;
};

// ABI 1.2 members, or nullptr / 0 where the host's struct has none (a 1.1 host, or RUDDER_CONTROL_FORMS=dense).
inline const DLTensor* rows_of(const rudder_step& s) {
    return RUDDER_HAS_MEMBER(&s, rudder_step, rows) ? s.rows : nullptr;
}
inline const DLTensor* candidate_ids_of(const rudder_step& s) {
    return RUDDER_HAS_MEMBER(&s, rudder_step, candidate_ids) ? s.candidate_ids : nullptr;
}
inline const DLTensor* candidate_logp_of(const rudder_step& s) {
    return RUDDER_HAS_MEMBER(&s, rudder_step, candidate_logp) ? s.candidate_logp : nullptr;
}
inline DLTensor* token_bits_of(const rudder_contribution& out) {
    return RUDDER_HAS_MEMBER(&out, rudder_contribution, token_bits) ? out.token_bits : nullptr;
}
inline DLTensor* candidate_delta_of(const rudder_contribution& out) {
    return RUDDER_HAS_MEMBER(&out, rudder_contribution, candidate_delta) ? out.candidate_delta : nullptr;
}
// ABI 1.3 members, or nullptr where the host's struct has none (a 1.2 host, or RUDDER_CONTROL_FORMS=dense).
inline const DLTensor* proposed_of(const rudder_step& s) {
    return RUDDER_HAS_MEMBER(&s, rudder_step, proposed) ? s.proposed : nullptr;
}
inline DLTensor* rejected_of(const rudder_contribution& out) {
    return RUDDER_HAS_MEMBER(&out, rudder_contribution, rejected) ? out.rejected : nullptr;
}
inline int64_t candidates_of(const rudder_run_info& run) {
    return RUDDER_HAS_MEMBER(&run, rudder_run_info, candidates) ? run.candidates : 0;
}
// The ABI 1.2 forms the host gives this controller (RUDDER_CAP_* bits); none from a 1.1 host.
inline uint64_t forms_of(const rudder_run_info& run) {
    return RUDDER_HAS_MEMBER(&run, rudder_run_info, forms) ? run.forms : 0;
}

// The rows a step's buffers are read and written by: the positions the step samples when the host gave this
// controller the row form (RUDDER_CAP_ROWS on a 1.2 host: x0_logits and the row-shaped outputs are [N, ...]; and
// always in the COMMIT phase), otherwise every position in order, row r = b * L + i (the dense [B, L, ...] buffers, a
// 1.1 host, the GUIDE phase).
class Rows {
public:
    Rows(const rudder_step& step, const rudder_run_info& run) : L_(run.seq_len) {
        const DLTensor* rows = rows_of(step);
        // The host says which form it gave (rudder_run_info.forms); a 1.2 host from before that member was appended
        // shows the row form in x0_logits' shape. COMMIT's buffers are at the rows whatever the forms.
        const bool row_form =
            step.phase == RUDDER_PHASE_COMMIT ||
            (RUDDER_HAS_MEMBER(&run, rudder_run_info, forms) ? (run.forms & RUDDER_CAP_ROWS) != 0
                                                             : step.x0_logits != nullptr && step.x0_logits->ndim == 2);
        if (rows != nullptr && row_form) {
            View<const int64_t> view(rows);
            flat_ = view.data();
            n_ = view.size(0);
        } else {
            n_ = run.batch_size * run.seq_len;
        }
    }
    int64_t size() const { return n_; }
    // The row's position as the flat index b * L + i.
    int64_t flat(int64_t r) const { return flat_ != nullptr ? flat_[r] : r; }
    int64_t batch(int64_t r) const { return flat(r) / L_; }
    int64_t position(int64_t r) const { return flat(r) % L_; }
    // The buffers are dense: every position is a row.
    bool every_position() const { return flat_ == nullptr; }

private:
    const int64_t* flat_ = nullptr;
    int64_t n_ = 0, L_ = 1;
};

// A buffer one row at a time, whether it is [N, X] over the step's rows or [B, L, X] dense: row r is Rows' row r
// in both (a dense buffer's rows are its B * L positions). For x0_logits, logit_delta, forbidden, the discrete grad.
template <class T>
class RowView {
public:
    RowView() = default;
    explicit RowView(const DLTensor* t) : view_(t) {
        if (view_.ndim() < 2) throw Error("RowView needs a tensor of at least 2 dimensions", RUDDER_ERR_INTERNAL);
        width_ = view_.size(view_.ndim() - 1);
        rows_ = width_ > 0 ? view_.numel() / width_ : 0;
    }
    int64_t rows() const { return rows_; }
    int64_t width() const { return width_; }
    T* operator[](int64_t r) const { return view_.data() + r * width_; }
    T& operator()(int64_t r, int64_t x) const { return view_.data()[r * width_ + x]; }

private:
    View<T> view_;
    int64_t rows_ = 0, width_ = 0;
};

// The step's token mask, written one way whatever form the host gave: bits in token_bits (RUDDER_CAP_PACKED_MASK on
// a 1.2 host) or bytes in forbidden (declare RUDDER_CAP_HARD_CONSTRAINT), rows as Rows numbers them. A mask either
// forbids tokens (kForbid) or lists each row's allowed tokens (kAllow: a row without any then allows nothing, which
// the host reports as a conflict; allow_all() leaves a row free). Over bytes, kAllow starts with every token
// forbidden and allow() lifts one. Making the mask sets the written bit: an untouched kForbid mask constrains nothing.
// Tokens must be in [0, V); the host checks bits, not each call.
class TokenMask {
public:
    enum Meaning { kForbid, kAllow };
    TokenMask(rudder_contribution& out, const rudder_run_info& run, Meaning meaning = kForbid)
        : meaning_(meaning), V_(run.vocab_size) {
        if (DLTensor* bits = token_bits_of(out)) {
            packed_ = true;
            bits_ = RowView<uint32_t>(bits);
            out.written |= meaning == kAllow ? RUDDER_WROTE_ALLOWED_BITS : RUDDER_WROTE_FORBIDDEN_BITS;
        } else if (out.forbidden != nullptr) {
            bytes_ = RowView<uint8_t>(out.forbidden);
            if (meaning == kAllow) std::fill(bytes_[0], bytes_[0] + bytes_.rows() * bytes_.width(), uint8_t{1});
            out.written |= RUDDER_WROTE_FORBIDDEN;
        } else {
            throw Error("the host gave no token mask: declare RUDDER_CAP_HARD_CONSTRAINT", RUDDER_ERR_INTERNAL);
        }
    }
    // Bits in token_bits (else bytes in forbidden).
    bool packed() const { return packed_; }
    void forbid(int64_t row, int64_t token) {
        expect(kForbid, "forbid");
        set(row, token, true);
    }
    void allow(int64_t row, int64_t token) {
        expect(kAllow, "allow");
        set(row, token, false);
    }
    void allow_all(int64_t row) {
        expect(kAllow, "allow_all");
        if (!packed_) {
            std::fill(bytes_[row], bytes_[row] + V_, uint8_t{0});
            return;
        }
        uint32_t* words = bits_[row];
        std::fill(words, words + V_ / 32, ~uint32_t{0});
        if (V_ % 32 != 0) words[V_ / 32] = (uint32_t{1} << (V_ % 32)) - 1;
    }

private:
    void expect(Meaning meaning, const char* call) const {
        if (meaning != meaning_)
            throw Error(std::string("TokenMask::") + call + " on a mask made for " +
                            (meaning_ == kAllow ? "allowed" : "forbidden") + " tokens",
                        RUDDER_ERR_INTERNAL);
    }
    // In bits a set bit is the listed token (forbidden or allowed); in bytes 1 is always "forbidden".
    void set(int64_t row, int64_t token, bool forbidden) {
        if (!packed_)
            bytes_(row, token) = forbidden ? 1 : 0;
        else
            bits_(row, token / 32) |= uint32_t{1} << (token % 32);
    }
    Meaning meaning_;
    int64_t V_;
    bool packed_ = false;
    RowView<uint32_t> bits_;
    RowView<uint8_t> bytes_;
};

// Each row's candidate tokens, most likely first, and a delta for each, rows as Rows numbers them. On a 1.2 host that
// offers them (RUDDER_CAP_CANDIDATES, rudder_run_info.candidates = k > 0): the host's candidate_ids and candidate_logp
// [N, k], deltas into candidate_delta. Otherwise (a 1.1 host, dense forms, a run without candidates) they are found
// here as the `own_k` most likely tokens of each row of x0_logits (ties: the lower id first), and a delta goes into
// logit_delta at its token, so declare RUDDER_CAP_LOGIT_DELTA too. Either way a token that is no candidate gets no
// delta. Making it sets the written bit. PREDICT phase only.
class Candidates {
public:
    Candidates(const rudder_step& step, rudder_contribution& out, int64_t own_k) {
        const DLTensor* ids = candidate_ids_of(step);
        DLTensor* delta = candidate_delta_of(out);
        if (ids != nullptr && delta != nullptr) {
            ids_ = View<const int64_t>(ids);
            logp_ = View<const float>(candidate_logp_of(step));
            delta_ = View<float>(delta);
            rows_ = ids_.size(0);
            k_ = ids_.size(1);
            offered_ = true;
            out.written |= RUDDER_WROTE_CANDIDATE_DELTA;
            return;
        }
        if (step.x0_logits == nullptr) throw Error("candidates exist only in the PREDICT phase", RUDDER_ERR_INTERNAL);
        if (out.logit_delta == nullptr)
            throw Error(
                "the host offers no candidates here, so deltas go into logit_delta: declare "
                "RUDDER_CAP_LOGIT_DELTA as well as RUDDER_CAP_CANDIDATES",
                RUDDER_ERR_INTERNAL);
        const RowView<const float> x0(step.x0_logits);
        logit_delta_ = RowView<float>(out.logit_delta);
        rows_ = x0.rows();
        k_ = std::min<int64_t>(own_k, x0.width());
        own_ids_.resize(static_cast<size_t>(rows_ * k_));
        own_logp_.resize(own_ids_.size());
        std::vector<int64_t> order(static_cast<size_t>(x0.width()));
        for (int64_t r = 0; r < rows_; ++r) {
            const float* lp = x0[r];
            for (size_t v = 0; v < order.size(); ++v) order[v] = static_cast<int64_t>(v);
            std::partial_sort(order.begin(), order.begin() + k_, order.end(),
                              [lp](int64_t a, int64_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
            for (int64_t j = 0; j < k_; ++j) {
                own_ids_[static_cast<size_t>(r * k_ + j)] = order[static_cast<size_t>(j)];
                own_logp_[static_cast<size_t>(r * k_ + j)] = lp[order[static_cast<size_t>(j)]];
            }
        }
        out.written |= RUDDER_WROTE_LOGIT_DELTA;
    }
    int64_t rows() const { return rows_; }
    // Candidates per row: the host's k when it offers them (which may differ from own_k), else own_k (at most V).
    int64_t k() const { return k_; }
    // The host gave the candidates (else they were found here).
    bool offered() const { return offered_; }
    int64_t id(int64_t r, int64_t j) const { return offered_ ? ids_(r, j) : own_ids_[static_cast<size_t>(r * k_ + j)]; }
    float logp(int64_t r, int64_t j) const {
        return offered_ ? logp_(r, j) : own_logp_[static_cast<size_t>(r * k_ + j)];
    }
    void set_delta(int64_t r, int64_t j, float value) {
        if (offered_)
            delta_(r, j) = value;
        else
            logit_delta_(r, id(r, j)) = value;
    }

private:
    View<const int64_t> ids_;
    View<const float> logp_;
    View<float> delta_;
    RowView<float> logit_delta_;
    std::vector<int64_t> own_ids_;
    std::vector<float> own_logp_;
    int64_t rows_ = 0, k_ = 0;
    bool offered_ = false;
};

// The COMMIT phase's proposals and the controller's answer, rows as Rows numbers them (the step's rows): token(r) is
// the token the host proposes to commit at row r, reject(r) refuses it (the host then draws the row again within the
// token mask the controller writes in the same call, e.g. through TokenMask). Making it sets RUDDER_WROTE_REJECTED:
// a row not rejected is accepted.
class Proposals {
public:
    Proposals(const rudder_step& step, rudder_contribution& out) {
        const DLTensor* proposed = proposed_of(step);
        DLTensor* rejected = rejected_of(out);
        if (step.phase != RUDDER_PHASE_COMMIT || proposed == nullptr || rejected == nullptr)
            throw Error("proposals exist only in the COMMIT phase (declare RUDDER_CAP_COMMIT)", RUDDER_ERR_INTERNAL);
        proposed_ = View<const int64_t>(proposed);
        rejected_ = View<uint8_t>(rejected);
        out.written |= RUDDER_WROTE_REJECTED;
    }
    int64_t size() const { return proposed_.size(0); }
    int64_t token(int64_t r) const { return proposed_(r); }
    void reject(int64_t r) { rejected_(r) = 1; }
    bool rejected(int64_t r) const { return rejected_(r) != 0; }

private:
    View<const int64_t> proposed_;
    View<uint8_t> rejected_;
};

// The run's services with C++ types. Valid between begin() and the next begin()/destroy().
class Run {
public:
    Run() = default;
    explicit Run(const rudder_run_info* info) : info_(info) {}
    const rudder_run_info& info() const {
        if (info_ == nullptr) throw Error("no run has begun", RUDDER_ERR_INTERNAL);
        return *info_;
    }
    std::vector<int64_t> tokenize(const std::string& text) const {
        std::vector<int64_t> ids(64);
        int64_t n = 0;
        rudder_status st = info().tokenize(info_->run_ctx, text.c_str(), ids.data(), (int64_t)ids.size(), &n);
        if (st == RUDDER_ERR_BUFFER_TOO_SMALL) {
            ids.resize(static_cast<size_t>(n));
            st = info().tokenize(info_->run_ctx, text.c_str(), ids.data(), (int64_t)ids.size(), &n);
        }
        if (st != RUDDER_OK) throw Error("host could not tokenize \"" + text + "\"", st);
        ids.resize(static_cast<size_t>(n));
        return ids;
    }
    std::string detokenize(const int64_t* ids, int64_t n) const {
        std::string out(256, '\0');
        size_t len = 0;
        rudder_status st = info().detokenize(info_->run_ctx, ids, n, out.data(), out.size(), &len);
        if (st == RUDDER_ERR_BUFFER_TOO_SMALL) {
            out.assign(len + 1, '\0');
            st = info().detokenize(info_->run_ctx, ids, n, out.data(), out.size(), &len);
        }
        if (st != RUDDER_OK) throw Error("host could not detokenize", st);
        out.resize(len);
        return out;
    }
    std::string token_text(int64_t id) const {
        const char* s = info().token_text(info_->run_ctx, id);
        return s != nullptr ? std::string(s) : std::string();
    }
    // ABI 1.1 members; "" / nullptr from a 1.0 host.
    bool has(size_t member_end) const { return info().struct_size >= member_end; }
    std::string model_dir() const {
        return has(offsetof(rudder_run_info, model_dir) + sizeof(const char*)) && info_->model_dir != nullptr
                   ? std::string(info_->model_dir)
                   : std::string();
    }
    const DLTensor* embedding() const {
        return has(offsetof(rudder_run_info, embedding) + sizeof(const DLTensor*)) ? info_->embedding : nullptr;
    }
    // The directory of a model by bundled name or path; throws Error if the host has none (or is 1.0).
    std::string find_model(const std::string& name) const {
        if (!has(offsetof(rudder_run_info, find_model) + sizeof(info_->find_model)) || info_->find_model == nullptr)
            throw Error("the host cannot look up models (it predates plugin ABI 1.1)", RUDDER_ERR_UNSUPPORTED);
        std::string out(512, '\0');
        size_t len = 0;
        rudder_status st = info_->find_model(info_->run_ctx, name.c_str(), out.data(), out.size(), &len);
        if (st == RUDDER_ERR_BUFFER_TOO_SMALL) {
            out.assign(len + 1, '\0');
            st = info_->find_model(info_->run_ctx, name.c_str(), out.data(), out.size(), &len);
        }
        if (st != RUDDER_OK) throw Error("no model '" + name + "' (see the host's message)", st);
        out.resize(len);
        return out;
    }

private:
    const rudder_run_info* info_ = nullptr;
};

// Base class of a controller. A subclass has a constructor (const rudder_host&, std::string_view params_json)
// that validates params and throws rudder::Error on bad input.
class Controller {
public:
    virtual ~Controller() = default;
    // Called at the start of each run; the default keeps `run_` for the services. Throw Error(...,
    // RUDDER_ERR_UNSUPPORTED) for a family or shape the controller cannot handle.
    virtual void begin(const rudder_run_info& run) { run_ = Run(&run); }
    virtual void step(const rudder_step& step, rudder_contribution& out) = 0;
    // ABI 1.3: the COMMIT phase, called instead of step() there (only for a controller that declares
    // RUDDER_CAP_COMMIT). Override it when you declare that bit.
    virtual void commit(const rudder_step& /*step*/, rudder_contribution& /*out*/) {
        throw Error("the controller declares RUDDER_CAP_COMMIT but does not override commit()", RUDDER_ERR_INTERNAL);
    }
    virtual void evaluate(const rudder_sample& /*sample*/, rudder_verdict& /*verdict*/) {}

protected:
    Run run_;
};

namespace detail {

// The last failed create() on this thread. A plain char buffer on purpose: a thread_local with a destructor
// would keep the plugin library loaded until every thread that ever called create() exits.
constexpr size_t kCreateErrorCapacity = 1024;
inline char* create_error_buffer() {
    thread_local char message[kCreateErrorCapacity] = {0};
    return message;
}

struct Instance {
    std::unique_ptr<Controller> controller;
    std::string error;
};

template <class F>
rudder_status guarded(std::string& error, F&& body) noexcept {
    try {
        body();
        return RUDDER_OK;
    } catch (const Error& e) {
        error = e.what();
        return e.status();
    } catch (const std::bad_alloc&) {
        error = "out of memory";
        return RUDDER_ERR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        error = e.what();
        return RUDDER_ERR_INTERNAL;
    } catch (...) {
        error = "unknown exception";
        return RUDDER_ERR_INTERNAL;
    }
}

template <class C>
struct Adapter {
    static rudder_status create(const rudder_host* host, const char* params, void** self) noexcept {
        if (self == nullptr) return RUDDER_ERR_INVALID_ARGUMENT;
        *self = nullptr;
        std::string error;
        const rudder_status status = guarded(error, [&] {
            if (host == nullptr) throw Error("host table is NULL");
            auto inst = std::make_unique<Instance>();
            inst->controller = std::make_unique<C>(*host, std::string_view(params != nullptr ? params : "{}"));
            *self = inst.release();
        });
        char* buffer = create_error_buffer();
        const size_t n = std::min(error.size(), kCreateErrorCapacity - 1);
        std::memcpy(buffer, error.data(), n);
        buffer[n] = '\0';
        return status;
    }
    static void destroy(void* self) noexcept { delete static_cast<Instance*>(self); }
    static rudder_status begin(void* self, const rudder_run_info* run) noexcept {
        auto* inst = static_cast<Instance*>(self);
        return guarded(inst->error, [&] { inst->controller->begin(*run); });
    }
    static rudder_status step(void* self, const rudder_step* s, rudder_contribution* out) noexcept {
        auto* inst = static_cast<Instance*>(self);
        return guarded(inst->error, [&] {
            if (s->phase == RUDDER_PHASE_COMMIT)
                inst->controller->commit(*s, *out);
            else
                inst->controller->step(*s, *out);
        });
    }
    static rudder_status evaluate(void* self, const rudder_sample* sample, rudder_verdict* verdict) noexcept {
        auto* inst = static_cast<Instance*>(self);
        return guarded(inst->error, [&] { inst->controller->evaluate(*sample, *verdict); });
    }
    static const char* last_error(void* self) noexcept {
        return self == nullptr ? create_error_buffer() : static_cast<Instance*>(self)->error.c_str();
    }
};

}  // namespace detail
}  // namespace rudder

// Defines `static const rudder_controller_desc NAME` for controller class CLASS. Add RUDDER_CAP_EVALUATE to
// CAPABILITIES if the class overrides evaluate().
#define RUDDER_CONTROLLER(NAME, CLASS, ID, VERSION, DESCRIPTION, SCHEMA_JSON, CAPABILITIES)  \
    static const rudder_controller_desc NAME = {sizeof(rudder_controller_desc),              \
                                                RUDDER_ABI_MAJOR,                            \
                                                RUDDER_ABI_MINOR,                            \
                                                ID,                                          \
                                                VERSION,                                     \
                                                DESCRIPTION,                                 \
                                                SCHEMA_JSON,                                 \
                                                (CAPABILITIES),                              \
                                                &::rudder::detail::Adapter<CLASS>::create,   \
                                                &::rudder::detail::Adapter<CLASS>::destroy,  \
                                                &::rudder::detail::Adapter<CLASS>::begin,    \
                                                &::rudder::detail::Adapter<CLASS>::step,     \
                                                &::rudder::detail::Adapter<CLASS>::evaluate, \
                                                &::rudder::detail::Adapter<CLASS>::last_error};

// Defines the exported entry point listing the given controller descriptors (pointers). Refuses other majors.
#define RUDDER_PLUGIN(LIBRARY_NAME, ...)                                                                   \
    static const rudder_controller_desc* const rudder_plugin_controllers_[] = {__VA_ARGS__};               \
    static const rudder_plugin rudder_plugin_info_ = {                                                     \
        sizeof(rudder_plugin),                                                                             \
        RUDDER_ABI_MAJOR,                                                                                  \
        RUDDER_ABI_MINOR,                                                                                  \
        LIBRARY_NAME,                                                                                      \
        static_cast<uint32_t>(sizeof(rudder_plugin_controllers_) / sizeof(rudder_plugin_controllers_[0])), \
        rudder_plugin_controllers_};                                                                       \
    extern "C" RUDDER_EXPORT const rudder_plugin* rudder_plugin_entry(uint32_t host_abi_major, uint32_t) { \
        return host_abi_major == RUDDER_ABI_MAJOR ? &rudder_plugin_info_ : nullptr;                        \
    }

#endif  // RUDDER_CONTROLLER_HPP
