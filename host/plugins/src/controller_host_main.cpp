// rudder-controller-host LIBRARY CONTROLLER_ID PARENT_PID MEMORY_LIMIT: runs one controller instance for a host that
// asked for process isolation ("isolation": "process"). It limits its data to MEMORY_LIMIT bytes (RLIMIT_DATA; 0:
// none), ignores SIGINT (a Ctrl-C at the terminal reaches the whole process group: the host decides whether the run
// stops, and stops this process itself), loads LIBRARY with the host's checks, finds CONTROLLER_ID and then
// serves the host's calls on file descriptor 3 (see isolation_protocol.hpp): create, begin, step, evaluate, destroy.
// The step's tensors are in shared memory the host hands over at begin; the run services the plugin calls
// (tokenize, find_model, denoise...) are forwarded to the host. A plugin that crashes, aborts, exits, overflows its
// stack or hangs takes only this process down. Not for users.
#include "isolation_protocol.hpp"

#include <rudder/plugins/loader.hpp>

#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace rudder::plugins::isolation;

[[noreturn]] void gone() { ::_exit(0); }  // the host went away: nothing left to serve

void send_or_exit(uint32_t type, const Writer& w) {
    if (!send_message(kChildSocketFd, type, w.data())) gone();
}

// A DLTensor over a region of the shared memory, with a copy of its header to find a plugin that rewrote it.
struct View {
    int64_t shape[4] = {0, 0, 0, 0};
    DLTensor dl{};
    DLTensor original{};
    int64_t original_shape[4] = {0, 0, 0, 0};

    DLTensor* bind(void* data, DLDataType dtype, std::initializer_list<int64_t> sizes) {
        int32_t i = 0;
        for (int64_t s : sizes) shape[i++] = s;
        return bind(data, dtype, i);
    }
    DLTensor* bind(void* data, DLDataType dtype, const rudder::plugins::forms::Dims& dims) {
        std::copy(dims.size, dims.size + dims.ndim, shape);
        return bind(data, dtype, dims.ndim);
    }

private:
    DLTensor* bind(void* data, DLDataType dtype, int32_t ndim) {  // over shape[0..ndim), already set
        dl = DLTensor{};
        dl.data = data;
        dl.device = DLDevice{kDLCPU, 0};
        dl.ndim = ndim;
        dl.dtype = dtype;
        dl.shape = shape;
        dl.strides = nullptr;
        dl.byte_offset = 0;
        original = dl;
        std::memcpy(original_shape, shape, sizeof shape);
        return &dl;
    }

public:
    const char* changed_field() const {
        return rudder::plugins::forms::changed_header_field(dl, original, shape, original_shape);
    }
};

using rudder::plugins::forms::kF32;
using rudder::plugins::forms::kI64;
using rudder::plugins::forms::kU8;
namespace forms = rudder::plugins::forms;

struct Child {
    const rudder_controller_desc* desc = nullptr;
    void* self = nullptr;
    bool created = false;

    // The run.
    rudder_run_info run{};
    int64_t B = 0, L = 0, V = 0, D = 0;
    bool continuous = false;
    forms::StepShape run_shape;  // the run and the controller's negotiated forms, as the host computed them
    // The outputs (bit k: forms::Output k) that may not be all zeros any more: those the last step said it wrote, or
    // every one it was handed if it failed; and how many bytes from each region's start that step handed out (a
    // row-shaped output covers N rows, which vary). Only those bytes are zeroed before the next step; an output the
    // plugin was handed and did not write is still zeros (the ABI: a controller sets the bit of each output it
    // writes).
    uint32_t dirty = 0;
    size_t extent[forms::kOutputs] = {};
    std::string model_dir;
    char* shm = nullptr;  // this controller's outputs and the embedding table (read-write)
    size_t shm_size = 0;
    const char* inputs = nullptr;  // the step's inputs, shared by the run's isolated controllers (read-only)
    size_t inputs_size = 0;
    OutputLayout layout;
    InputLayout in_layout;
    View embedding;
    std::map<int64_t, std::string> token_texts;  // token_text results: valid as long as the run info
    // ABI 1.3: the run's token pieces, asked of the host once per run: each kind's pieces, the kinds after.
    std::vector<std::vector<std::string>> pieces;
    std::vector<int32_t> piece_kind_after;
    std::vector<std::vector<float>> denoised;  // denoise results: valid until step() returns
    std::vector<std::unique_ptr<View>> denoised_views;

