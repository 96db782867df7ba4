// The guarded bridge between the host's torch tensors and a plugin's C callbacks. Tensors cross as DLPack views
// built here (not with ATen's DLConvertor, whose bundled dlpack.h clashes with the system one); every output is
// checked after the call, and no exception ever crosses into plugin code.
#include "library.hpp"
#include "remote_controller.hpp"
#include "step_forms.hpp"

#include <rudder/plugins/plugins.hpp>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rudder::plugins {
namespace {

constexpr size_t kMaxDims = 4;                   // the ABI's tensors have at most 4 dimensions ([n, B, L, V])

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

DLDevice to_dl_device(const c10::Device& device) {
    switch (device.type()) {
        case c10::DeviceType::CPU: return DLDevice{kDLCPU, 0};
        case c10::DeviceType::CUDA: return DLDevice{kDLCUDA, device.has_index() ? device.index() : 0};
        default: throw std::invalid_argument("device " + device.str() + " cannot be handed to plugins");
    }
}

DLDataType to_dl_dtype(at::ScalarType type) {
    switch (type) {
        case at::kFloat: return DLDataType{kDLFloat, 32, 1};
        case at::kLong: return DLDataType{kDLInt, 64, 1};
        case at::kByte: return DLDataType{kDLUInt, 8, 1};
        default: throw std::invalid_argument(std::string("dtype ") + c10::toString(type) + " has no place in the plugin ABI");
    }
}

// The ATen dtype that holds a DLPack dtype of the ABI. ATen 1.13 has no uint32: token bits live in int32 tensors
// and the plugin is told uint32.
at::ScalarType aten_dtype(DLDataType dtype) {
    if (dtype.code == kDLFloat && dtype.bits == 32) return at::kFloat;
    if (dtype.code == kDLInt && dtype.bits == 64) return at::kLong;
    if (dtype.code == kDLUInt && dtype.bits == 8) return at::kByte;
    if (dtype.code == kDLUInt && dtype.bits == 32) return at::kInt;
    throw std::invalid_argument("DLPack dtype code " + std::to_string(dtype.code) + " bits " +
                                std::to_string(dtype.bits) + " has no place in the plugin ABI");
}

std::vector<int64_t> sizes_of(const forms::Dims& dims) { return std::vector<int64_t>(dims.size, dims.size + dims.ndim); }

// StepOutputs' member for each output, in forms::Output order.
at::Tensor StepOutputs::* const kResultMember[forms::kOutputs] = {
    &StepOutputs::logit_delta, &StepOutputs::grad,       &StepOutputs::log_prob,       &StepOutputs::fixed_tokens,
    &StepOutputs::forbidden,   &StepOutputs::token_bits, &StepOutputs::candidate_delta};

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

std::string shape_text(at::IntArrayRef sizes) {
    std::string text = "[";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(sizes[i]);
    return text + "]";
}

// A compact DLTensor over a contiguous tensor, plus a copy of the header as handed out so that a plugin that
// rewrote it (instead of writing the data in place) is caught. Not movable: dl.shape points into this object.
struct TensorView {
    at::Tensor tensor;  // keeps the storage alive while the plugin holds the view
    std::array<int64_t, kMaxDims> shape{};
    DLTensor dl{};
    DLTensor original{};
    std::array<int64_t, kMaxDims> original_shape{};

    TensorView() = default;
    TensorView(const TensorView&) = delete;
    TensorView& operator=(const TensorView&) = delete;

    DLTensor* bind(const at::Tensor& contiguous) { return bind(contiguous, to_dl_dtype(contiguous.scalar_type())); }
    // With the dtype the plugin is told, where ATen holds it in another of the same width (uint32 in int32).
    DLTensor* bind(const at::Tensor& contiguous, DLDataType dtype) {
        tensor = contiguous;
        const auto sizes = contiguous.sizes();
        std::copy(sizes.begin(), sizes.end(), shape.begin());
        dl.data = contiguous.data_ptr();
        dl.device = to_dl_device(contiguous.device());
        dl.ndim = static_cast<int32_t>(sizes.size());
        dl.dtype = dtype;
        dl.shape = shape.data();
        dl.strides = nullptr;
        dl.byte_offset = 0;
        original = dl;
        original_shape = shape;
        return &dl;
    }

    // What the plugin changed in the header, or nullptr if nothing.
    const char* changed_field() const {
        return forms::changed_header_field(dl, original, shape.data(), original_shape.data());
    }
};

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

}  // namespace

// The inputs' shared memory file (see StepInputShare): sized at begin by the largest run seen, refilled once per
// step by the first isolated instance that steps.
struct StepInputShare::Impl {
    SharedMemory memory;
    uint64_t generation = 0;  // bumped each time a new file replaces the old (children must map the new one)
    isolation::InputLayout layout;
    uint32_t filled = 0;      // which of this step's inputs are in (isolation::kHas*): each is copied in by the first
                              // isolated controller of the step that reads it
};

StepInputShare::StepInputShare() : impl_(std::make_unique<Impl>()) {}
StepInputShare::~StepInputShare() = default;
void StepInputShare::next_step() { impl_->filled = 0; }

struct ControllerInstance::Impl {
    std::string where;  // "controller '<label>' (<id>, <file>)", the prefix of every message
    const rudder_controller_desc* desc = nullptr;
    forms::Negotiated negotiated;  // the ABI forms the controller is spoken to in
    bool thread_safe = false;
    bool any_device = false;
    bool created = false;
    std::mutex* call_mutex = nullptr;

