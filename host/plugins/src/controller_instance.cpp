// The guarded adapter between the host's torch tensors and a controller's C callbacks, the same whichever transport
// reaches the controller (controller_transport.hpp: in this process, or in a process of its own). It speaks to the
// controller in the forms negotiated for it (step_forms.hpp), hands it DLPack views (dlpack_views.hpp) of its inputs
// and of its output buffers, bridges its calls back into the run (run_service_bridge.hpp), and checks everything it
// wrote after the call; no exception ever crosses into plugin code.
#include "controller_transport.hpp"
#include "dlpack_views.hpp"
#include "run_service_bridge.hpp"
#include "step_forms.hpp"

#include <rudder/plugins/plugins.hpp>

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::plugins {
namespace {

const char* status_name(rudder_status status) {
    switch (status) {
        case RUDDER_OK: return "RUDDER_OK";
        case RUDDER_ERR_INVALID_ARGUMENT: return "RUDDER_ERR_INVALID_ARGUMENT";
        case RUDDER_ERR_UNSUPPORTED: return "RUDDER_ERR_UNSUPPORTED";
        case RUDDER_ERR_BUFFER_TOO_SMALL: return "RUDDER_ERR_BUFFER_TOO_SMALL";
        case RUDDER_ERR_INTERNAL: return "RUDDER_ERR_INTERNAL";
        case RUDDER_ERR_CANCELLED: return "RUDDER_ERR_CANCELLED";
        case RUDDER_ERR_OUT_OF_MEMORY: return "RUDDER_ERR_OUT_OF_MEMORY";
        default: return "unknown status";
    }
}

// StepOutputs' member for each output, in forms::Output order.
at::Tensor StepOutputs::*const kResultMember[forms::kOutputs] = {
    &StepOutputs::logit_delta, &StepOutputs::grad,       &StepOutputs::log_prob,        &StepOutputs::fixed_tokens,
    &StepOutputs::forbidden,   &StepOutputs::token_bits, &StepOutputs::candidate_delta, &StepOutputs::rejected};

// Checks that run on every output of every controller at every step. A CPU tensor is read in place, in one pass with
// no temporaries: at a step's few rows ATen's dispatch of the three or four operators a check takes costs more than
// the check, and over a dense [B, L, V] buffer the temporaries cost more than the pass. Other devices use ATen.
bool in_cpu_memory(const at::Tensor& t, at::ScalarType dtype) {
    return t.device().is_cpu() && t.scalar_type() == dtype && t.is_contiguous();
}

// No NaN or infinity in a floating-point tensor.
bool all_finite(const at::Tensor& t) {
    if (!in_cpu_memory(t, at::kFloat)) return at::isfinite(t).all().item<bool>();
    const auto* bits = static_cast<const uint32_t*>(t.data_ptr());
    constexpr uint32_t kExponent = 0x7f800000u;  // all ones: infinity or NaN
    uint32_t not_finite = 0;
    for (int64_t k = 0, n = t.numel(); k < n; ++k) not_finite |= (bits[k] & kExponent) == kExponent ? 1u : 0u;
    return not_finite == 0;
}

// The first value of an int64 tensor outside [low, high), if any.
std::optional<int64_t> first_outside(const at::Tensor& t, int64_t low, int64_t high) {
    if (!in_cpu_memory(t, at::kLong)) {
        const at::Tensor outside = t.lt(low).logical_or(t.ge(high));
        if (!outside.any().item<bool>()) return std::nullopt;
        return t.masked_select(outside)[0].item<int64_t>();
    }
    const int64_t* v = t.data_ptr<int64_t>();
    for (int64_t k = 0, n = t.numel(); k < n; ++k)
        if (v[k] < low || v[k] >= high) return v[k];
    return std::nullopt;
}

// The index of the first value of a uint8 tensor above `most`, or -1.
int64_t first_above(const at::Tensor& t, uint8_t most) {
    if (!in_cpu_memory(t, at::kByte)) {
        const at::Tensor above = t.gt(most);
        return above.any().item<bool>() ? above.nonzero()[0][0].item<int64_t>() : -1;
    }
    const uint8_t* v = t.data_ptr<uint8_t>();
    for (int64_t k = 0, n = t.numel(); k < n; ++k)
        if (v[k] > most) return k;
    return -1;
}

// Whether int64 [N] values ascend strictly within [0, end).
bool ascending_within(const at::Tensor& t, int64_t end) {
    const int64_t n = t.size(0);
    if (n == 0) return true;
    if (!in_cpu_memory(t, at::kLong))
        return (n < 2 || t.slice(0, 1).gt(t.slice(0, 0, -1)).all().item<bool>()) && t[0].item<int64_t>() >= 0 &&
               t[-1].item<int64_t>() < end;
    const int64_t* v = t.data_ptr<int64_t>();
    for (int64_t k = 1; k < n; ++k)
        if (v[k] <= v[k - 1]) return false;
    return v[0] >= 0 && v[n - 1] < end;
}

// Checks one input the host passes in: dtype, shape, and puts it where the plugin may read it.
at::Tensor plugin_input(const at::Tensor& tensor, const char* name, at::ScalarType dtype,
                        std::vector<int64_t> expected_shape, const c10::Device& device, const std::string& where) {
    at::Tensor input = tensor;
    if (name == std::string("masked") && input.scalar_type() == at::kBool) input = input.to(at::kByte);
    if (input.scalar_type() != dtype)
        throw std::invalid_argument(where + ": host passed " + name + " as " + c10::toString(input.scalar_type()) +
                                    ", the plugin ABI needs " + c10::toString(dtype));
    if (input.sizes() != at::IntArrayRef(expected_shape))
        throw std::invalid_argument(where + ": host passed " + name + " of shape " + shape_text(input.sizes()) +
                                    ", the run expects " + shape_text(expected_shape));
    return input.to(device).contiguous();
}

// What the plugin changed in the output headers it was handed, instead of writing the data in place ("" if
// nothing). A child checks the headers it hands out the same way and reports it as CallEnd::rewrote_header.
std::string changed_output_header(const rudder_contribution& out, const std::array<TensorView, forms::kOutputs>& views,
                                  const std::array<DLTensor*, forms::kOutputs>& handed_out) {
    for (size_t k = 0; k < forms::kOutputs; ++k) {
        const forms::OutputInfo& info = forms::kOutputInfo[k];
        if (out.*info.member != handed_out[k]) return std::string("replaced the ") + info.name + " tensor pointer";
        if (handed_out[k] == nullptr) continue;
        if (const char* field = views[k].changed_field())
            return std::string("wrote a tensor with a changed ") + field + " (" + info.name + ")";
    }
    return std::string();
}

}  // namespace

struct ControllerInstance::Impl {
    std::string where;             // "controller '<label>' (<id>, <file>)", the prefix of every message
    forms::Negotiated negotiated;  // the ABI forms the controller is spoken to in
    std::string params;            // to create the instance again once the transport lost it (its process died)
    bool any_device = false;

    RunShape shape;
    bool begun = false;
    c10::Device plugin_device{c10::kCPU};  // where every tensor the plugin sees lives
    rudder_run_info run_info{};            // handed to begin(); its address must stay stable for the run
    RunServiceBridge services;
    std::unique_ptr<ControllerTransport> transport;  // declared last: destroyed first, while `services` is alive

    // Creates the instance through the transport (PluginError if it fails).
    void create() {
        const CallOutcome outcome = transport->create(params);
        if (outcome.end == CallEnd::failed) throw PluginError(where + ": invalid params: " + outcome.message);
        check(outcome, "create", "");
    }

    // The PluginError for a call that did not end well, wherever it ran.
    void check(const CallOutcome& outcome, const char* call, const std::string& when) const {
        switch (outcome.end) {
            case CallEnd::ok: return;
            case CallEnd::failed: throw PluginError(failure(call, outcome.status, outcome.message, when));
            case CallEnd::escaped:
                throw PluginError(where + ": " + call + " let a C++ exception escape across the C ABI" + when);
            case CallEnd::rewrote_header:
                throw PluginError(where + ": " + outcome.message + when + "; outputs must be written in place");
        }
    }

    std::string failure(const char* call, rudder_status status, const std::string& message,
                        const std::string& when) const {
        std::string text = where + ": " + call + " failed" + when + " (" + status_name(status) + "): " + message;
        if (!services.service_error().empty()) text += " (a host service failed: " + services.service_error() + ")";
        return text;
    }

    // The run and this step as they decide what the controller gets (forms::input_forms, forms::output_dims); the
    // step's rows are set once known.
    forms::StepShape step_shape(rudder_phase phase) const {
        forms::StepShape st = forms::run_shape(shape.family, shape.batch_size, shape.seq_len, shape.vocab_size,
                                               shape.embed_dim, shape.candidates, negotiated);
        st.phase = phase;
        return st;
    }

    // "row 1 (sequence 0, position 2)": row `row` of a row-shaped output over `rows`.
    std::string row_text(int64_t row, const at::Tensor& rows) const {
        const int64_t position = rows[row].item<int64_t>();
        return "row " + std::to_string(row) + " (sequence " + std::to_string(position / shape.seq_len) + ", position " +
               std::to_string(position % shape.seq_len) + ")";
    }

    // The step's ABI 1.2 inputs in the forms this controller reads, on `device`. A step without rows (a test that
    // calls step() directly) has all B * L; x0 at the rows and the candidates are taken from x0_logits when the
    // reverse loop did not give them.
    void row_inputs(const StepInputs& in, const forms::InputForms& wanted, const c10::Device& device,
                    StepTensors& r) const {
        if (!wanted.rows) return;
        const int64_t positions = shape.batch_size * shape.seq_len, V = shape.vocab_size;
        if (in.rows.defined()) {
            if (in.rows.dim() != 1 || in.rows.size(0) > positions)
                throw std::invalid_argument(where + ": host passed rows of shape " + shape_text(in.rows.sizes()) +
                                            ", the run expects [N] with N <= " + std::to_string(positions));
            r.rows = plugin_input(in.rows, "rows", at::kLong, {in.rows.size(0)}, device, where);
            if (!ascending_within(r.rows, positions))
                throw std::invalid_argument(where + ": host passed rows that are not ascending flat positions in [0, " +
                                            std::to_string(positions) + ")");
        } else {
            r.rows = at::arange(positions, at::TensorOptions().dtype(at::kLong).device(device));
        }
        const int64_t N = r.rows.size(0);
        if (wanted.proposed) {
            if (!in.proposed.defined())
                throw std::invalid_argument(where + ": host passed no proposed tokens in a COMMIT step");
            r.proposed = plugin_input(in.proposed, "proposed", at::kLong, {N}, device, where);
            if (const auto outside = first_outside(r.proposed, 0, V))
                throw std::invalid_argument(where + ": host proposed token " + std::to_string(*outside) +
                                            ", outside [0, " + std::to_string(V) + ")");
        }
        const bool need_x0 = wanted.x0_rows || (wanted.candidates && !in.candidate_ids.defined());
        at::Tensor x0;
        if (need_x0 && in.x0_rows.defined()) {
            x0 = plugin_input(in.x0_rows, "x0_rows", at::kFloat, {N, V}, device, where);
        } else if (need_x0) {
            if (!in.x0_logits.defined())
                throw std::invalid_argument(where + ": host passed no x0_logits in a PREDICT step");
            const at::Tensor all =
                plugin_input(in.x0_logits, "x0_logits", at::kFloat, {shape.batch_size, shape.seq_len, V}, device, where)
                    .reshape({positions, V});
            x0 = in.rows.defined() ? all.index_select(0, r.rows) : all;
        }
        if (wanted.x0_rows) r.x0_rows = x0;
        if (wanted.candidates) {
            const int64_t k = run_info.candidates;
            if (in.candidate_ids.defined() != in.candidate_logp.defined())
                throw std::invalid_argument(where +
                                            ": host passed candidate_ids without candidate_logp, or the other "
                                            "way round");
            if (in.candidate_ids.defined()) {
                r.candidate_ids = plugin_input(in.candidate_ids, "candidate_ids", at::kLong, {N, k}, device, where);
                r.candidate_logp = plugin_input(in.candidate_logp, "candidate_logp", at::kFloat, {N, k}, device, where);
            } else {
                std::tie(r.candidate_logp, r.candidate_ids) = top_candidates(x0, k);
            }
        }
    }

    // The checks every step's outputs get, wherever the controller ran: honest written bits, finite values, token
    // ids and token bits in range; then the outputs move to the run's device. `values` holds every output handed out
    // (undefined where none was), `rows` the step's rows (to name a row of a row-shaped output).
    StepOutputs finish_step(uint32_t written, const std::array<at::Tensor, forms::kOutputs>& values,
                            const at::Tensor& rows, const std::string& when) const {
        uint32_t provided = 0, known = 0;
        for (size_t k = 0; k < forms::kOutputs; ++k) {
            known |= forms::kOutputInfo[k].written;
            if (values[k].defined()) provided |= forms::kOutputInfo[k].written;
        }
        if ((written & ~provided) != 0) {
            std::string text;
            for (const auto& output : forms::kOutputInfo)
                if ((written & ~provided & output.written) != 0)
                    text += (text.empty() ? "" : ", ") + std::string(output.name);
            if ((written & ~known) != 0) text += text.empty() ? "unknown bits" : ", unknown bits";
            throw PluginError(where + ": set written bits for outputs it was not given (" + text + ")" + when);
        }
        if ((written & RUDDER_WROTE_FORBIDDEN_BITS) != 0 && (written & RUDDER_WROTE_ALLOWED_BITS) != 0)
            throw PluginError(where + ": set both RUDDER_WROTE_FORBIDDEN_BITS and RUDDER_WROTE_ALLOWED_BITS" + when +
                              "; token_bits holds either the forbidden or the allowed tokens");
        StepOutputs result;
        for (size_t k = 0; k < forms::kOutputs; ++k) {
            const char* name = forms::kOutputInfo[k].name;
            if ((written & forms::kOutputInfo[k].written) == 0) continue;
            const at::Tensor& value = values[k];
            if (value.is_floating_point() && !all_finite(value))
                throw PluginError(where + ": wrote NaN or Inf to " + name + when);
            if (k == forms::kFixedTokens) {
                if (const auto outside = first_outside(value, -1, shape.vocab_size))
                    throw PluginError(where + ": wrote fixed_tokens value " + std::to_string(*outside) +
                                      " outside [-1, " + std::to_string(shape.vocab_size) + ")" + when);
            }
            if (k == forms::kTokenBits) check_token_bits(value, rows, when);
            if (k == forms::kRejected) check_rejected(value, written, rows, when);
            result.*kResultMember[k] =
                value.to(shape.device);  // back to the run's device if the plugin worked on the CPU
        }
        if (values[forms::kRejected].defined() && (written & RUDDER_WROTE_REJECTED) == 0 &&
            first_above(values[forms::kRejected], 0) >= 0)
            throw PluginError(where + ": wrote rejected without setting RUDDER_WROTE_REJECTED" + when +
                              "; the host reads only the outputs whose written bit is set");
        result.bits_allowed = (written & RUDDER_WROTE_ALLOWED_BITS) != 0;
        return result;
    }

    // COMMIT: each row 0 (accepted) or 1 (rejected), and what a rejected row allows in token_bits, which the host
    // draws it again within.
    void check_rejected(const at::Tensor& rejected, uint32_t written, const at::Tensor& rows,
                        const std::string& when) const {
        const int64_t bad = first_above(rejected, 1);
        if (bad >= 0)
            throw PluginError(where + ": wrote rejected value " + std::to_string(rejected[bad].item<int64_t>()) +
                              " in " + row_text(bad, rows) + when +
                              "; 1 rejects the row's proposed token, 0 accepts it");
        const int64_t first_rejected = first_above(rejected, 0);
        if (first_rejected >= 0 && (written & (RUDDER_WROTE_FORBIDDEN_BITS | RUDDER_WROTE_ALLOWED_BITS)) == 0)
            throw PluginError(where + ": rejected " + row_text(first_rejected, rows) + when +
                              " but set neither RUDDER_WROTE_FORBIDDEN_BITS nor RUDDER_WROTE_ALLOWED_BITS; a "
                              "rejected row is drawn again within the token_bits its controllers write");
    }

    // No bit at or past V: those would be tokens the vocabulary does not have. `bits` is [B, L, W] or, row-shaped,
    // [N, W] over `rows`.
    void check_token_bits(const at::Tensor& bits, const at::Tensor& rows, const std::string& when) const {
        const int64_t V = shape.vocab_size, W = forms::token_words(V);
        if (V % 32 == 0) return;
        const auto past = static_cast<int32_t>(~((uint32_t{1} << (V % 32)) - 1));  // the last word's bits >= V
        const at::Tensor bad = bits.reshape({-1, W}).select(1, W - 1).bitwise_and(past).ne(0);
        if (!bad.any().item<bool>()) return;
        const int64_t row = bad.nonzero()[0][0].item<int64_t>();
        const at::Tensor positions = bits.dim() == 2 ? rows : at::arange(shape.batch_size * shape.seq_len);
        throw PluginError(where + ": wrote token_bits past the vocabulary (V = " + std::to_string(V) + ") in " +
                          row_text(row, positions) + ", word " + std::to_string(W - 1) + when);
    }

    // The step's inputs as this controller reads them: checked, contiguous, on the plugin's device.
    StepTensors step_tensors(const StepInputs& in, const forms::InputForms& wanted) const {
        const int64_t B = shape.batch_size, L = shape.seq_len, V = shape.vocab_size, D = shape.embed_dim;
        const c10::Device& device = plugin_device;
        StepTensors t;
        row_inputs(in, wanted, device, t);
        if (wanted.proposed) {  // COMMIT: the state and the proposals only
            if (in.tokens.defined()) t.tokens = plugin_input(in.tokens, "tokens", at::kLong, {B, L}, device, where);
            if (in.masked.defined()) t.masked = plugin_input(in.masked, "masked", at::kByte, {B, L}, device, where);
            return t;
        }
        if (in.latent.defined()) t.latent = plugin_input(in.latent, "latent", at::kFloat, {B, L, D}, device, where);
        if (wanted.x0 && !wanted.x0_rows && in.x0_logits.defined())
            t.x0_logits = plugin_input(in.x0_logits, "x0_logits", at::kFloat, {B, L, V}, device, where);
        if (in.tokens.defined()) t.tokens = plugin_input(in.tokens, "tokens", at::kLong, {B, L}, device, where);
        if (in.masked.defined()) t.masked = plugin_input(in.masked, "masked", at::kByte, {B, L}, device, where);
        return t;
    }
};

bool dense_control_forms() {
    const char* value = std::getenv("RUDDER_CONTROL_FORMS");
    if (value == nullptr || *value == '\0') return false;
    if (std::string(value) == "dense") return true;
    throw PluginError(std::string("RUDDER_CONTROL_FORMS=") + value +
                      " is not a form to give controllers: expected \"dense\" (or unset for the forms each declares)");
}

const char* isolation_name(Isolation isolation) { return isolation == Isolation::process ? "process" : "in_process"; }

ControllerInstance::ControllerInstance(ControllerType type, const std::string& params_json, std::string label,
                                       Isolation isolation)
    : type_(std::move(type)), label_(std::move(label)), isolation_(isolation), impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    if (type_.library == nullptr || type_.desc == nullptr)
        throw PluginError("controller '" + label_ + "': its controller type is empty (no library loaded)");
    s.where = "controller '" + label_ + "' (" + type_.id() + ", " + type_.path.filename().string() + ")";
    const bool dense = dense_control_forms();
    s.negotiated = forms::negotiate(type_.abi_minor(), type_.capabilities(), dense);
    if (dense && type_.abi_minor() >= 3 && (type_.capabilities() & RUDDER_CAP_COMMIT) != 0)
        throw PluginError(s.where +
                          ": takes part in the COMMIT phase (RUDDER_CAP_COMMIT, plugin ABI 1.3), which "
                          "RUDDER_CONTROL_FORMS=dense does not offer (it speaks ABI 1.1): unset RUDDER_CONTROL_FORMS "
                          "to run this controller");
    capabilities_ = s.negotiated.capabilities;
    s.params = params_json;
    RunServiceBridge& services = s.services;
    s.transport = isolation_ == Isolation::process
                      ? make_process_transport(
                            type_, s.where,
                            [&services](uint32_t request, isolation::Reader& r) { return services.serve(request, r); })
                      : make_in_process_transport(type_, s.where, has(RUDDER_CAP_THREAD_SAFE));
    s.any_device = has(RUDDER_CAP_ANY_DEVICE) && s.transport->reaches_device_memory();
    s.create();
}

