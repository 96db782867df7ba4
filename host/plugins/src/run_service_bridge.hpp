// The run services a plugin calls back into during a call (tokenize, detokenize, token_text, find_model, denoise,
// token_pieces; the model's directory and embedding table), over the host's RunServices. Written once for both
// transports: a plugin in this process calls the C callbacks that begin_run() puts into its rudder_run_info; a plugin
// in a process of its own sends requests that serve() answers through the same callbacks. No exception ever crosses
// into plugin code: each becomes a status, and what was thrown is kept for the report (service_error()).
#pragma once

#include "dlpack_views.hpp"
#include "isolation_protocol.hpp"

#include <rudder/plugins/plugins.hpp>

#include <memory>
#include <string>
#include <vector>

namespace rudder::plugins {

class RunServiceBridge {
public:
    RunServiceBridge() = default;
    RunServiceBridge(const RunServiceBridge&) = delete;  // the plugin holds its address (run_ctx)
    RunServiceBridge& operator=(const RunServiceBridge&) = delete;

    // A run starts: points `run`'s run_ctx and service callbacks here, and sets its model_dir and embedding (the
    // model's table on `plugin_device`, continuous runs only). `services` (may be null: every service then answers
    // RUDDER_ERR_UNSUPPORTED) must outlive the run.
    void begin_run(RunServices* services, const RunShape& shape, const c10::Device& plugin_device,
                   rudder_run_info& run);
    // The run's embedding table as run_info.embedding views it (float32 [V, D], contiguous), or undefined.
    const at::Tensor& embedding() const { return embedding_; }

    // One call into the plugin, for as long as this object lives: the last call's service error is forgotten, and in a
    // PREDICT step `predict_step` is the step whose input denoise() runs on. Denoiser results the plugin asked for stay
    // alive until the call ends.
    class Call {
    public:
        Call(RunServiceBridge& bridge, const StepInputs* predict_step);
        ~Call();
        Call(const Call&) = delete;
        Call& operator=(const Call&) = delete;

    private:
        RunServiceBridge& bridge_;
    };

    // What a host service threw during the last call ("" if nothing).
    const std::string& service_error() const { return service_error_; }

    // Answers one run-service request (isolation::kTokenize ... kDenoise) from a plugin in a process of its own with
    // the reply's payload. Throws std::runtime_error for a malformed request.
    std::vector<char> serve(uint32_t type, isolation::Reader& r);

private:
    // Runs a host service for the plugin: any exception becomes a status, never an unwinding through C frames.
    template <class Body>
    rudder_status guard_service(const char* service, Body&& body) noexcept;
    void note_service_error(const char* service, const char* what) noexcept;

    // The rudder_run_info callbacks; run_ctx is the bridge.
    static rudder_status tokenize(void* run_ctx, const char* text, int64_t* out_ids, int64_t capacity,
                                  int64_t* n_ids) noexcept;
    static rudder_status detokenize(void* run_ctx, const int64_t* ids, int64_t n_ids, char* out, size_t capacity,
                                    size_t* n_bytes) noexcept;
    static const char* token_text(void* run_ctx, int64_t id) noexcept;
    static rudder_status find_model(void* run_ctx, const char* name, char* out, size_t capacity,
                                    size_t* n_bytes) noexcept;
    static rudder_status denoise(void* run_ctx, const char* const* conditions, int32_t n_conditions,
                                 const DLTensor** out_logits) noexcept;
    static rudder_status token_pieces(void* run_ctx, int32_t kind, char* bytes, size_t capacity, size_t* n_bytes,
                                      int64_t* offsets, int32_t* kind_after) noexcept;

    RunServices* services_ = nullptr;
    RunShape shape_;
    c10::Device plugin_device_{c10::kCPU};      // where every tensor the plugin sees lives
    const StepInputs* predict_step_ = nullptr;  // the PREDICT step in progress: denoise() runs on its input
    std::string service_error_;                 // what a host service threw during the current call, for the report
    std::vector<std::unique_ptr<TensorView>> denoise_results_;  // alive until the call ends
    std::string model_dir_;                                     // run_info.model_dir points here
    at::Tensor embedding_;                                      // run_info.embedding views this
    std::unique_ptr<TensorView> embedding_view_;
    std::shared_ptr<const RunServices::TokenPieces> pieces_;  // run_info.token_pieces answers from these
};

}  // namespace rudder::plugins