    RunShape shape;
    bool begun = false;
    RunServices* services = nullptr;
    c10::Device plugin_device{c10::kCPU};  // where every tensor the plugin sees lives
    rudder_run_info run_info{};            // handed to begin(); its address must stay stable for the run

    double time_limit = 0;         // seconds one step() or evaluate() may take; 0 = no limit
    const StepInputs* predict_step = nullptr;  // the PREDICT step in progress: denoise() runs on its input
    std::string service_error;     // what a host service threw during the current call, for the report
    std::vector<std::unique_ptr<TensorView>> denoise_results;  // alive until step() returns
    std::string model_dir;         // run_info.model_dir points here
    at::Tensor embedding;          // run_info.embedding views this (on plugin_device, contiguous)
    std::unique_ptr<TensorView> embedding_view;

    // Process isolation: the child that runs the instance, the shared memory its outputs live in, and the inputs'
    // shared memory (the run's, or, given none, its own: then refilled at every step).
    std::unique_ptr<RemoteController> remote;
    std::string params;  // to create the instance again in a new process once the old one died
    bool send_outputs_fd = false;  // the child has not mapped `shared` yet
    SharedMemory shared;
    isolation::OutputLayout layout;
    std::shared_ptr<StepInputShare> inputs;
    bool own_inputs = false;
    uint64_t inputs_generation_sent = 0;  // the input file the child has mapped (0: none yet)

    at::Tensor shared_tensor(const isolation::Region& region, at::IntArrayRef sizes, at::ScalarType dtype) const {
        return at::from_blob(shared.data() + region.offset, sizes, at::TensorOptions().dtype(dtype));
    }
    at::Tensor input_tensor(const isolation::Region& region, at::IntArrayRef sizes, at::ScalarType dtype) const {
        return at::from_blob(inputs->impl_->memory.data() + region.offset, sizes, at::TensorOptions().dtype(dtype));
    }

    // A reply from the child: how the call ended; throws the PluginError the in-process path would.
    uint32_t check_reply(isolation::Reader& r, const char* call, const std::string& when,
                         const std::string& failed_prefix = std::string()) const {
        const auto outcome = r.get<uint32_t>();
        const auto status = r.get<int32_t>();
        const auto written = r.get<uint32_t>();
        const std::string message = r.text();
        switch (outcome) {
            case isolation::kOk: return written;
            case isolation::kFailed:
                if (!failed_prefix.empty()) throw PluginError(where + failed_prefix + message);
                throw PluginError(failure(call, status, message, when));
            case isolation::kEscaped:
                throw PluginError(where + ": " + call + " let a C++ exception escape across the C ABI" + when);
            case isolation::kRewroteHeader:
                throw PluginError(where + ": " + message + when + "; outputs must be written in place");
            default: throw PluginError(where + ": " + call + when + ": an unknown reply from its process");
        }
    }