ControllerInstance::~ControllerInstance() = default;  // the transport destroys the instance

void ControllerInstance::share_step_inputs(std::shared_ptr<StepInputShare> share) {
    if (share == nullptr) return;
    StepInputFile* file = &share->impl_->file;
    impl_->transport->share_step_inputs(std::shared_ptr<StepInputFile>(share, file));
}

bool ControllerInstance::usable() const { return impl_->transport->usable(); }

void ControllerInstance::begin(const RunShape& shape, RunServices* services) {
    Impl& s = *impl_;
    const bool continuous = shape.family == RUDDER_FAMILY_CONTINUOUS;
    if (!continuous && shape.family != RUDDER_FAMILY_DISCRETE)
        throw std::invalid_argument(s.where + ": unknown diffusion family " + std::to_string(shape.family));
    if (shape.batch_size <= 0 || shape.seq_len <= 0 || shape.vocab_size <= 0 || shape.embed_dim < 0 ||
        (continuous && shape.embed_dim == 0) || shape.candidates < 0 || shape.candidates > shape.vocab_size)
        throw std::invalid_argument(s.where + ": invalid run shape B=" + std::to_string(shape.batch_size) +
                                    " L=" + std::to_string(shape.seq_len) + " V=" + std::to_string(shape.vocab_size) +
                                    " D=" + std::to_string(shape.embed_dim) + " k=" + std::to_string(shape.candidates));
    s.begun = false;
    s.shape = shape;
    s.plugin_device = s.any_device ? shape.device : c10::Device(c10::kCPU);

    rudder_run_info& run = s.run_info;
    run = rudder_run_info{};
    run.struct_size = s.negotiated.run_info_size();
    run.family = shape.family;
    run.batch_size = shape.batch_size;
    run.seq_len = shape.seq_len;
    run.vocab_size = shape.vocab_size;
    run.embed_dim = shape.embed_dim;
    run.pad_id = shape.pad_id;
    run.mask_id = shape.mask_id;
    run.unk_id = shape.unk_id;
    run.total_steps = shape.total_steps;
    run.device = to_dl_device(s.plugin_device);
    s.services.begin_run(services, shape, s.plugin_device, run);  // run_ctx, the services, model_dir, embedding
    run.candidates = static_cast<int32_t>(s.step_shape(RUDDER_PHASE_PREDICT).candidates);
    run.forms = forms::run_forms(s.negotiated);

    const RunServiceBridge::Call call(s.services, nullptr);
    // A run after the controller's process died (a crash or a hang in an earlier run) starts a new one.
    if (!s.transport->usable()) s.create();
    RunStart start;
    start.run = &run;
    start.shape = s.step_shape(RUDDER_PHASE_PREDICT);
    start.run_candidates = shape.candidates;
    start.embedding = s.services.embedding();
    start.plugin_device = s.plugin_device;
    s.check(s.transport->begin(start), "begin", "");
    s.begun = true;
}

