// How the guarded adapter (ControllerInstance, controller_instance.cpp) reaches one controller instance: in this
// process, calling the descriptor's functions on the library loaded here (in_process_transport.cpp), or in a child
// process of its own (process_transport.cpp: RemoteController, the step's tensors in shared memory). The adapter
// prepares every call in the ABI's terms (run info, DLPack views, output buffers) and checks all that comes back; a
// transport carries the call and says how it ended. What only a transport can see it raises itself as a PluginError:
// a call over its time limit, a child that died or answered nonsense, shared memory it could not make.
#pragma once

#include "remote_controller.hpp"
#include "step_forms.hpp"

#include <rudder/plugins/plugins.hpp>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace rudder::plugins {

// How a call into the plugin ended.
enum class CallEnd {
    ok,
    failed,         // a status other than RUDDER_OK
    escaped,        // a C++ exception escaped the C callback
    rewrote_header  // step: the plugin changed an output's DLTensor header instead of writing in place
};

struct CallOutcome {
    CallEnd end = CallEnd::ok;
    rudder_status status = RUDDER_OK;  // failed: the plugin's status
    std::string message;               // failed: the plugin's message; rewrote_header: what it changed
    uint32_t written = 0;              // a step that ended well: its RUDDER_WROTE_* bits
};

// begin(): the run as the plugin gets it.
struct RunStart {
    const rudder_run_info* run = nullptr;  // complete, run services included; at this address for the whole run
    forms::StepShape shape;                // the run and the controller's forms (its rows and phase do not matter)
    int64_t run_candidates = 0;            // the k the run offers (shape.candidates counts it only for CANDIDATES)
    at::Tensor embedding;                  // what run->embedding views (float32 [V, D], contiguous), or undefined
    c10::Device plugin_device{c10::kCPU};  // where the tensors the plugin sees live
};

// The inputs of one step as the controller gets them: checked, contiguous, on the plugin's device; undefined where
// it gets none.
struct StepTensors {
    at::Tensor latent, x0_logits, tokens, masked;             // x0_logits: [B, L, V] (the dense form)
    at::Tensor rows, x0_rows, candidate_ids, candidate_logp;  // ABI 1.2; x0_rows: x0_logits [N, V] at the rows
    at::Tensor proposed;                                      // ABI 1.3, COMMIT: int64 [N]
};

// step(): one step as the adapter prepared it.
struct StepCall {
    const rudder_step* step = nullptr;   // its input views are over `tensors`
    rudder_contribution* out = nullptr;  // its output views are over the buffers output() gave; written = 0
    const StepTensors* tensors = nullptr;
    int64_t rows = 0;  // N, the step's rows (0 when the controller gets none)
    std::string when;  // " at step 3" (and the guide iteration), for messages
};

// The step inputs' shared memory file of the controllers of a run that run in processes of their own (see
// StepInputShare): sized at begin by the largest run seen, refilled once per step by the first isolated instance
// that steps.
struct StepInputFile {
    SharedMemory memory;
    uint64_t generation = 0;  // bumped each time a new file replaces the old (children must map the new one)
    isolation::InputLayout layout;
    uint32_t filled = 0;  // which of this step's inputs are in (isolation::kHas*): each is copied in by the first
                          // isolated controller of the step that reads it
};

struct StepInputShare::Impl {
    StepInputFile file;
};

class ControllerTransport {
public:
    // Destroys the instance if one was created (a child is asked to, then reaped).
    virtual ~ControllerTransport() = default;

    // Creates the instance from params (JSON text): once, and again at a run once usable() turned false (in a new
    // process, which replaces the dead one only if this succeeds).
    virtual CallOutcome create(const std::string& params_json) = 0;
    // False once the instance cannot be called any more (its process died or was killed).
    virtual bool usable() const = 0;
    // Whether the plugin can be handed tensors in device memory (RUDDER_CAP_ANY_DEVICE): a child sees CPU memory only.
    virtual bool reaches_device_memory() const = 0;
    // Seconds one step() or evaluate() may take (0 = no limit); in a child, begin() too.
    virtual void set_time_limit(double seconds) = 0;
    // The run's shared step inputs (process isolation; ignored in this process). Without, a child's transport keeps a
    // file of its own and refills it at every step.
    virtual void share_step_inputs(std::shared_ptr<StepInputFile> inputs) = 0;

    virtual CallOutcome begin(const RunStart& start) = 0;
    // The buffer of output `k` (a forms::Output) for the next step, of `sizes` and the output's dtype on the plugin's
    // device, initialised as the ABI promises by the time the plugin is called. Valid until the step after.
    virtual at::Tensor output(size_t k, at::IntArrayRef sizes) = 0;
    virtual CallOutcome step(const StepCall& call) = 0;
    // Fills `verdict` and, when the plugin gave one, `detail` (copied while no other call can change it).
    virtual CallOutcome evaluate(const rudder_sample& sample, rudder_verdict& verdict, std::string& detail,
                                 const std::string& when) = 0;
};

// In this process: calls into the library `type` was loaded from, holding its call mutex unless `thread_safe`.
// `where` prefixes every message.
std::unique_ptr<ControllerTransport> make_in_process_transport(const ControllerType& type, std::string where,
                                                               bool thread_safe);
// In a child process of its own (rudder-controller-host), started by create(); `serve` answers the plugin's run
// service requests while a begin, step or evaluate waits.
std::unique_ptr<ControllerTransport> make_process_transport(const ControllerType& type, std::string where,
                                                            RemoteController::Serve serve);

}  // namespace rudder::plugins