    // Answers a run service request from the plugin in its process, through the same services as in-process.
    std::vector<char> serve(uint32_t type, isolation::Reader& r) {
        using namespace isolation;
        Writer w;
        switch (type) {
            case kTokenize: {
                const std::string text = r.text();
                const auto capacity = std::max<int64_t>(0, r.get<int64_t>());
                std::vector<int64_t> ids(static_cast<size_t>(std::min<int64_t>(capacity, 1 << 16)));
                int64_t n = 0;
                rudder_status status = tokenize(this, text.c_str(), ids.data(), static_cast<int64_t>(ids.size()), &n);
                if (status == RUDDER_ERR_BUFFER_TOO_SMALL && n <= capacity) {
                    ids.resize(static_cast<size_t>(n));
                    status = tokenize(this, text.c_str(), ids.data(), n, &n);
                }
                const int64_t sent = std::min(n, capacity);
                ids.resize(static_cast<size_t>(std::max<int64_t>(sent, 0)), 0);
                w.put<int32_t>(status).put<int64_t>(n);
                for (int64_t i = 0; i < sent; ++i) w.put<int64_t>(ids[static_cast<size_t>(i)]);
                break;
            }
            case kDetokenize: {
                uint64_t size = 0;
                const char* data = r.bytes(size);
                std::vector<int64_t> ids(size / sizeof(int64_t));
                if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int64_t));
                std::string text;
                const rudder_status status =
                    services == nullptr ? RUDDER_ERR_UNSUPPORTED : guard_service("detokenize", [&]() -> rudder_status {
                        text = services->detokenize(ids.data(), static_cast<int64_t>(ids.size()));
                        return RUDDER_OK;
                    });
                w.put<int32_t>(status);
                if (status == RUDDER_OK) w.text(text);
                break;
            }
            case kTokenText: {
                const char* text = token_text(this, r.get<int64_t>());
                w.put<uint8_t>(text != nullptr ? 1 : 0);
                if (text != nullptr) w.text(text);
                break;
            }
            case kFindModel: {
                const std::string name = r.text();
                std::string dir(4096, '\0');
                size_t n = 0;
                rudder_status status = find_model(this, name.c_str(), dir.data(), dir.size(), &n);
                if (status == RUDDER_ERR_BUFFER_TOO_SMALL) {
                    dir.assign(n + 1, '\0');
                    status = find_model(this, name.c_str(), dir.data(), dir.size(), &n);
                }
                w.put<int32_t>(status);
                if (status == RUDDER_OK) w.text(dir.substr(0, n));
                break;
            }
            case kDenoise: {
                const auto n = r.get<int32_t>();
                if (n <= 0 || n > 4096) throw std::runtime_error("a denoise request for " + std::to_string(n) + " conditions");
                std::vector<std::string> texts;
                for (int32_t i = 0; i < n; ++i) texts.push_back(r.text());
                std::vector<const char*> pointers;
                for (const auto& text : texts) pointers.push_back(text.c_str());
                const DLTensor* logits = nullptr;
                const rudder_status status = denoise(this, pointers.data(), n, &logits);
                w.put<int32_t>(status);
                if (status == RUDDER_OK) {
                    const auto& view = denoise_results.back()->tensor;
                    w.bytes(view.data_ptr(), static_cast<size_t>(view.numel()) * sizeof(float));
                    denoise_results.pop_back();
                }
                break;
            }
            default: throw std::runtime_error("an unknown service " + std::to_string(type));
        }
        return std::move(w.data());
    }

    // The run and this step as they decide what the controller gets (forms::input_forms, forms::output_dims); the
    // step's rows are set once known.
    forms::StepShape step_shape(bool predict) const {
        forms::StepShape st = forms::run_shape(shape.family, shape.batch_size, shape.seq_len, shape.vocab_size,
                                               shape.embed_dim, shape.candidates, negotiated);
        st.predict = predict;
        return st;
    }

    // The step's ABI 1.2 inputs in the forms this controller reads, on `device`. A step without rows (a test that
    // calls step() directly) has all B * L; x0 at the rows and the candidates are taken from x0_logits when the
    // reverse loop did not give them.
    struct RowInputs {
        at::Tensor rows, x0_rows, candidate_ids, candidate_logp;
        int64_t count() const { return rows.defined() ? rows.size(0) : 0; }
    };
    RowInputs row_inputs(const StepInputs& in, const forms::InputForms& wanted, const c10::Device& device) const {
        RowInputs r;
        if (!wanted.rows) return r;
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
        const int64_t N = r.count();
        const bool need_x0 = wanted.x0_rows || (wanted.candidates && !in.candidate_ids.defined());
        at::Tensor x0;
        if (need_x0 && in.x0_rows.defined()) {
            x0 = plugin_input(in.x0_rows, "x0_rows", at::kFloat, {N, V}, device, where);
        } else if (need_x0) {
            if (!in.x0_logits.defined()) throw std::invalid_argument(where + ": host passed no x0_logits in a PREDICT step");
            const at::Tensor all =
                plugin_input(in.x0_logits, "x0_logits", at::kFloat, {shape.batch_size, shape.seq_len, V}, device, where)
                    .reshape({positions, V});
            x0 = in.rows.defined() ? all.index_select(0, r.rows) : all;
        }
        if (wanted.x0_rows) r.x0_rows = x0;
        if (wanted.candidates) {
            const int64_t k = run_info.candidates;
            if (in.candidate_ids.defined() != in.candidate_logp.defined())
                throw std::invalid_argument(where + ": host passed candidate_ids without candidate_logp, or the other "
                                                    "way round");
            if (in.candidate_ids.defined()) {
                r.candidate_ids = plugin_input(in.candidate_ids, "candidate_ids", at::kLong, {N, k}, device, where);
                r.candidate_logp = plugin_input(in.candidate_logp, "candidate_logp", at::kFloat, {N, k}, device, where);
            } else {
                std::tie(r.candidate_logp, r.candidate_ids) = top_candidates(x0, k);
            }
        }
        return r;
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
                if ((written & ~provided & output.written) != 0) text += (text.empty() ? "" : ", ") + std::string(output.name);
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
            result.*kResultMember[k] = value.to(shape.device);  // back to the run's device if the plugin worked on the CPU
        }
        result.bits_allowed = (written & RUDDER_WROTE_ALLOWED_BITS) != 0;
        return result;
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
        const int64_t position = bits.dim() == 2 ? rows[row].item<int64_t>() : row;
        throw PluginError(where + ": wrote token_bits past the vocabulary (V = " + std::to_string(V) + ") in row " +
                          std::to_string(row) + " (sequence " + std::to_string(position / shape.seq_len) +
                          ", position " + std::to_string(position % shape.seq_len) + "), word " +
                          std::to_string(W - 1) + when);
    }

    // step() with the controller in a child process: inputs into the shared memory, the call, outputs out of it.
    StepOutputs remote_step(const StepInputs& in, forms::StepShape st, const forms::InputForms& wanted,
                            const RowInputs& r, const std::string& when) {
        const int64_t B = shape.batch_size, L = shape.seq_len, V = shape.vocab_size, D = shape.embed_dim;
        const bool predict = in.phase == RUDDER_PHASE_PREDICT;
        const bool continuous = shape.family == RUDDER_FAMILY_CONTINUOUS;
        const c10::Device cpu(c10::kCPU);
        // The inputs go into the run's shared input file once per step: the first isolated controller that reads one
        // copies it in (and checks it, as in-process), the others find it there.
        StepInputShare::Impl& share = *inputs->impl_;
        if (own_inputs) share.filled = 0;
        const isolation::InputLayout& at_ = share.layout;
        uint32_t present = 0;
        const auto put = [&](uint32_t bit, const at::Tensor& input, const isolation::Region& region) {
            if ((share.filled & bit) == 0) input_tensor(region, input.sizes(), input.scalar_type()).copy_(input);
            present |= bit;
        };
        const auto put_checked = [&](uint32_t bit, const at::Tensor& tensor, const char* name, at::ScalarType dtype,
                                     std::vector<int64_t> sizes, const isolation::Region& region) {
            if (!tensor.defined()) return;
            put(bit, (share.filled & bit) != 0 ? tensor : plugin_input(tensor, name, dtype, sizes, cpu, where), region);
        };
        if (continuous) put_checked(isolation::kHasLatent, in.latent, "latent", at::kFloat, {B, L, D}, at_.latent);
        if (wanted.x0 && !wanted.x0_rows)
            put_checked(isolation::kHasLogits, in.x0_logits, "x0_logits", at::kFloat, {B, L, V}, at_.x0_logits);
        put_checked(isolation::kHasTokens, in.tokens, "tokens", at::kLong, {B, L}, at_.tokens);
        if (!continuous) put_checked(isolation::kHasMasked, in.masked, "masked", at::kByte, {B, L}, at_.masked);
        if (wanted.rows) put(isolation::kHasRows, r.rows, at_.rows);
        if (wanted.x0_rows) put(isolation::kHasX0Rows, r.x0_rows, at_.x0_rows);
        if (wanted.candidates) {
            put(isolation::kHasCandidates, r.candidate_ids, at_.candidate_ids);
            put(isolation::kHasCandidates, r.candidate_logp, at_.candidate_logp);
        }
        share.filled |= present;  // after all are in: one bit covers both candidate tensors

        isolation::Writer request;
        request.put<int32_t>(in.phase).put<int32_t>(in.step).put<int32_t>(in.total_steps).put<int32_t>(in.guide_iter)
            .put<double>(in.t).put<double>(in.t_next).put<uint32_t>(present).put<int64_t>(r.count());
        struct EndOfStep {
            Impl& s;
            ~EndOfStep() {
                s.predict_step = nullptr;
                s.denoise_results.clear();
            }
        } end_of_step{*this};
        service_error.clear();
        predict_step = predict ? &in : nullptr;
        const std::vector<char> reply = remote->call(isolation::kStep, request, "step", when, time_limit, server());
        isolation::Reader reader(reply);
        const uint32_t written = check_reply(reader, "step", when);

        // What the child was given, as in-process, viewed where it wrote. Not copied: the composer reads the outputs
        // before this controller's next step overwrites them.
        st.rows = r.count();
        const auto dims = forms::output_dims(st);
        std::array<at::Tensor, forms::kOutputs> values;
        for (size_t k = 0; k < forms::kOutputs; ++k)
            if (dims[k].present())
                values[k] = shared_tensor(layout.outputs[k], sizes_of(dims[k]), aten_dtype(forms::kOutputInfo[k].dtype));
        return finish_step(written, values, r.rows, when);
    }

    // Starts the child and creates the instance there (PluginError if either fails).
    // A failure leaves `remote` as it was.
    void start_process(const ControllerType& type) {
        auto fresh = std::make_unique<RemoteController>(type, where);
        isolation::Writer request;
        request.text(params);
        const std::vector<char> reply = fresh->call(isolation::kCreate, request, "create", "", 0, nullptr);
        isolation::Reader r(reply);
        check_reply(r, "create", "", ": invalid params: ");
        remote = std::move(fresh);
        send_outputs_fd = true;
        inputs_generation_sent = 0;
    }

    RemoteController::Serve server() {
        return [this](uint32_t type, isolation::Reader& r) { return serve(type, r); };
    }

    // Holds the library's call mutex unless the controller is thread-safe.
    std::unique_lock<std::mutex> lock_for_call() const {
        std::unique_lock<std::mutex> lock(*call_mutex, std::defer_lock);
        if (!thread_safe) lock.lock();
        return lock;
    }

    // A call that returned after its time limit fails the run: the host cannot stop a call in progress (that
    // would need the plugin in another process), but it can refuse to go on with a controller this slow.
    void check_duration(const char* call, std::chrono::steady_clock::time_point start, const std::string& when) const {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (time_limit > 0 && seconds > time_limit) {
            char text[160];
            std::snprintf(text, sizeof text, ": %s took %.3f s%s, over its time limit of %g s", call, seconds,
                          when.c_str(), time_limit);
            throw PluginError(where + text + " (the recipe's time_limit for this controller)");
        }
    }

    std::string failure(const char* call, rudder_status status, const std::string& message,
                        const std::string& when = std::string()) const {
        std::string text = where + ": " + call + " failed" + when + " (" + status_name(status) + "): " + message;
        if (!service_error.empty()) text += " (a host service failed: " + service_error + ")";
        return text;
    }

    // Runs a host service for the plugin: any exception becomes a status, never an unwinding through C frames.
    template <class Body> rudder_status guard_service(const char* service, Body&& body) noexcept {
        try {
            return body();
        } catch (const std::bad_alloc&) {
            note_service_error(service, "out of memory");
            return RUDDER_ERR_OUT_OF_MEMORY;
        } catch (const std::exception& e) {
            note_service_error(service, e.what());
            return RUDDER_ERR_INTERNAL;
        } catch (...) {
            note_service_error(service, "unknown exception");
            return RUDDER_ERR_INTERNAL;
        }
    }

    void note_service_error(const char* service, const char* what) noexcept {
        try {
            service_error = std::string(service) + ": " + what;
        } catch (...) {
            // Could not even keep the message: the status code alone still reaches the plugin.
        }
    }

    static rudder_status tokenize(void* run_ctx, const char* text, int64_t* out_ids, int64_t capacity,
                                  int64_t* n_ids) noexcept {
        auto* self = static_cast<Impl*>(run_ctx);
        if (n_ids != nullptr) *n_ids = 0;
        if (self == nullptr || text == nullptr || n_ids == nullptr || capacity < 0 ||
            (capacity > 0 && out_ids == nullptr))
            return RUDDER_ERR_INVALID_ARGUMENT;
        if (self->services == nullptr) return RUDDER_ERR_UNSUPPORTED;
        return self->guard_service("tokenize", [&]() -> rudder_status {
            const std::vector<int64_t> ids = self->services->tokenize(text);
            const auto count = static_cast<int64_t>(ids.size());
            *n_ids = count;
            std::copy_n(ids.begin(), std::min(count, capacity), out_ids);
            return count <= capacity ? RUDDER_OK : RUDDER_ERR_BUFFER_TOO_SMALL;
        });
    }

    static rudder_status detokenize(void* run_ctx, const int64_t* ids, int64_t n_ids, char* out, size_t capacity,
                                    size_t* n_bytes) noexcept {
        auto* self = static_cast<Impl*>(run_ctx);
        if (n_bytes != nullptr) *n_bytes = 0;
        if (self == nullptr || n_bytes == nullptr || n_ids < 0 || (n_ids > 0 && ids == nullptr) ||
            (capacity > 0 && out == nullptr))
            return RUDDER_ERR_INVALID_ARGUMENT;
        if (self->services == nullptr) return RUDDER_ERR_UNSUPPORTED;
        return self->guard_service("detokenize", [&]() -> rudder_status {
            const std::string text = self->services->detokenize(ids, n_ids);
            *n_bytes = text.size();
            if (capacity > 0) {  // always leave a NUL-terminated (possibly cut) string
                const size_t kept = std::min(text.size(), capacity - 1);
                std::memcpy(out, text.data(), kept);
                out[kept] = '\0';
            }
            return text.size() < capacity ? RUDDER_OK : RUDDER_ERR_BUFFER_TOO_SMALL;
        });
    }

    static const char* token_text(void* run_ctx, int64_t id) noexcept {
        auto* self = static_cast<Impl*>(run_ctx);
        if (self == nullptr || self->services == nullptr) return nullptr;
        try {
            const std::string* text = self->services->token_text(id);
            return text != nullptr ? text->c_str() : nullptr;
        } catch (const std::exception& e) {
            self->note_service_error("token_text", e.what());
        } catch (...) {
            self->note_service_error("token_text", "unknown exception");
        }
        return nullptr;
    }

    static rudder_status find_model(void* run_ctx, const char* name, char* out, size_t capacity,
                                    size_t* n_bytes) noexcept {
        auto* self = static_cast<Impl*>(run_ctx);
        if (self == nullptr || name == nullptr || n_bytes == nullptr || (out == nullptr && capacity > 0))
            return RUDDER_ERR_INVALID_ARGUMENT;
        if (self->services == nullptr) return RUDDER_ERR_UNSUPPORTED;
        return self->guard_service("find_model", [&]() -> rudder_status {
            std::string dir;
            try {
                dir = self->services->find_model(name);
            } catch (const std::runtime_error& e) {  // no such model: the plugin's mistake, not the host's
                self->note_service_error("find_model", e.what());
                return RUDDER_ERR_INVALID_ARGUMENT;
            }
            *n_bytes = dir.size();
            if (dir.size() + 1 > capacity) return RUDDER_ERR_BUFFER_TOO_SMALL;
            std::memcpy(out, dir.c_str(), dir.size() + 1);
            return RUDDER_OK;
        });
    }

    static rudder_status denoise(void* run_ctx, const char* const* conditions, int32_t n_conditions,
                                 const DLTensor** out_logits) noexcept {
        auto* self = static_cast<Impl*>(run_ctx);
        if (out_logits != nullptr) *out_logits = nullptr;
        if (self == nullptr || out_logits == nullptr || conditions == nullptr || n_conditions <= 0)
            return RUDDER_ERR_INVALID_ARGUMENT;
        for (int32_t i = 0; i < n_conditions; ++i)
            if (conditions[i] == nullptr) return RUDDER_ERR_INVALID_ARGUMENT;
        if (self->predict_step == nullptr) {
            self->note_service_error("denoise", "called outside step() in the PREDICT phase");
            return RUDDER_ERR_UNSUPPORTED;
        }
        if (self->services == nullptr) return RUDDER_ERR_UNSUPPORTED;
        return self->guard_service("denoise", [&]() -> rudder_status {
            const std::vector<std::string> texts(conditions, conditions + n_conditions);
            at::Tensor logits;
            try {
                logits = self->services->denoise(*self->predict_step, texts);
            } catch (const std::logic_error& e) {  // RunServices' way to say "not now" or "no conditioning"
                self->note_service_error("denoise", e.what());
                return RUDDER_ERR_UNSUPPORTED;
            }
            const std::vector<int64_t> expected = {n_conditions, self->shape.batch_size, self->shape.seq_len,
                                                   self->shape.vocab_size};
            if (!logits.defined() || logits.scalar_type() != at::kFloat || logits.sizes() != at::IntArrayRef(expected))
                throw std::runtime_error("the host denoiser returned " +
                                         (logits.defined() ? std::string(c10::toString(logits.scalar_type())) + " " +
                                                                 shape_text(logits.sizes())
                                                           : std::string("nothing")) +
                                         ", expected float32 " + shape_text(expected));
            auto view = std::make_unique<TensorView>();
            *out_logits = view->bind(logits.to(self->plugin_device).contiguous());
            self->denoise_results.push_back(std::move(view));
            return RUDDER_OK;
        });
    }
};

