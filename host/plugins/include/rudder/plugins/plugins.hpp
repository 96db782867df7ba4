// The host's side of the plugin contract: discovery, loading (Boost.DLL), ABI negotiation, and a guarded
// instance wrapper that passes torch tensors to plugins as DLPack views and checks everything they write.
#pragma once

#include <rudder/plugins/loader.hpp>
#include <rudder/rudder_plugin.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace rudder::plugins {

class Registry {
public:
    // `search_path`: directories scanned in order for plugin libraries (*.so).
    explicit Registry(std::vector<std::filesystem::path> search_path);

    // The default search path: $RUDDER_PLUGIN_PATH (':'-separated) first, then <prefix>/<libdir>/rudder/plugins
    // (bundled_plugin_dir(): found from the CLI's executable or from librudder.so), which is where the build and
    // `cmake --install` put the first-party plugins.
    static std::vector<std::filesystem::path> default_search_path();

    const std::vector<std::filesystem::path>& search_path() const { return search_path_; }

    // Every controller found in the search path (first occurrence of an id wins) and every rejected file, from the
    // plugin index: each library is scanned once, in a child process (rudder-plugin-scan) that a library which
    // crashes, aborts, exits or hangs cannot take this process down with, and the result is kept in the index file
    // (index_file()) under the library's canonical path, size, mtime, ctime and inode. No library is loaded into
    // this process by a scan; resolve() loads the one library a recipe needs. The scan happens once, on first use.
    const std::vector<ControllerInfo>& controllers();
    const std::vector<Rejection>& rejections();

    // How many libraries this registry has scanned in a child process; the others came from the index file.
    size_t scanned_in_child();

    // The index file: <user_cache_dir()>/plugin-index.json, or "" when there is no cache folder.
    static std::filesystem::path index_file();

    // A recipe's "plugin" value: a path (contains '/' or ends in the platform's library suffix) is loaded from
    // `base_dir` if relative, and only if its folder is one of the search path's; otherwise an id looked up in the
    // index, and only the library that provides it is loaded. Either way the library is first scanned in a child
    // process (or found in the index), and one that was rejected there is refused with that reason. `sha256` (64
    // lowercase hex digits, or empty) pins the library file: another digest is refused. Throws PluginError with "did
    // you mean" for near misses and the rejected files' reasons when nothing matches.
    ControllerType resolve(const std::string& name, const std::filesystem::path& base_dir,
                           const std::string& sha256 = "");

    // Whether `file` lies directly in a folder of the search path (symlinks resolved): the files a scan sees.
    bool in_search_path(const std::filesystem::path& file) const;

private:
    void scan();
    ControllerType find(const std::string& name, const std::filesystem::path& base_dir);
    std::vector<std::filesystem::path> search_path_;
    bool scanned_ = false;
    size_t scanned_in_child_ = 0;
    std::vector<ControllerInfo> controllers_;
    std::vector<Rejection> rejections_;
    std::mutex mutex_;
};

// What a run is, as a controller sees it.
struct RunShape {
    rudder_family family = RUDDER_FAMILY_DISCRETE;
    int64_t batch_size = 0, seq_len = 0, vocab_size = 0, embed_dim = 0;
    int64_t pad_id = 0, mask_id = -1, unk_id = -1;
    int32_t total_steps = 0;
    c10::Device device = c10::Device(c10::kCPU);
    int32_t candidates = 0;  // ABI 1.2: k, the candidates per row the host offers (0 when none is offered)
};

// What every controller sees at one reverse step: the reverse loop builds one value per step (and per guide
// iteration) and hands the same to each controller, and to the run services a controller calls back into.
struct StepInputs {
    rudder_phase phase = RUDDER_PHASE_PREDICT;
    int32_t step = 0, total_steps = 0, guide_iter = 0;
    double t = 1.0, t_next = 0.0;
    at::Tensor latent;     // continuous: float32 [B, L, D]
    at::Tensor x0_logits;  // PREDICT: float32 [B, L, V]
    at::Tensor tokens;     // int64 [B, L]
    at::Tensor masked;     // discrete: uint8 [B, L]
    // ABI 1.2. The rows of a step are the positions it samples: flat indices b * L + i, ascending (discrete: the
    // positions that unmask this step; continuous, and a denoiser that uses evidence: all B * L).
    at::Tensor rows;            // int64 [N]
    at::Tensor x0_rows;         // PREDICT: float32 [N, V], x0_logits at the rows (RUDDER_CAP_ROWS controllers' x0)
    at::Tensor candidate_ids;   // PREDICT: int64 [N, k], each row's k most likely tokens, most likely first;
    at::Tensor candidate_logp;  // float32 [N, k], their log-probabilities (both undefined if none is offered)
    // ABI 1.3, COMMIT (RUDDER_PHASE_COMMIT, for RUDDER_CAP_COMMIT controllers): the token drawn for each row, which the
    // host proposes to commit; `tokens` and `masked` are the state before these commits, `rows` the rows still to be
    // committed, guide_iter the round within the step.
    at::Tensor proposed;  // int64 [N]
    // The host's own, never handed to a controller: a self-conditioned network's previous clean estimate (CDCD),
    // which the run services' denoise() reads with the step's input.
    at::Tensor self_condition;
};