void ControllerInstance::set_time_limit(double seconds) {
    if (!(seconds >= 0)) throw std::invalid_argument(impl_->where + ": time limit must be >= 0 seconds");
    impl_->transport->set_time_limit(seconds);
}

StepOutputs ControllerInstance::step(const StepInputs& in) {
    Impl& s = *impl_;
    if (!s.begun) throw std::logic_error(s.where + ": step() called before a successful begin()");
    const bool predict = in.phase == RUDDER_PHASE_PREDICT, guide = in.phase == RUDDER_PHASE_GUIDE;
    if (!predict && !guide && in.phase != RUDDER_PHASE_COMMIT)
        throw std::invalid_argument(s.where + ": unknown phase " + std::to_string(in.phase));
    const bool continuous = s.shape.family == RUDDER_FAMILY_CONTINUOUS;
    if (guide && !continuous)
        throw std::logic_error(s.where + ": the GUIDE phase exists only for the continuous family");
    // The ABI never calls GUIDE on a controller without gradients, nor COMMIT on one without RUDDER_CAP_COMMIT.
    if (guide && !has(RUDDER_CAP_GRADIENT)) return {};
    if (!predict && !guide && !has(RUDDER_CAP_COMMIT)) return {};

    const std::string when =
        " at step " + std::to_string(in.step) +
        (predict ? std::string()
                 : std::string(guide ? " (guide iteration " : " (commit round ") + std::to_string(in.guide_iter) + ")");
    forms::StepShape st = s.step_shape(in.phase);
    const forms::InputForms wanted = forms::input_forms(st);
    const StepTensors inputs = s.step_tensors(in, wanted);
    st.rows = inputs.rows.defined() ? inputs.rows.size(0) : 0;

    // Inputs, on the device the plugin reads.
    TensorView latent, x0_logits, tokens, masked, rows, candidate_ids, candidate_logp, proposed;
    const auto bind = [](TensorView& view, const at::Tensor& tensor) -> DLTensor* {
        return tensor.defined() ? view.bind(tensor) : nullptr;
    };
    rudder_step step{};
    step.struct_size = s.negotiated.step_size();
    step.phase = in.phase;
    step.step = in.step;
    step.total_steps = in.total_steps;
    step.guide_iter = in.guide_iter;
    step.t = in.t;
    step.t_next = in.t_next;
    step.latent = bind(latent, inputs.latent);
    step.x0_logits = bind(x0_logits, inputs.x0_rows.defined() ? inputs.x0_rows : inputs.x0_logits);
    step.tokens = bind(tokens, inputs.tokens);
    step.masked = bind(masked, inputs.masked);
    step.rows = bind(rows, inputs.rows);
    step.candidate_ids = bind(candidate_ids, inputs.candidate_ids);
    step.candidate_logp = bind(candidate_logp, inputs.candidate_logp);
    step.proposed = bind(proposed, inputs.proposed);

    // Outputs: only those the controller declared and this phase uses, in its forms, initialised as the ABI promises.
    const auto dims = forms::output_dims(st);
    std::array<TensorView, forms::kOutputs> views;
    std::array<at::Tensor, forms::kOutputs> values;
    std::array<DLTensor*, forms::kOutputs> handed_out{};
    rudder_contribution out{};
    out.struct_size = s.negotiated.contribution_size();
    out.written = 0;
    for (size_t k = 0; k < forms::kOutputs; ++k) {
        if (!dims[k].present()) continue;
        const forms::OutputInfo& info = forms::kOutputInfo[k];
        values[k] = s.transport->output(k, sizes_of(dims[k]));
        handed_out[k] = out.*info.member = views[k].bind(values[k], info.dtype);
    }

    // The call. Denoiser results the plugin asked for stay alive until this function returns.
    const RunServiceBridge::Call call(s.services, predict ? &in : nullptr);
    StepCall step_call;
    step_call.step = &step;
    step_call.out = &out;
    step_call.tensors = &inputs;
    step_call.rows = st.rows;
    step_call.when = when;
    const CallOutcome outcome = s.transport->step(step_call);
    s.check(outcome, "step", when);

    // Validation: the plugin writes data in place and reports honestly what it wrote.
    const std::string changed = changed_output_header(out, views, handed_out);
    if (!changed.empty()) s.check(CallOutcome{CallEnd::rewrote_header, RUDDER_OK, changed, 0}, "step", when);
    return s.finish_step(outcome.written, values, inputs.rows, when);
}