bool dense_control_forms() {
    const char* value = std::getenv("RUDDER_CONTROL_FORMS");
    if (value == nullptr || *value == '\0') return false;
    if (std::string(value) == "dense") return true;
    throw PluginError(std::string("RUDDER_CONTROL_FORMS=") + value +
                      " is not a form to give controllers: expected \"dense\" (or unset for the forms each declares)");
}

const char* isolation_name(Isolation isolation) {
    return isolation == Isolation::process ? "process" : "in_process";
}

ControllerInstance::ControllerInstance(ControllerType type, const std::string& params_json, std::string label,
                                       Isolation isolation)
    : type_(std::move(type)), label_(std::move(label)), isolation_(isolation), impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    if (type_.library == nullptr || type_.desc == nullptr)
        throw PluginError("controller '" + label_ + "': its controller type is empty (no library loaded)");
    s.where = "controller '" + label_ + "' (" + type_.id() + ", " + type_.path.filename().string() + ")";
    s.desc = type_.desc;
    s.negotiated = forms::negotiate(type_.abi_minor(), type_.capabilities(), dense_control_forms());
    capabilities_ = s.negotiated.capabilities;
    s.thread_safe = has(RUDDER_CAP_THREAD_SAFE);
    s.any_device = has(RUDDER_CAP_ANY_DEVICE) && isolation_ == Isolation::in_process;  // a child sees CPU memory
    s.call_mutex = &type_.library->call_mutex();

    if (isolation_ == Isolation::process) {
        s.params = params_json;
        s.start_process(type_);
        s.created = true;
        return;
    }

    rudder_status status = RUDDER_OK;
    std::string message;
    {
        auto lock = s.lock_for_call();  // last_error(NULL) is per thread: read it before anyone else creates
        try {
            status = s.desc->create(host_services(), params_json.c_str(), &self_);
        } catch (...) {
            throw PluginError(s.where + ": create let a C++ exception escape across the C ABI");
        }
        if (status != RUDDER_OK) message = plugin_message(s.desc, nullptr);
    }
    if (status != RUDDER_OK) throw PluginError(s.where + ": invalid params: " + message);
    s.created = true;
}