// Each row's k (at most V) highest scores of `scores` [N, V] and their tokens, highest first: (scores [N, k], int64
// ids [N, k]), the step's candidates from the log-probabilities at its rows. On the CPU a tie goes to the lower id and
// NaN ranks as -inf; on other devices ties and NaN are at::topk's.
std::tuple<at::Tensor, at::Tensor> top_candidates(const at::Tensor& scores, int64_t k);

// Host-side implementation of the run services (tokenizer, re-entrant denoiser). Exceptions thrown here become
// error statuses for the plugin.
class RunServices {
public:
    virtual ~RunServices() = default;
    virtual std::vector<int64_t> tokenize(const std::string& text) = 0;
    virtual std::string detokenize(const int64_t* ids, int64_t n) = 0;
    virtual const std::string* token_text(int64_t id) = 0;  // nullptr if out of range
    // Logits [n, B, L, V] (float32 log-probs) of `step`'s input (its latent, continuous; its tokens, discrete) at
    // step.t under each condition, one batched forward. The instance passes the PREDICT step whose controller is
    // calling. Throws std::logic_error if the model takes no conditioning.
    virtual at::Tensor denoise(const StepInputs& step, const std::vector<std::string>& conditions) = 0;
    // ABI 1.1: the model's directory ("" if none), its embedding table (continuous; undefined otherwise) and the
    // directory of another model by bundled name or path (throws std::runtime_error saying what was searched).
    virtual std::string model_dir() { return {}; }
    virtual at::Tensor embedding() { return {}; }
    virtual std::string find_model(const std::string& name) {
        throw std::runtime_error("this host cannot look up model '" + name + "'");
    }
};

// What a controller wrote; undefined tensors were not written. Tensors are on the run's device. "[B, L | N, ...]":
// [N, ...] over the step's rows when the controller declares RUDDER_CAP_ROWS, [B, L, ...] otherwise.
struct StepOutputs {
    at::Tensor logit_delta;   // [B, L | N, V] float32
    at::Tensor grad;          // GUIDE: [B, L, D]; discrete PREDICT: [B, L | N, V]
    at::Tensor log_prob;      // [B]
    at::Tensor fixed_tokens;  // [B, L] int64, -1 = free
    at::Tensor forbidden;     // [B, L | N, V] uint8
    // ABI 1.2
    at::Tensor token_bits;       // int32 [B, L | N, ceil(V / 32)]: token v is bit v % 32 of word v / 32
    bool bits_allowed = false;   // token_bits lists the allowed tokens (RUDDER_WROTE_ALLOWED_BITS), else the forbidden
    at::Tensor candidate_delta;  // float32 [N, k]: added (times the weight) to the logits of candidate_ids
    // ABI 1.3, COMMIT: which rows' proposals the controller rejects (token_bits [N, W] then says what each row allows)
    at::Tensor rejected;  // uint8 [N], 0 or 1
};

struct Verdict {
    int32_t satisfied = -1;  // 1, 0, or -1 (cannot tell)
    double score = 0.0;
    bool has_score = false;
    std::string detail;  // JSON object text or ""
};

// Where a controller instance runs. In-process (the default) its calls are function calls into the library loaded in
// this process. Process: in a child process of its own (rudder-controller-host) that the step's tensors reach through
// shared memory, so a crash, abort, exit, stack overflow, memory error or hang (past the time limit: the child is
// killed) becomes a PluginError naming the controller, and this process carries on.
enum class Isolation { in_process, process };

// "in_process" / "process".
const char* isolation_name(Isolation isolation);

// $RUDDER_CONTROL_FORMS. Unset or empty: each controller gets the forms it declares. "dense": the host speaks to every
// controller as a plugin ABI 1.1 host would (1.1 struct sizes, dense [B, L, ...] buffers, no rows, no candidates), so
// that one controller's samples can be compared in both forms. Throws PluginError naming the variable for any other
// value. Read by each ControllerInstance when it is made.
bool dense_control_forms();