    // Sends a service request and waits for its answer (the host answers before anything else).
    std::vector<char> service(uint32_t type, const Writer& request) {
        send_or_exit(type, request);
        Header header{};
        std::vector<char> payload;
        int fds[kMaxFds];
        if (!receive_message(kChildSocketFd, header, payload, fds) || header.type != kServiceReply) gone();
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
        return payload;
    }

    // Maps a shared memory file the host passed (closing the descriptor), replacing `*where`'s mapping.
    template <class T>
    static void map_shared(int fd, size_t size, bool writable, T*& where, size_t& where_size) {
        if (where != nullptr) ::munmap(const_cast<char*>(where), where_size);
        where = nullptr;
        void* p = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        if (p == MAP_FAILED) {
            Writer w;
            w.text(std::string("could not map the step's shared memory: ") + std::strerror(errno));
            send_or_exit(kFatal, w);
            gone();
        }
        where = static_cast<T*>(p);
        where_size = size;
    }
    char* at(const Region& r) const { return r.size == 0 ? nullptr : shm + r.offset; }
    // Inputs are read-only: a plugin that writes to one gets SIGSEGV here, as it would writing to read-only memory.
    void* input(const Region& r) const { return r.size == 0 ? nullptr : const_cast<char*>(inputs + r.offset); }

    static Child& of(void* run_ctx) { return *static_cast<Child*>(run_ctx); }