ControllerInstance::~ControllerInstance() {
    if (impl_ == nullptr || !impl_->created || impl_->remote != nullptr) return;  // a child is ended by its owner
    try {
        auto lock = impl_->lock_for_call();
        impl_->desc->destroy(self_);
    } catch (...) {
        try {
            spdlog::error("{}: destroy failed", impl_->where);
        } catch (...) {
            // Nothing left to report with.
        }
    }
}

void ControllerInstance::share_step_inputs(std::shared_ptr<StepInputShare> share) {
    if (isolation_ != Isolation::process || share == nullptr) return;
    if (impl_->inputs != share) impl_->inputs_generation_sent = 0;
    impl_->inputs = std::move(share);
    impl_->own_inputs = false;
}

bool ControllerInstance::usable() const { return impl_->remote == nullptr || impl_->remote->alive(); }

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
    s.services = services;
    s.plugin_device = s.any_device ? shape.device : c10::Device(c10::kCPU);

    rudder_run_info& run = s.run_info;
    run = rudder_run_info{};
    run.struct_size = s.negotiated.abi12 ? sizeof(rudder_run_info) : forms::kRunInfoSize11;
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
    run.run_ctx = &s;
    run.tokenize = &Impl::tokenize;
    run.detokenize = &Impl::detokenize;
    run.token_text = &Impl::token_text;
    run.denoise = &Impl::denoise;
    s.model_dir = services != nullptr ? services->model_dir() : std::string();
    run.model_dir = s.model_dir.c_str();
    s.embedding = services != nullptr && continuous ? services->embedding() : at::Tensor();
    s.embedding_view.reset();
    if (s.embedding.defined()) {
        s.embedding = s.embedding.detach().to(s.plugin_device, at::kFloat).contiguous();
        s.embedding_view = std::make_unique<TensorView>();
        run.embedding = s.embedding_view->bind(s.embedding);
    }
    run.find_model = &Impl::find_model;
    run.candidates = static_cast<int32_t>(s.step_shape(true).candidates);
    run.forms = s.negotiated.capabilities & forms::kCapabilities12;

    s.service_error.clear();
    if (s.remote != nullptr) {
        // A run after the controller's process died (a crash or a hang in an earlier run) starts a new one.
        if (!s.remote->alive()) {
            s.begun = false;
            s.start_process(type_);
        }
        const int64_t D = continuous ? shape.embed_dim : 0;
        s.layout = isolation::output_layout(s.step_shape(true), s.embedding.defined());
        if (s.inputs == nullptr) {
            s.inputs = std::make_shared<StepInputShare>();
            s.own_inputs = true;
        }
        StepInputShare::Impl& share = *s.inputs->impl_;
        share.layout = isolation::input_layout(shape.batch_size, shape.seq_len, shape.vocab_size, D, shape.candidates);
        std::vector<int> fds;
        uint8_t passed = 0;
        try {
            if (s.shared.reserve(s.layout.total) || s.send_outputs_fd) {
                fds.push_back(s.shared.fd());
                passed |= 1;
            }
            if (share.memory.reserve(share.layout.total)) ++share.generation;
        } catch (const std::exception& e) {
            throw PluginError(s.where + ": cannot share the run's tensors with its process: " + e.what());
        }
        share.filled = 0;
        if (s.inputs_generation_sent != share.generation) {
            fds.push_back(share.memory.fd());
            passed |= 2;
        }
        if (s.embedding.defined())
            s.shared_tensor(s.layout.embedding, {shape.vocab_size, shape.embed_dim}, at::kFloat).copy_(s.embedding);
        isolation::Writer request;
        request.put<int32_t>(run.family).put<int64_t>(run.batch_size).put<int64_t>(run.seq_len)
            .put<int64_t>(run.vocab_size).put<int64_t>(run.embed_dim).put<int64_t>(run.pad_id)
            .put<int64_t>(run.mask_id).put<int64_t>(run.unk_id).put<int32_t>(run.total_steps)
            .put<uint8_t>(s.embedding.defined() ? 1 : 0).put<uint64_t>(s.shared.size())
            .put<uint64_t>(share.memory.size()).put<uint8_t>(passed).text(s.model_dir)
            .put<uint8_t>(s.negotiated.abi12 ? 1 : 0).put<uint64_t>(s.negotiated.capabilities)
            .put<int64_t>(shape.candidates);
        const std::vector<char> reply =
            s.remote->call(isolation::kBegin, request, "begin", "", s.time_limit, s.server(), fds);
        s.inputs_generation_sent = share.generation;
        s.send_outputs_fd = false;
        isolation::Reader r(reply);
        s.check_reply(r, "begin", "");
        s.begun = true;
        return;
    }
    rudder_status status = RUDDER_OK;
    std::string message;
    {
        auto lock = s.lock_for_call();
        try {
            status = s.desc->begin(self_, &run);
        } catch (...) {
            throw PluginError(s.where + ": begin let a C++ exception escape across the C ABI");
        }
        if (status != RUDDER_OK) message = plugin_message(s.desc, self_);
    }
    if (status != RUDDER_OK) throw PluginError(s.failure("begin", status, message));
    s.begun = true;
}

