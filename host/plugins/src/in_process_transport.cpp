// The controller in this process: its calls are calls of the descriptor's functions on the library loaded here,
// serialised on the library's call mutex unless the controller is THREAD_SAFE.
#include "controller_transport.hpp"
#include "dlpack_views.hpp"
#include "library.hpp"

#include <rudder/plugins/plugin_calls.hpp>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

namespace rudder::plugins {
namespace {

class InProcessTransport final : public ControllerTransport {
public:
    InProcessTransport(const ControllerType& type, std::string where, bool thread_safe)
        : library_(type.library), desc_(type.desc), where_(std::move(where)), thread_safe_(thread_safe) {
        guard_exit_during_plugin_calls();
    }

    ~InProcessTransport() override {
        if (!created_) return;
        try {
            auto lock = lock_for_call();
            const PluginCallScope scope(where_.c_str());
            desc_->destroy(self_);
        } catch (...) {
            try {
                spdlog::error("{}: destroy failed", where_);
            } catch (...) {
                // Nothing left to report with.
            }
        }
    }

    CallOutcome create(const std::string& params_json) override {
        CallOutcome outcome;
        auto lock = lock_for_call();  // last_error(NULL) is per thread: read it before anyone else creates
        const PluginCallScope scope(where_.c_str());
        try {
            outcome.status = desc_->create(host_services(), params_json.c_str(), &self_);
        } catch (...) {
            outcome.end = CallEnd::escaped;
            return outcome;
        }
        if (outcome.status != RUDDER_OK) return failed(std::move(outcome), nullptr);
        created_ = true;
        return outcome;
    }

    bool usable() const override { return true; }
    bool reaches_device_memory() const override { return true; }
    void set_time_limit(double seconds) override { time_limit_ = seconds; }
    void set_cancel_flag(const std::atomic<bool>*) override {}
    void share_step_inputs(std::shared_ptr<StepInputFile>) override {}

    CallOutcome begin(const RunStart& start) override {
        device_ = start.plugin_device;
        CallOutcome outcome;
        auto lock = lock_for_call();
        const PluginCallScope scope(where_.c_str());
        try {
            outcome.status = desc_->begin(self_, start.run);
        } catch (...) {
            outcome.end = CallEnd::escaped;
            return outcome;
        }
        if (outcome.status != RUDDER_OK) return failed(std::move(outcome), self_);
        return outcome;
    }

    at::Tensor output(size_t k, at::IntArrayRef sizes) override {
        return at::full(sizes, forms::initial_value(k),
                        at::TensorOptions().dtype(aten_dtype(forms::kOutputInfo[k].dtype)).device(device_));
    }

    CallOutcome step(const StepCall& call) override {
        CallOutcome outcome;
        auto lock = lock_for_call();
        const auto start = std::chrono::steady_clock::now();
        const PluginCallScope scope(where_.c_str());
        try {
            outcome.status = desc_->step(self_, call.step, call.out);
        } catch (...) {
            outcome.end = CallEnd::escaped;
            return outcome;
        }
        if (outcome.status != RUDDER_OK) return failed(std::move(outcome), self_);
        check_duration("step", start, call.when);
        outcome.written = call.out->written;
        return outcome;
    }

    CallOutcome evaluate(const rudder_sample& sample, rudder_verdict& verdict, std::string& detail,
                         const std::string& when) override {
        CallOutcome outcome;
        auto lock = lock_for_call();
        const auto start = std::chrono::steady_clock::now();
        const PluginCallScope scope(where_.c_str());
        try {
            outcome.status = desc_->evaluate(self_, &sample, &verdict);
        } catch (...) {
            outcome.end = CallEnd::escaped;
            return outcome;
        }
        if (outcome.status != RUDDER_OK) return failed(std::move(outcome), self_);
        check_duration("evaluate", start, when);
        if (verdict.detail != nullptr)
            detail = verdict.detail;  // plugin-owned until the next call: copy while no
                                      // other call can run
        return outcome;
    }

private:
    // Holds the library's call mutex unless the controller is thread-safe.
    std::unique_lock<std::mutex> lock_for_call() const {
        std::unique_lock<std::mutex> lock(library_->call_mutex(), std::defer_lock);
        if (!thread_safe_) lock.lock();
        return lock;
    }

    // A failed call's outcome with the plugin's message, read while the call mutex is still held.
    CallOutcome failed(CallOutcome outcome, void* self) const {
        outcome.end = CallEnd::failed;
        outcome.message = plugin_message(desc_, self);
        return outcome;
    }

    // A call that returned after its time limit fails the run: the host cannot stop a call in progress (that
    // would need the plugin in another process), but it can refuse to go on with a controller this slow.
    void check_duration(const char* call, std::chrono::steady_clock::time_point start, const std::string& when) const {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (time_limit_ > 0 && seconds > time_limit_) {
            char text[160];
            std::snprintf(text, sizeof text, ": %s took %.3f s%s, over its time limit of %g s", call, seconds,
                          when.c_str(), time_limit_);
            throw PluginError(where_ + text + " (the recipe's time_limit for this controller)");
        }
    }

    std::shared_ptr<Library> library_;  // keeps the library loaded while the instance lives
    const rudder_controller_desc* desc_;
    std::string where_;
    bool thread_safe_;
    bool created_ = false;
    void* self_ = nullptr;
    double time_limit_ = 0;
    c10::Device device_{c10::kCPU};
};

}  // namespace

std::unique_ptr<ControllerTransport> make_in_process_transport(const ControllerType& type, std::string where,
                                                               bool thread_safe) {
    return std::make_unique<InProcessTransport>(type, std::move(where), thread_safe);
}

}  // namespace rudder::plugins