    static rudder_status tokenize(void* ctx, const char* text, int64_t* out_ids, int64_t capacity, int64_t* n_ids) {
        if (n_ids != nullptr) *n_ids = 0;
        if (ctx == nullptr || text == nullptr || n_ids == nullptr || capacity < 0 ||
            (capacity > 0 && out_ids == nullptr))
            return RUDDER_ERR_INVALID_ARGUMENT;
        Writer w;
        w.text(text).put<int64_t>(capacity);
        const std::vector<char> reply = of(ctx).service(kTokenize, w);
        Reader r(reply);
        const auto status = r.get<int32_t>();
        const auto count = r.get<int64_t>();
        *n_ids = count;
        for (int64_t i = 0; i < std::min(count, capacity); ++i) out_ids[i] = r.get<int64_t>();
        return status;
    }
    static rudder_status detokenize(void* ctx, const int64_t* ids, int64_t n_ids, char* out, size_t capacity,
                                    size_t* n_bytes) {
        if (n_bytes != nullptr) *n_bytes = 0;
        if (ctx == nullptr || n_bytes == nullptr || n_ids < 0 || (n_ids > 0 && ids == nullptr) ||
            (capacity > 0 && out == nullptr))
            return RUDDER_ERR_INVALID_ARGUMENT;
        Writer w;
        w.bytes(ids, static_cast<size_t>(n_ids) * sizeof(int64_t));
        const std::vector<char> reply = of(ctx).service(kDetokenize, w);
        Reader r(reply);
        const auto status = r.get<int32_t>();
        if (status != RUDDER_OK) return status;
        const std::string text = r.text();
        *n_bytes = text.size();
        if (capacity > 0) {
            const size_t kept = std::min(text.size(), capacity - 1);
            std::memcpy(out, text.data(), kept);
            out[kept] = '\0';
        }
        return text.size() < capacity ? RUDDER_OK : RUDDER_ERR_BUFFER_TOO_SMALL;
    }
    static const char* token_text(void* ctx, int64_t id) {
        if (ctx == nullptr) return nullptr;
        Child& c = of(ctx);
        if (auto found = c.token_texts.find(id); found != c.token_texts.end()) return found->second.c_str();
        Writer w;
        w.put<int64_t>(id);
        const std::vector<char> reply = c.service(kTokenText, w);
        Reader r(reply);
        if (r.get<uint8_t>() == 0) return nullptr;
        return c.token_texts.emplace(id, r.text()).first->second.c_str();
    }
    // The run's token pieces from the host (kTokenPieces): at begin only how many kinds there are; the pieces
    // themselves (megabytes for a large vocabulary) at the plugin's first call, then kept for the run.
    int32_t ask_piece_kinds() {
        pieces.clear();
        piece_kind_after.clear();
        Writer w;
        w.put<uint8_t>(0);
        const std::vector<char> reply = service(kTokenPieces, w);
        Reader r(reply);
        return std::max<int32_t>(r.get<int32_t>(), 0);
    }
    void fetch_pieces() {
        Writer w;
        w.put<uint8_t>(1);
        const std::vector<char> reply = service(kTokenPieces, w);
        Reader r(reply);
        const auto kinds = r.get<int32_t>();
        if (kinds <= 0) return;
        const auto V = r.get<int64_t>();
        piece_kind_after.resize(static_cast<size_t>(V));
        for (auto& k : piece_kind_after) k = r.get<int32_t>();
        pieces.assign(static_cast<size_t>(kinds), std::vector<std::string>(static_cast<size_t>(V)));
        for (auto& kind : pieces)
            for (auto& piece : kind) piece = r.text();
    }
    static rudder_status token_pieces(void* ctx, int32_t kind, char* bytes, size_t capacity, size_t* n_bytes,
                                      int64_t* offsets, int32_t* kind_after) {
        if (ctx == nullptr || n_bytes == nullptr || offsets == nullptr || (bytes == nullptr && capacity > 0))
            return RUDDER_ERR_INVALID_ARGUMENT;
        Child& c = of(ctx);
        if (kind < 0 || kind >= c.run.piece_kinds) return RUDDER_ERR_INVALID_ARGUMENT;
        if (c.pieces.empty()) c.fetch_pieces();
        if (kind >= static_cast<int32_t>(c.pieces.size())) return RUDDER_ERR_INVALID_ARGUMENT;
        return write_token_pieces(c.pieces[static_cast<size_t>(kind)], c.piece_kind_after, bytes, capacity, n_bytes,
                                  offsets, kind_after);
    }
    static rudder_status find_model(void* ctx, const char* name, char* out, size_t capacity, size_t* n_bytes) {
        if (ctx == nullptr || name == nullptr || n_bytes == nullptr || (out == nullptr && capacity > 0))
            return RUDDER_ERR_INVALID_ARGUMENT;
        Writer w;
        w.text(name);
        const std::vector<char> reply = of(ctx).service(kFindModel, w);
        Reader r(reply);
        const auto status = r.get<int32_t>();
        if (status != RUDDER_OK) return status;
        const std::string dir = r.text();
        *n_bytes = dir.size();
        if (dir.size() + 1 > capacity) return RUDDER_ERR_BUFFER_TOO_SMALL;
        std::memcpy(out, dir.c_str(), dir.size() + 1);
        return RUDDER_OK;
    }
    static rudder_status denoise(void* ctx, const char* const* conditions, int32_t n_conditions,
                                 const DLTensor** out_logits) {
        if (out_logits != nullptr) *out_logits = nullptr;
        if (ctx == nullptr || out_logits == nullptr || conditions == nullptr || n_conditions <= 0)
            return RUDDER_ERR_INVALID_ARGUMENT;
        Writer w;
        w.put<int32_t>(n_conditions);
        for (int32_t i = 0; i < n_conditions; ++i) {
            if (conditions[i] == nullptr) return RUDDER_ERR_INVALID_ARGUMENT;
            w.text(conditions[i]);
        }
        Child& c = of(ctx);
        const std::vector<char> reply = c.service(kDenoise, w);
        Reader r(reply);
        const auto status = r.get<int32_t>();
        if (status != RUDDER_OK) return status;
        uint64_t size = 0;
        const char* data = r.bytes(size);
        const size_t expected =
            static_cast<size_t>(n_conditions) * static_cast<size_t>(c.B * c.L * c.V) * sizeof(float);
        if (size != expected) return RUDDER_ERR_INTERNAL;
        c.denoised.emplace_back(size / sizeof(float));
        std::memcpy(c.denoised.back().data(), data, size);
        c.denoised_views.push_back(std::make_unique<View>());
        *out_logits = c.denoised_views.back()->bind(c.denoised.back().data(), kF32, {n_conditions, c.B, c.L, c.V});
        return RUDDER_OK;
    }

    // A reply with the outcome of a plugin call.
    void reply(uint32_t outcome, rudder_status status, const std::string& message, uint32_t written = 0,
               const Writer* extra = nullptr) {
        Writer w;
        w.put<uint32_t>(outcome).put<int32_t>(status).put<uint32_t>(written).text(message);
        if (extra != nullptr) w.data().insert(w.data().end(), extra->data().begin(), extra->data().end());
        send_or_exit(kReply, w);
    }