void ControllerInstance::set_time_limit(double seconds) {
    if (!(seconds >= 0)) throw std::invalid_argument(impl_->where + ": time limit must be >= 0 seconds");
    impl_->time_limit = seconds;
}

StepOutputs ControllerInstance::step(const StepInputs& in) {
    Impl& s = *impl_;
    if (!s.begun) throw std::logic_error(s.where + ": step() called before a successful begin()");
    const bool predict = in.phase == RUDDER_PHASE_PREDICT;
    if (!predict && in.phase != RUDDER_PHASE_GUIDE)
        throw std::invalid_argument(s.where + ": unknown phase " + std::to_string(in.phase));
    const bool continuous = s.shape.family == RUDDER_FAMILY_CONTINUOUS;
    if (!predict && !continuous)
        throw std::logic_error(s.where + ": the GUIDE phase exists only for the continuous family");
    const bool gradient = has(RUDDER_CAP_GRADIENT);
    if (!predict && !gradient) return {};  // the ABI never calls GUIDE on a controller without gradients

    const int64_t B = s.shape.batch_size, L = s.shape.seq_len, V = s.shape.vocab_size, D = s.shape.embed_dim;
    const c10::Device& device = s.plugin_device;
    const std::string when = " at step " + std::to_string(in.step) +
                             (predict ? std::string() : " (guide iteration " + std::to_string(in.guide_iter) + ")");

    forms::StepShape st = s.step_shape(predict);
    const forms::InputForms wanted = forms::input_forms(st);
    const Impl::RowInputs r = s.row_inputs(in, wanted, device);
    st.rows = r.count();
    if (s.remote != nullptr) return s.remote_step(in, st, wanted, r, when);

    // Inputs, on the device the plugin reads.
    TensorView latent, x0_logits, tokens, masked, rows, candidate_ids, candidate_logp;
    rudder_step step{};
    step.struct_size = s.negotiated.abi12 ? sizeof(rudder_step) : forms::kStepSize11;
    step.phase = in.phase;
    step.step = in.step;
    step.total_steps = in.total_steps;
    step.guide_iter = in.guide_iter;
    step.t = in.t;
    step.t_next = in.t_next;
    if (in.latent.defined())
        step.latent = latent.bind(plugin_input(in.latent, "latent", at::kFloat, {B, L, D}, device, s.where));
    if (wanted.x0_rows)
        step.x0_logits = x0_logits.bind(r.x0_rows);
    else if (wanted.x0 && in.x0_logits.defined())
        step.x0_logits = x0_logits.bind(plugin_input(in.x0_logits, "x0_logits", at::kFloat, {B, L, V}, device, s.where));
    if (in.tokens.defined())
        step.tokens = tokens.bind(plugin_input(in.tokens, "tokens", at::kLong, {B, L}, device, s.where));
    if (in.masked.defined())
        step.masked = masked.bind(plugin_input(in.masked, "masked", at::kByte, {B, L}, device, s.where));
    if (wanted.rows) step.rows = rows.bind(r.rows);
    if (wanted.candidates) {
        step.candidate_ids = candidate_ids.bind(r.candidate_ids);
        step.candidate_logp = candidate_logp.bind(r.candidate_logp);
    }

    // Outputs: only those the controller declared and this phase uses, in its forms, initialised as the ABI promises.
    const auto dims = forms::output_dims(st);
    std::array<TensorView, forms::kOutputs> views;
    std::array<at::Tensor, forms::kOutputs> values;
    std::array<DLTensor*, forms::kOutputs> handed_out{};
    rudder_contribution out{};
    out.struct_size = s.negotiated.abi12 ? sizeof(rudder_contribution) : forms::kContributionSize11;
    out.written = 0;
    for (size_t k = 0; k < forms::kOutputs; ++k) {
        if (!dims[k].present()) continue;
        const forms::OutputInfo& info = forms::kOutputInfo[k];
        values[k] = at::full(sizes_of(dims[k]), forms::initial_value(k),
                             at::TensorOptions().dtype(aten_dtype(info.dtype)).device(device));
        handed_out[k] = out.*info.member = views[k].bind(values[k], info.dtype);
    }

    // The call. Denoiser results the plugin asked for stay alive until this function returns.
    struct EndOfStep {
        Impl& s;
        ~EndOfStep() {
            s.predict_step = nullptr;
            s.denoise_results.clear();
        }
    } end_of_step{s};
    s.service_error.clear();
    s.predict_step = predict ? &in : nullptr;
    rudder_status status = RUDDER_OK;
    std::string message;
    {
        auto lock = s.lock_for_call();
        const auto start = std::chrono::steady_clock::now();
        try {
            status = s.desc->step(self_, &step, &out);
        } catch (...) {
            throw PluginError(s.where + ": step let a C++ exception escape across the C ABI" + when);
        }
        if (status != RUDDER_OK) message = plugin_message(s.desc, self_);
        if (status == RUDDER_OK) s.check_duration("step", start, when);
    }
    if (status != RUDDER_OK) throw PluginError(s.failure("step", status, message, when));

    // Validation: the plugin writes data in place and reports honestly what it wrote.
    for (size_t k = 0; k < forms::kOutputs; ++k) {
        const forms::OutputInfo& info = forms::kOutputInfo[k];
        if (out.*info.member != handed_out[k])
            throw PluginError(s.where + ": replaced the " + info.name + " tensor pointer" + when +
                              "; outputs must be written in place");
        if (handed_out[k] == nullptr) continue;
        if (const char* field = views[k].changed_field())
            throw PluginError(s.where + ": wrote a tensor with a changed " + field + " (" + info.name + ")" + when +
                              "; outputs must be written in place");
    }
    return s.finish_step(out.written, values, r.rows, when);
}

