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

template <class T> constexpr DLDataType dl_dtype() {
    static_assert(std::is_arithmetic_v<T>, "View needs an arithmetic element type");
    return DLDataType{static_cast<uint8_t>(std::is_floating_point_v<T> ? kDLFloat
                                           : std::is_signed_v<T>     ? kDLInt
                                                                     : kDLUInt),
                      static_cast<uint8_t>(sizeof(T) * 8), 1};
}

// A typed, bounds-aware view of a compact row-major DLTensor in CPU memory. Checks dtype, device and layout once
// at construction so that indexing in the hot loop is plain arithmetic.
template <class T> class View {
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
                if (shape_[d] != 1 && t->strides[d] != expect) throw Error("tensor is not compact", RUDDER_ERR_INTERNAL);
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

template <class F> rudder_status guarded(std::string& error, F&& body) noexcept {
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

template <class C> struct Adapter {
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
        return guarded(inst->error, [&] { inst->controller->step(*s, *out); });
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
#define RUDDER_CONTROLLER(NAME, CLASS, ID, VERSION, DESCRIPTION, SCHEMA_JSON, CAPABILITIES)                        \
    static const rudder_controller_desc NAME = {                                                                 \
        sizeof(rudder_controller_desc), RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR, ID, VERSION, DESCRIPTION, SCHEMA_JSON, \
        (CAPABILITIES),                                                                                          \
        &::rudder::detail::Adapter<CLASS>::create,   &::rudder::detail::Adapter<CLASS>::destroy,                 \
        &::rudder::detail::Adapter<CLASS>::begin,    &::rudder::detail::Adapter<CLASS>::step,                    \
        &::rudder::detail::Adapter<CLASS>::evaluate, &::rudder::detail::Adapter<CLASS>::last_error};

// Defines the exported entry point listing the given controller descriptors (pointers). Refuses other majors.
#define RUDDER_PLUGIN(LIBRARY_NAME, ...)                                                                          \
    static const rudder_controller_desc* const rudder_plugin_controllers_[] = {__VA_ARGS__};                     \
    static const rudder_plugin rudder_plugin_info_ = {                                                           \
        sizeof(rudder_plugin), RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR, LIBRARY_NAME,                                 \
        static_cast<uint32_t>(sizeof(rudder_plugin_controllers_) / sizeof(rudder_plugin_controllers_[0])),       \
        rudder_plugin_controllers_};                                                                             \
    extern "C" RUDDER_EXPORT const rudder_plugin* rudder_plugin_entry(uint32_t host_abi_major, uint32_t) {       \
        return host_abi_major == RUDDER_ABI_MAJOR ? &rudder_plugin_info_ : nullptr;                              \
    }

#endif  // RUDDER_CONTROLLER_HPP