    void do_create(Reader& r) {
        const std::string params = r.text();
        rudder_status status = RUDDER_OK;
        try {
            status = desc->create(rudder::plugins::host_services(), params.c_str(), &self);
        } catch (...) {
            return reply(kEscaped, RUDDER_ERR_INTERNAL, "create");
        }
        if (status != RUDDER_OK) return reply(kFailed, status, rudder::plugins::plugin_message(desc, nullptr));
        created = true;
        reply(kOk, RUDDER_OK, "");
    }

    void do_begin(Reader& r, const int (&fds)[kMaxFds]) {
        run = rudder_run_info{};
        run.family = r.get<int32_t>();
        B = run.batch_size = r.get<int64_t>();
        L = run.seq_len = r.get<int64_t>();
        V = run.vocab_size = r.get<int64_t>();
        D = run.embed_dim = r.get<int64_t>();
        run.pad_id = r.get<int64_t>();
        run.mask_id = r.get<int64_t>();
        run.unk_id = r.get<int64_t>();
        run.total_steps = r.get<int32_t>();
        const bool has_embedding = r.get<uint8_t>() != 0;
        const auto size = r.get<uint64_t>(), input_size = r.get<uint64_t>();
        const auto passed = r.get<uint8_t>();  // bit 0: the output file came, bit 1: the input file came
        model_dir = r.text();
        forms::Negotiated negotiated;
        const auto minor = r.get<uint8_t>();  // the minor the host speaks to the controller in: 1, 2 or 3
        negotiated.abi12 = minor >= 2;
        negotiated.abi13 = minor >= 3;
        negotiated.capabilities = r.get<uint64_t>();
        const auto run_candidates = r.get<int64_t>();  // k of the run: the shared input file is laid out for it
        int next = 0;
        if ((passed & 1) != 0 && fds[next] >= 0) map_shared(fds[next++], size, true, shm, shm_size);
        if ((passed & 2) != 0 && fds[next] >= 0) map_shared(fds[next++], input_size, false, inputs, inputs_size);
        continuous = run.family == RUDDER_FAMILY_CONTINUOUS;
        run_shape = forms::run_shape(run.family, B, L, V, D, run_candidates, negotiated);
        layout = output_layout(run_shape, has_embedding);
        in_layout = input_layout(B, L, V, continuous ? D : 0, run_candidates);
        if (shm == nullptr || layout.total > shm_size || inputs == nullptr || in_layout.total > inputs_size) {
            Writer w;
            w.text("the host's shared memory does not fit the run");
            send_or_exit(kFatal, w);
            gone();
        }
        run.struct_size = negotiated.run_info_size();
        run.device = DLDevice{kDLCPU, 0};
        run.run_ctx = this;
        run.tokenize = &Child::tokenize;
        run.detokenize = &Child::detokenize;
        run.token_text = &Child::token_text;
        run.denoise = &Child::denoise;
        run.model_dir = model_dir.c_str();
        run.embedding = has_embedding ? embedding.bind(at(layout.embedding), kF32, {V, D}) : nullptr;
        run.find_model = &Child::find_model;
        run.candidates = static_cast<int32_t>(run_shape.candidates);
        run.forms = forms::run_forms(negotiated);
        token_texts.clear();
        if (negotiated.abi13) {
            run.piece_kinds = ask_piece_kinds();
            run.token_pieces = run.piece_kinds > 0 ? &Child::token_pieces : nullptr;
        }
        // A new run (or a new process after a crash, or a new layout): every output starts at zero.
        std::memset(shm, 0, layout.embedding.size != 0 ? layout.embedding.offset : layout.total);
        dirty = 0;
        rudder_status status = RUDDER_OK;
        try {
            status = desc->begin(self, &run);
        } catch (...) {
            return reply(kEscaped, RUDDER_ERR_INTERNAL, "begin");
        }
        if (status != RUDDER_OK) return reply(kFailed, status, rudder::plugins::plugin_message(desc, self));
        reply(kOk, RUDDER_OK, "");
    }

