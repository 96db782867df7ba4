// The controller in a child process of its own (rudder-controller-host, driven through RemoteController): each call
// is a request on the socket. The step's inputs go into the run's shared input file (StepInputShare), once per step
// by the first isolated controller that reads each; the outputs live in a shared file of this controller's own that
// the adapter reads in place (the child zeroes only the outputs the last step wrote). A child that died is replaced
// at the next run (the adapter creates the instance again once usable() turned false).
#include "controller_transport.hpp"
#include "dlpack_views.hpp"

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace rudder::plugins {

StepInputShare::StepInputShare() : impl_(std::make_unique<Impl>()) {}
StepInputShare::~StepInputShare() = default;
void StepInputShare::next_step() { impl_->file.filled = 0; }

namespace {

class ProcessTransport final : public ControllerTransport {
public:
    ProcessTransport(const ControllerType& type, std::string where, RemoteController::Serve serve)
        : type_(type), where_(std::move(where)), serve_(std::move(serve)) {}

    // Starts the child and creates the instance there. The child replaces the current one only if both succeed.
    CallOutcome create(const std::string& params_json) override {
        auto fresh = std::make_unique<RemoteController>(type_, where_);
        isolation::Writer request;
        request.text(params_json);
        const std::vector<char> reply = fresh->call(isolation::kCreate, request, "create", "", 0, nullptr);
        isolation::Reader r(reply);
        CallOutcome outcome = read_outcome(r, "create", "");
        if (outcome.end != CallEnd::ok) return outcome;
        remote_ = std::move(fresh);
        send_outputs_fd_ = true;
        inputs_generation_sent_ = 0;
        return outcome;
    }

    bool usable() const override { return remote_ != nullptr && remote_->alive(); }
    bool reaches_device_memory() const override { return false; }
    void set_time_limit(double seconds) override { time_limit_ = seconds; }

    void share_step_inputs(std::shared_ptr<StepInputFile> inputs) override {
        if (inputs_ != inputs) inputs_generation_sent_ = 0;
        inputs_ = std::move(inputs);
        own_inputs_ = false;
    }

    CallOutcome begin(const RunStart& start) override;

    // Where the child writes the output: read in place, not copied (the composer reads the outputs before this
    // controller's next step overwrites them).
    at::Tensor output(size_t k, at::IntArrayRef sizes) override {
        return shared_tensor(layout_.outputs[k], sizes, aten_dtype(forms::kOutputInfo[k].dtype));
    }

    CallOutcome step(const StepCall& call) override;
    CallOutcome evaluate(const rudder_sample& sample, rudder_verdict& verdict, std::string& detail,
                         const std::string& when) override;

private:
    at::Tensor shared_tensor(const isolation::Region& region, at::IntArrayRef sizes, at::ScalarType dtype) const {
        return at::from_blob(shared_.data() + region.offset, sizes, at::TensorOptions().dtype(dtype));
    }
    at::Tensor input_tensor(const isolation::Region& region, at::IntArrayRef sizes, at::ScalarType dtype) const {
        return at::from_blob(inputs_->memory.data() + region.offset, sizes, at::TensorOptions().dtype(dtype));
    }
    void put_inputs(const StepTensors& tensors, uint32_t& present);
    // How a call ended in the child, from its reply.
    CallOutcome read_outcome(isolation::Reader& r, const char* call, const std::string& when) const;

    ControllerType type_;  // to start the child again once the old one died
    std::string where_;
    RemoteController::Serve serve_;
    double time_limit_ = 0;
    bool continuous_ = false;

    // The child that runs the instance, the shared memory its outputs live in, and the inputs' shared memory (the
    // run's, or, given none, its own: then refilled at every step).
    std::unique_ptr<RemoteController> remote_;
    bool send_outputs_fd_ = false;  // the child has not mapped `shared_` yet
    SharedMemory shared_;
    isolation::OutputLayout layout_;
    std::shared_ptr<StepInputFile> inputs_;
    bool own_inputs_ = false;
    uint64_t inputs_generation_sent_ = 0;  // the input file the child has mapped (0: none yet)
};

CallOutcome ProcessTransport::read_outcome(isolation::Reader& r, const char* call, const std::string& when) const {
    CallOutcome outcome;
    const auto end = r.get<uint32_t>();
    outcome.status = r.get<int32_t>();
    outcome.written = r.get<uint32_t>();
    outcome.message = r.text();
    switch (end) {
        case isolation::kOk: outcome.end = CallEnd::ok; break;
        case isolation::kFailed: outcome.end = CallEnd::failed; break;
        case isolation::kEscaped: outcome.end = CallEnd::escaped; break;
        case isolation::kRewroteHeader: outcome.end = CallEnd::rewrote_header; break;
        default: throw PluginError(where_ + ": " + call + when + ": an unknown reply from its process");
    }
    return outcome;
}

CallOutcome ProcessTransport::begin(const RunStart& start) {
    const rudder_run_info& run = *start.run;
    continuous_ = run.family == RUDDER_FAMILY_CONTINUOUS;
    const int64_t D = continuous_ ? run.embed_dim : 0;
    const bool embedding = start.embedding.defined();
    layout_ = isolation::output_layout(start.shape, embedding);
    if (inputs_ == nullptr) {
        inputs_ = std::make_shared<StepInputFile>();
        own_inputs_ = true;
    }
    StepInputFile& share = *inputs_;
    share.layout = isolation::input_layout(run.batch_size, run.seq_len, run.vocab_size, D, start.run_candidates);
    std::vector<int> fds;
    uint8_t passed = 0;
    try {
        if (shared_.reserve(layout_.total) || send_outputs_fd_) {
            fds.push_back(shared_.fd());
            passed |= 1;
        }
        if (share.memory.reserve(share.layout.total)) ++share.generation;
    } catch (const std::exception& e) {
        throw PluginError(where_ + ": cannot share the run's tensors with its process: " + e.what());
    }
    share.filled = 0;
    if (inputs_generation_sent_ != share.generation) {
        fds.push_back(share.memory.fd());
        passed |= 2;
    }
    if (embedding) shared_tensor(layout_.embedding, {run.vocab_size, run.embed_dim}, at::kFloat).copy_(start.embedding);
    isolation::Writer request;
    request.put<int32_t>(run.family)
        .put<int64_t>(run.batch_size)
        .put<int64_t>(run.seq_len)
        .put<int64_t>(run.vocab_size)
        .put<int64_t>(run.embed_dim)
        .put<int64_t>(run.pad_id)
        .put<int64_t>(run.mask_id)
        .put<int64_t>(run.unk_id)
        .put<int32_t>(run.total_steps)
        .put<uint8_t>(embedding ? 1 : 0)
        .put<uint64_t>(shared_.size())
        .put<uint64_t>(share.memory.size())
        .put<uint8_t>(passed)
        .text(run.model_dir)
        .put<uint8_t>(start.shape.negotiated.abi13   ? 3
                      : start.shape.negotiated.abi12 ? 2
                                                     : 1)
        .put<uint64_t>(start.shape.negotiated.capabilities)
        .put<int64_t>(start.run_candidates);
    const std::vector<char> reply = remote_->call(isolation::kBegin, request, "begin", "", time_limit_, serve_, fds);
    inputs_generation_sent_ = share.generation;
    send_outputs_fd_ = false;
    isolation::Reader r(reply);
    return read_outcome(r, "begin", "");
}

// The inputs go into the run's shared input file once per step: the first isolated controller that reads one
// copies it in, the others find it there.
void ProcessTransport::put_inputs(const StepTensors& tensors, uint32_t& present) {
    StepInputFile& share = *inputs_;
    if (own_inputs_) share.filled = 0;
    const isolation::InputLayout& at_ = share.layout;
    const auto put = [&](uint32_t bit, const at::Tensor& input, const isolation::Region& region) {
        if (!input.defined()) return;
        if ((share.filled & bit) == 0) input_tensor(region, input.sizes(), input.scalar_type()).copy_(input);
        present |= bit;
    };
    if (continuous_) put(isolation::kHasLatent, tensors.latent, at_.latent);
    put(isolation::kHasLogits, tensors.x0_logits, at_.x0_logits);
    put(isolation::kHasTokens, tensors.tokens, at_.tokens);
    if (!continuous_) put(isolation::kHasMasked, tensors.masked, at_.masked);
    put(isolation::kHasRows, tensors.rows, at_.rows);
    put(isolation::kHasX0Rows, tensors.x0_rows, at_.x0_rows);
    put(isolation::kHasCandidates, tensors.candidate_ids, at_.candidate_ids);
    put(isolation::kHasCandidates, tensors.candidate_logp, at_.candidate_logp);
    put(isolation::kHasProposed, tensors.proposed, at_.proposed);
    share.filled |= present;  // after all are in: one bit covers both candidate tensors
}

CallOutcome ProcessTransport::step(const StepCall& call) {
    uint32_t present = 0;
    put_inputs(*call.tensors, present);
    const rudder_step& in = *call.step;
    isolation::Writer request;
    request.put<int32_t>(in.phase)
        .put<int32_t>(in.step)
        .put<int32_t>(in.total_steps)
        .put<int32_t>(in.guide_iter)
        .put<double>(in.t)
        .put<double>(in.t_next)
        .put<uint32_t>(present)
        .put<int64_t>(call.rows);
    const std::vector<char> reply = remote_->call(isolation::kStep, request, "step", call.when, time_limit_, serve_);
    isolation::Reader reader(reply);
    return read_outcome(reader, "step", call.when);
}

CallOutcome ProcessTransport::evaluate(const rudder_sample& sample, rudder_verdict& verdict, std::string& detail,
                                       const std::string& when) {
    isolation::Writer request;
    request.put<int64_t>(sample.index)
        .put<int64_t>(sample.n_tokens)
        .bytes(sample.tokens, static_cast<size_t>(sample.seq_len) * sizeof(int64_t))
        .text(sample.text);
    const std::vector<char> reply = remote_->call(isolation::kEvaluate, request, "evaluate", when, time_limit_, serve_);
    isolation::Reader r(reply);
    CallOutcome outcome = read_outcome(r, "evaluate", when);
    if (outcome.end != CallEnd::ok) return outcome;
    verdict.satisfied = r.get<int32_t>();
    verdict.score = r.get<double>();
    r.get<uint8_t>();  // whether the plugin gave a detail: "" either way
    detail = r.text();
    return outcome;
}

}  // namespace

std::unique_ptr<ControllerTransport> make_process_transport(const ControllerType& type, std::string where,
                                                            RemoteController::Serve serve) {
    return std::make_unique<ProcessTransport>(type, std::move(where), std::move(serve));
}

}  // namespace rudder::plugins