// The step's inputs (latent, x0_logits, tokens, masked; rows, x0 at the rows, candidates; COMMIT's proposals) in one
// shared memory file for the controllers of a run that run in processes of their own: each step's input is copied
// there once, by the first controller that reads it, not once per controller, and every child maps them read-only.
// Its owner (the composer) hands it to each instance before begin() and calls next_step() before each step's (guide
// iteration's, commit round's) calls. An instance given none keeps one of its own and refills it at every step.
class StepInputShare {
public:
    StepInputShare();
    ~StepInputShare();
    StepInputShare(const StepInputShare&) = delete;
    StepInputShare& operator=(const StepInputShare&) = delete;
    // The next StepInputs differ from the last: the first isolated controller to step copies them in.
    void next_step();

private:
    friend class ControllerInstance;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A live controller. Every call is guarded: a plugin's error status, a thrown exception caught by its helper,
// a changed tensor header, a wrong dtype or shape, or a NaN/Inf output becomes a PluginError that names the
// controller (its label and id) and the file. Calls into a library whose controller is not THREAD_SAFE are
// serialised on that library.
class ControllerInstance {
public:
    // Creates the instance from params (JSON text). `label` names it in messages and outputs. With
    // Isolation::process the instance lives in a child process from here on (started now; PluginError if that fails).
    // A controller built for ABI 1.3 that declares RUDDER_CAP_COMMIT is refused (PluginError) under
    // RUDDER_CONTROL_FORMS=dense, which has no COMMIT phase.
    ControllerInstance(ControllerType type, const std::string& params_json, std::string label,
                       Isolation isolation = Isolation::in_process);
    ~ControllerInstance();
    ControllerInstance(const ControllerInstance&) = delete;
    ControllerInstance& operator=(const ControllerInstance&) = delete;

    const std::string& label() const { return label_; }
    const ControllerType& type() const { return type_; }
    // The capabilities this instance runs with: the declared ones, less the ABI 1.2 forms (RUDDER_CAP_ROWS,
    // RUDDER_CAP_PACKED_MASK, RUDDER_CAP_CANDIDATES, RUDDER_CAP_IGNORES_X0) when the controller was built for ABI 1.1
    // or RUDDER_CONTROL_FORMS=dense, and less RUDDER_CAP_COMMIT when it was built for 1.2 or older. They say which
    // forms step()'s outputs come in.
    uint64_t capabilities() const { return capabilities_; }
    bool has(uint64_t capability) const { return (capabilities() & capability) != 0; }
    Isolation isolation() const { return isolation_; }
    // False once the controller's process has died or was killed (process isolation): every later call fails
    // until the next begin(), which starts a new process and creates the instance there again.
    bool usable() const;

    // Process isolation: read the step's inputs from `share` (see StepInputShare) from the next begin() on.
    // Ignored in-process.
    void share_step_inputs(std::shared_ptr<StepInputShare> share);
    // Starts a run. `services` must outlive the run (until the next begin or destruction).
    void begin(const RunShape& shape, RunServices* services);
    // Wall-clock seconds one step() or evaluate() call may take (0 = no limit, the default). A call that returns
    // later fails with a PluginError naming the controller, the call and the time; a call that never returns
    // cannot be stopped in-process. With process isolation the limit also covers begin(), and a call still running
    // at the limit is stopped by killing the controller's process.
    void set_time_limit(double seconds);
    // Allocates the outputs the controller declared for this phase, calls step(), validates what it wrote. With
    // process isolation the outputs on the CPU view the instance's shared memory: valid until its next step().
    // ABI 1.2: a PREDICT step without `rows` has all B * L rows; x0 at the rows and the candidates (k =
    // RunShape::candidates) are taken from x0_logits where `in` does not give them. ABI 1.3: a COMMIT step (`proposed`
    // given, [N] tokens in [0, V); `rows` as in PREDICT) reaches only a RUDDER_CAP_COMMIT controller (others return
    // nothing), which gets `rejected` [N] and `token_bits` [N, W] and must set the bits of token_bits when it rejects.
    StepOutputs step(const StepInputs& in);
    // Verdict on one finished sample (tokens on the CPU, length seq_len).
    Verdict evaluate(int64_t index, const std::vector<int64_t>& tokens, int64_t n_tokens, const std::string& text);

private:
    struct Impl;
    ControllerType type_;
    std::string label_;
    Isolation isolation_ = Isolation::in_process;
    uint64_t capabilities_ = 0;
    std::unique_ptr<Impl> impl_;
};

}  // namespace rudder::plugins