    void do_step(Reader& r) {
        rudder_step step{};
        step.struct_size = run_shape.negotiated.step_size();
        step.phase = r.get<int32_t>();
        step.step = r.get<int32_t>();
        step.total_steps = r.get<int32_t>();
        step.guide_iter = r.get<int32_t>();
        step.t = r.get<double>();
        step.t_next = r.get<double>();
        const auto present = r.get<uint32_t>();
        const auto N = r.get<int64_t>();
        if (N < 0 || N > B * L) throw std::runtime_error("a step with " + std::to_string(N) + " rows");
        const int64_t k = run_shape.candidates;
        View latent, x0_logits, tokens, masked, rows, candidate_ids, candidate_logp, proposed;
        if ((present & kHasLatent) != 0) step.latent = latent.bind(input(in_layout.latent), kF32, {B, L, D});
        if ((present & kHasLogits) != 0) step.x0_logits = x0_logits.bind(input(in_layout.x0_logits), kF32, {B, L, V});
        if ((present & kHasX0Rows) != 0) step.x0_logits = x0_logits.bind(input(in_layout.x0_rows), kF32, {N, V});
        if ((present & kHasTokens) != 0) step.tokens = tokens.bind(input(in_layout.tokens), kI64, {B, L});
        if ((present & kHasMasked) != 0) step.masked = masked.bind(input(in_layout.masked), kU8, {B, L});
        if ((present & kHasRows) != 0) step.rows = rows.bind(input(in_layout.rows), kI64, {N});
        if ((present & kHasCandidates) != 0) {
            step.candidate_ids = candidate_ids.bind(input(in_layout.candidate_ids), kI64, {N, k});
            step.candidate_logp = candidate_logp.bind(input(in_layout.candidate_logp), kF32, {N, k});
        }
        if ((present & kHasProposed) != 0) step.proposed = proposed.bind(input(in_layout.proposed), kI64, {N});

        // Outputs, in the forms the host computed the same way, initialised as the ABI promises, in the shared memory
        // the host reads them from.
        forms::StepShape now = run_shape;
        now.phase = step.phase;
        now.rows = N;
        const auto dims = forms::output_dims(now);
        rudder_contribution out{};
        out.struct_size = run_shape.negotiated.contribution_size();
        View views[forms::kOutputs];
        DLTensor* handed_out[forms::kOutputs] = {};
        uint32_t handed = 0;
        for (size_t o = 0; o < forms::kOutputs; ++o) {
            if (!dims[o].present()) continue;
            const forms::OutputInfo& info = forms::kOutputInfo[o];
            char* data = at(layout.outputs[o]);
            const size_t bytes = static_cast<size_t>(dims[o].numel()) * (info.dtype.bits / 8);
            if (forms::initial_value(o) != 0) {  // fixed_tokens (int64, small): refilled with -1 every step
                std::fill_n(reinterpret_cast<int64_t*>(data), dims[o].numel(), forms::initial_value(o));
            } else if ((dirty & (1u << o)) != 0) {
                std::memset(data, 0, extent[o]);
            }
            extent[o] = bytes;
            handed_out[o] = out.*info.member = views[o].bind(data, info.dtype, dims[o]);
            handed |= 1u << o;
        }
        dirty |= handed;  // until the call ends well, anything handed out may be written

        rudder_status status = RUDDER_OK;
        bool escaped = false;
        try {
            status = desc->step(self, &step, &out);
        } catch (...) {
            escaped = true;
        }
        denoised_views.clear();
        denoised.clear();
        if (escaped) return reply(kEscaped, RUDDER_ERR_INTERNAL, "step");
        if (status != RUDDER_OK) return reply(kFailed, status, rudder::plugins::plugin_message(desc, self));
        uint32_t written_outputs = 0;
        for (size_t o = 0; o < forms::kOutputs; ++o) {
            const forms::OutputInfo& info = forms::kOutputInfo[o];
            if (out.*info.member != handed_out[o])
                return reply(kRewroteHeader, RUDDER_OK, std::string("replaced the ") + info.name + " tensor pointer");
            if (handed_out[o] == nullptr) continue;
            if (const char* field = views[o].changed_field())
                return reply(kRewroteHeader, RUDDER_OK,
                             std::string("wrote a tensor with a changed ") + field + " (" + info.name + ")");
            if ((out.written & info.written) != 0) written_outputs |= 1u << o;
        }
        dirty = written_outputs;  // the call ended well: what it wrote is all it wrote
        reply(kOk, RUDDER_OK, "", out.written);
    }