Verdict ControllerInstance::evaluate(int64_t index, const std::vector<int64_t>& tokens, int64_t n_tokens,
                                     const std::string& text) {
    Impl& s = *impl_;
    if (!has(RUDDER_CAP_EVALUATE) || s.desc->evaluate == nullptr) return Verdict{};
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

    s.service_error.clear();
    Verdict result;
    if (s.remote != nullptr) {
        const std::string when = " on sample " + std::to_string(index);
        isolation::Writer request;
        request.put<int64_t>(index).put<int64_t>(n_tokens).bytes(tokens.data(), tokens.size() * sizeof(int64_t)).text(text);
        const std::vector<char> reply =
            s.remote->call(isolation::kEvaluate, request, "evaluate", when, s.time_limit, s.server());
        isolation::Reader r(reply);
        s.check_reply(r, "evaluate", when);
        verdict.satisfied = r.get<int32_t>();
        verdict.score = r.get<double>();
        r.get<uint8_t>();  // whether the plugin gave a detail: "" either way
        result.detail = r.text();
    } else {
        rudder_status status = RUDDER_OK;
        std::string message;
        auto lock = s.lock_for_call();
        const auto start = std::chrono::steady_clock::now();
        try {
            status = s.desc->evaluate(self_, &sample, &verdict);
        } catch (...) {
            throw PluginError(s.where + ": evaluate let a C++ exception escape across the C ABI");
        }
        if (status == RUDDER_OK) s.check_duration("evaluate", start, " on sample " + std::to_string(index));
        if (status != RUDDER_OK)
            message = plugin_message(s.desc, self_);
        else if (verdict.detail != nullptr)  // plugin-owned until the next call: copy while no other call can run
            result.detail = verdict.detail;
        if (status != RUDDER_OK)
            throw PluginError(s.failure("evaluate", status, message, " on sample " + std::to_string(index)));
    }
    const std::string when = " on sample " + std::to_string(index);
    if (verdict.satisfied < -1 || verdict.satisfied > 1)
        throw PluginError(s.where + ": evaluate returned satisfied=" + std::to_string(verdict.satisfied) + when +
                          " (must be 1, 0 or -1)");
    if (std::isinf(verdict.score))
        throw PluginError(s.where + ": evaluate returned an infinite score" + when);
    result.satisfied = verdict.satisfied;
    result.has_score = !std::isnan(verdict.score);
    if (result.has_score) result.score = verdict.score;
    return result;
}

}  // namespace rudder::plugins