Verdict ControllerInstance::evaluate(int64_t index, const std::vector<int64_t>& tokens, int64_t n_tokens,
                                     const std::string& text) {
    Impl& s = *impl_;
    if (!has(RUDDER_CAP_EVALUATE) || type_.desc->evaluate == nullptr) return Verdict{};
    const auto seq_len = static_cast<int64_t>(tokens.size());
    if (n_tokens < 0 || n_tokens > seq_len)
        throw std::invalid_argument(s.where + ": evaluate() with n_tokens " + std::to_string(n_tokens) +
                                    " outside [0, " + std::to_string(seq_len) + "]");
    rudder_sample sample{};
    sample.struct_size = sizeof(rudder_sample);
    sample.index = index;
    sample.tokens = tokens.data();
    sample.seq_len = seq_len;
    sample.n_tokens = n_tokens;
    sample.text = text.c_str();
    rudder_verdict verdict{};
    verdict.struct_size = sizeof(rudder_verdict);
    verdict.satisfied = -1;
    verdict.score = std::numeric_limits<double>::quiet_NaN();
    verdict.detail = nullptr;

    const std::string when = " on sample " + std::to_string(index);
    Verdict result;
    {
        const RunServiceBridge::Call call(s.services, nullptr);
        s.check(s.transport->evaluate(sample, verdict, result.detail, when), "evaluate", when);
    }
    if (verdict.satisfied < -1 || verdict.satisfied > 1)
        throw PluginError(s.where + ": evaluate returned satisfied=" + std::to_string(verdict.satisfied) + when +
                          " (must be 1, 0 or -1)");
    if (std::isinf(verdict.score)) throw PluginError(s.where + ": evaluate returned an infinite score" + when);
    result.satisfied = verdict.satisfied;
    result.has_score = !std::isnan(verdict.score);
    if (result.has_score) result.score = verdict.score;
    return result;
}

}  // namespace rudder::plugins