    void do_evaluate(Reader& r) {
        rudder_sample sample{};
        sample.struct_size = sizeof(rudder_sample);
        sample.index = r.get<int64_t>();
        sample.n_tokens = r.get<int64_t>();
        uint64_t size = 0;
        const char* data = r.bytes(size);
        std::vector<int64_t> tokens(size / sizeof(int64_t));
        if (!tokens.empty()) std::memcpy(tokens.data(), data, tokens.size() * sizeof(int64_t));
        const std::string text = r.text();
        sample.tokens = tokens.data();
        sample.seq_len = static_cast<int64_t>(tokens.size());
        sample.text = text.c_str();
        rudder_verdict verdict{};
        verdict.struct_size = sizeof(rudder_verdict);
        verdict.satisfied = -1;
        verdict.score = std::numeric_limits<double>::quiet_NaN();
        rudder_status status = RUDDER_OK;
        try {
            status = desc->evaluate(self, &sample, &verdict);
        } catch (...) {
            return reply(kEscaped, RUDDER_ERR_INTERNAL, "evaluate");
        }
        if (status != RUDDER_OK) return reply(kFailed, status, rudder::plugins::plugin_message(desc, self));
        Writer extra;
        extra.put<int32_t>(verdict.satisfied).put<double>(verdict.score);
        std::string detail;
        if (verdict.detail != nullptr) {
            const char* end = static_cast<const char*>(std::memchr(verdict.detail, '\0', 1 << 20));
            detail = end != nullptr ? std::string(verdict.detail, end) : std::string(verdict.detail, 1 << 20);
        }
        extra.put<uint8_t>(verdict.detail != nullptr ? 1 : 0).text(detail);
        reply(kOk, RUDDER_OK, "", 0, &extra);
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        static const char usage[] =
            "usage: rudder-controller-host LIBRARY CONTROLLER_ID PARENT_PID MEMORY_LIMIT (host on fd 3)\n";
        (void)!::write(2, usage, sizeof usage - 1);
        return 2;
    }
    // Should the host die, this process goes with it; if it died before we got here, end now.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != static_cast<pid_t>(std::strtol(argv[3], nullptr, 10))) return 0;
    ::signal(SIGINT, SIG_IGN);
    const unsigned long long memory_limit = std::strtoull(argv[4], nullptr, 10);
    if (memory_limit > 0 && rudder::plugins::child_memory_limits_apply()) {
        const rlimit limit{static_cast<rlim_t>(memory_limit), static_cast<rlim_t>(memory_limit)};
        if (::setrlimit(RLIMIT_DATA, &limit) != 0) {
            Writer w;
            w.text(std::string("could not limit its memory to ") + argv[4] + " bytes: " + std::strerror(errno));
            send_or_exit(kFatal, w);
            return 0;
        }
    }
#if defined(__GLIBC__)
    // As the CLI does in the host (rudder::keep_freed_memory_in_process): a plugin that allocates large tensors each
    // step (a LibTorch network) would otherwise get them back page-faulted every time.
    ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif

    Child child;
    std::vector<rudder::plugins::ControllerType> types;
    try {
        types = rudder::plugins::load_library(argv[1]);
    } catch (const std::exception& e) {
        Writer w;
        w.text(e.what());
        send_or_exit(kFatal, w);
        return 0;
    }
    for (const auto& type : types)
        if (type.id() == argv[2]) child.desc = type.desc;
    if (child.desc == nullptr) {
        Writer w;
        w.text(std::string("the library has no controller '") + argv[2] + "'");
        send_or_exit(kFatal, w);
        return 0;
    }
    send_or_exit(kReady, Writer());

    for (;;) {
        Header header{};
        std::vector<char> payload;
        int fds[kMaxFds];
        if (!receive_message(kChildSocketFd, header, payload, fds)) gone();
        Reader r(payload);
        try {
            switch (header.type) {
                case kCreate: child.do_create(r); break;
                case kBegin:
                    child.do_begin(r, fds);
                    for (int& fd : fds) fd = -1;
                    break;
                case kStep: child.do_step(r); break;
                case kEvaluate: child.do_evaluate(r); break;
                case kDestroy:
                    if (child.created) child.desc->destroy(child.self);
                    child.created = false;
                    send_or_exit(kReply, Writer());
                    // The library stays loaded: none of its destructors gets a chance to crash or hang on the way out.
                    ::_exit(0);
                default: {
                    Writer w;
                    w.text("an unknown call " + std::to_string(header.type));
                    send_or_exit(kFatal, w);
                    return 0;
                }
            }
        } catch (const std::exception& e) {  // a malformed message: the host and this process disagree
            Writer w;
            w.text(e.what());
            send_or_exit(kFatal, w);
            return 0;
        }
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
    }
}
