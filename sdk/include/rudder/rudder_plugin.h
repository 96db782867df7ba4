/*
 * rudder_plugin.h — the Rudder controller plugin ABI, version 1.3.
 *
 * A controller plugin is a shared library that steers the reverse (denoising) loop of a diffusion language
 * model. At each step the host asks every active controller for a contribution — a logit delta, a gradient,
 * hard constraints — in buffers the host owns, combines them and takes the step. This header is the whole
 * contract: C99, depending only on <stdint.h>, <stddef.h> and DLPack. No C++ type and no exception crosses it.
 *
 * Usage (a plugin with one controller; C++ authors may use rudder_controller.hpp instead):
 *
 *     static int32_t my_step(void* self, const rudder_step* step, rudder_contribution* out) {
 *         if (step->phase != RUDDER_PHASE_PREDICT || out->forbidden == NULL) return RUDDER_OK;
 *         uint8_t* ban = (uint8_t*)out->forbidden->data;           // [batch, seq_len, vocab], zero-filled
 *         ...mark banned tokens with 1...
 *         out->written |= RUDDER_WROTE_FORBIDDEN;
 *         return RUDDER_OK;
 *     }
 *     static const rudder_controller_desc my_desc = {
 *         sizeof(rudder_controller_desc), RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR,
 *         "no_digits", "1.0.0", "forbids tokens that contain a digit", "{\"type\":\"object\"}",
 *         RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_THREAD_SAFE,
 *         my_create, my_destroy, my_begin, my_step, my_evaluate, my_last_error };
 *     static const rudder_controller_desc* const my_list[] = { &my_desc };
 *     static const rudder_plugin my_plugin = { sizeof(rudder_plugin), RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR,
 *                                              "no-digits", 1, my_list };
 *     RUDDER_EXPORT const rudder_plugin* rudder_plugin_entry(uint32_t major, uint32_t minor) {
 *         return major == RUDDER_ABI_MAJOR ? &my_plugin : NULL;
 *     }
 *
 * Versioning. RUDDER_ABI_MAJOR changes only with an incompatible change; the host refuses plugins of another
 * major. Within a major, changes are append-only: new members go at the end of structs, new enum values and
 * capability bits are added, nothing is removed or reordered. Every struct starts with `struct_size`; a
 * reader touches a member only if `struct_size` covers it, so an older plugin works with a newer host and the
 * other way round. RUDDER_HAS_MEMBER(ptr, type, member) says whether a struct covers a member.
 *
 * Forms (ABI 1.2). A controller may ask for cheaper forms of its step's tensors than the dense [B, L, ...] ones:
 * RUDDER_CAP_ROWS (only the positions the step samples), RUDDER_CAP_PACKED_MASK (token masks as bits) and
 * RUDDER_CAP_CANDIDATES (deltas for each row's k most likely tokens only), and may say it never reads x0_logits
 * (RUDDER_CAP_IGNORES_X0). A host gives them only to a controller
 * whose descriptor says abi_minor >= 2; a 1.1 host knows none of them, and a 1.2 host run with
 * RUDDER_CONTROL_FORMS=dense presents itself as one (1.1 struct sizes, dense buffers), so a controller that reads
 * the 1.2 members only where struct_size covers them and falls back to the dense forms runs on both
 * (rudder_controller.hpp's Rows, RowView, TokenMask and Candidates do this).
 *
 * Commit (ABI 1.3). Several positions drawn in one step can each be allowed and still be invalid together. A controller
 * that declares RUDDER_CAP_COMMIT (with HARD_CONSTRAINT and PACKED_MASK) is asked, after each draw, which of the
 * tokens the host proposes to commit it accepts (RUDDER_PHASE_COMMIT: rudder_step.proposed in, rudder_contribution
 * .rejected and token_bits out). The host's contract:
 *   - a proposal is always a token the controller's last PREDICT output (or its last COMMIT bits) allowed at that row;
 *   - the host commits the rows that no COMMIT controller rejects, and, if every row is rejected, the first row alone
 *     (a single proposal is consistent with the state it was allowed in);
 *   - it draws the rows it did not commit again, within the token_bits the controllers wrote, and asks again (with
 *     the committed rows now in `tokens`, the rest as `rows`), until every row is committed.
 * In return a controller must accept any subset of a set it accepted. A host gives the phase only to a controller
 * whose descriptor says abi_minor >= 3 (and not under RUDDER_CONTROL_FORMS=dense, which refuses such a controller).
 *
 * Threads. The host calls one controller instance from one thread at a time (not always the same thread).
 * Different instances of the same controller may run on different threads at the same time only if the
 * controller declares RUDDER_CAP_THREAD_SAFE; otherwise the host serialises all calls into that library.
 *
 * Errors. Every callback that can fail returns a rudder_status. On failure the plugin keeps a message that
 * the host reads with last_error() right after the failing call. The host never lets a plugin failure crash
 * the process: it reports the plugin id and the message.
 */
#ifndef RUDDER_PLUGIN_H
#define RUDDER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RUDDER_ABI_MAJOR 1
#define RUDDER_ABI_MINOR 3

#if defined(_WIN32)
#define RUDDER_EXPORT __declspec(dllexport)
#else
#define RUDDER_EXPORT __attribute__((visibility("default")))
#endif

/* The one symbol a plugin library exports. */
#define RUDDER_PLUGIN_ENTRY_SYMBOL "rudder_plugin_entry"

/* ---------------------------------------------------------------------------------------------------------
 * Status codes and enums. Values are fixed forever within a major version.
 * ------------------------------------------------------------------------------------------------------- */
/* Guarded because the embedding API's header (rudder.h) defines the same type and values: both may be included. */
#ifndef RUDDER_STATUS_DEFINED
#define RUDDER_STATUS_DEFINED
typedef int32_t rudder_status;
enum {
    RUDDER_OK = 0,
    RUDDER_ERR_INVALID_ARGUMENT = 1, /* bad params, or a request the controller cannot meet (message says) */
    RUDDER_ERR_UNSUPPORTED = 2,      /* e.g. a diffusion family or phase the controller does not handle */
    RUDDER_ERR_BUFFER_TOO_SMALL = 3, /* host services: the caller's buffer is too small; size is reported */
    RUDDER_ERR_INTERNAL = 4,         /* anything else that went wrong inside the callee */
    RUDDER_ERR_CANCELLED = 5,        /* the run was cancelled */
    RUDDER_ERR_OUT_OF_MEMORY = 6
};
#endif

typedef int32_t rudder_family;
enum {
    RUDDER_FAMILY_CONTINUOUS = 1, /* embedding diffusion (Diffusion-LM, CDCD): the latent is [B, L, D] */
    /* discrete diffusion: the state is tokens [B, L]. Absorbing noise (MDLM, SEDD, BD3-LM, LLaDA, Dream): positions
     * start as mask_id and unmask (with remasking, may be masked again). Uniform noise (UDLM, DUO, SEDD's uniform
     * graph): every position holds a token at every step and may change at any step; `masked` is all zero, and
     * mask_id names a token never drawn. */
    RUDDER_FAMILY_DISCRETE = 2
};

typedef int32_t rudder_phase;
enum {
    /* Once per reverse step, after the denoiser ran: x0_logits are fresh. Outputs: logit_delta, fixed_tokens,
     * forbidden, and (discrete family) grad with respect to the one-hot tokens. */
    RUDDER_PHASE_PREDICT = 1,
    /* Continuous family only: K times per step, during gradient guidance on x_{t-1}. Inputs: latent is the
     * current iterate at time t. Outputs: grad (d log p(c | latent) / d latent) and log_prob. */
    RUDDER_PHASE_GUIDE = 2,
    /* ABI 1.3, RUDDER_CAP_COMMIT controllers only. The discrete family (absorbing and uniform noise) after each draw,
     * the continuous family for its final rounding to tokens: the host has drawn a token for each of the step's `rows`
     * (`proposed`) and is about to commit them. Inputs: tokens (the state before these commits), masked, rows,
     * proposed; x0_logits, latent and the candidates are NULL. Outputs: rejected and token_bits [N, W] (always
     * row-shaped in this phase). May be called several times per step (guide_iter counts the rounds); see "Commit"
     * above for what the host does with the answer. */
    RUDDER_PHASE_COMMIT = 3
};

/* Capability bits in rudder_controller_desc.capabilities. The host allocates only the outputs a
 * controller declares, and calls the GUIDE phase only for controllers that declare GRADIENT. */
#define RUDDER_CAP_LOGIT_DELTA ((uint64_t)1 << 0)        /* writes logit_delta */
#define RUDDER_CAP_GRADIENT ((uint64_t)1 << 1)           /* writes grad (+ optionally log_prob) */
#define RUDDER_CAP_HARD_CONSTRAINT ((uint64_t)1 << 2)    /* writes fixed_tokens and/or forbidden */
#define RUDDER_CAP_NEEDS_FRESH_LOGITS ((uint64_t)1 << 3) /* discrete: never reuse cached denoiser output */
#define RUDDER_CAP_EVALUATE ((uint64_t)1 << 4)           /* evaluate() gives a verdict on final samples */
#define RUDDER_CAP_THREAD_SAFE ((uint64_t)1 << 5)        /* instances may run concurrently on many threads */
/* Accepts tensors on the run's device (e.g. CUDA). Without it every tensor the controller sees is in CPU memory:
 * the host copies inputs to the CPU and outputs back, so a plain C plugin works unchanged on any device. */
#define RUDDER_CAP_ANY_DEVICE ((uint64_t)1 << 6)
/* ABI 1.2; the host honours these only for a controller whose descriptor says abi_minor >= 2, and not at all with
 * RUDDER_CONTROL_FORMS=dense. */
/* The PREDICT outputs with a position axis over the vocabulary (logit_delta, forbidden, token_bits, the discrete
 * grad) and x0_logits cover only the step's rows (rudder_step.rows): [N, ...] instead of [B, L, ...]. */
#define RUDDER_CAP_ROWS ((uint64_t)1 << 7)
/* With HARD_CONSTRAINT: token masks come as bits (rudder_contribution.token_bits) instead of forbidden's bytes. */
#define RUDDER_CAP_PACKED_MASK ((uint64_t)1 << 8)
/* Reads each row's k most likely tokens (rudder_step.candidate_ids, candidate_logp) and writes a delta for each
 * (rudder_contribution.candidate_delta) instead of a logit delta over the whole vocabulary. */
#define RUDDER_CAP_CANDIDATES ((uint64_t)1 << 9)
/* Never reads rudder_step.x0_logits: the host passes NULL there and skips the log-softmax over the vocabulary that
 * input costs (candidate_ids and candidate_logp, which the host computes itself, are still given). */
#define RUDDER_CAP_IGNORES_X0 ((uint64_t)1 << 10)
/* ABI 1.3: takes part in the COMMIT phase (accepts or rejects the tokens the host proposes to commit). Needs
 * RUDDER_CAP_HARD_CONSTRAINT and RUDDER_CAP_PACKED_MASK: a descriptor with abi_minor >= 3 that declares COMMIT without
 * both is refused when the library is loaded. Ignored from a descriptor with abi_minor < 3 (the bit meant nothing
 * there); a host run with RUDDER_CONTROL_FORMS=dense refuses to create a controller that declares it. */
#define RUDDER_CAP_COMMIT ((uint64_t)1 << 11)

/* Bits of rudder_contribution.written: which outputs the controller actually wrote this call. */
#define RUDDER_WROTE_LOGIT_DELTA (1u << 0)
#define RUDDER_WROTE_GRAD (1u << 1)
#define RUDDER_WROTE_LOG_PROB (1u << 2)
#define RUDDER_WROTE_FIXED_TOKENS (1u << 3)
#define RUDDER_WROTE_FORBIDDEN (1u << 4)
/* ABI 1.2. token_bits holds forbidden tokens (FORBIDDEN_BITS) or the allowed tokens of each row (ALLOWED_BITS):
 * set exactly one of the two when writing token_bits; both is an error. */
#define RUDDER_WROTE_FORBIDDEN_BITS (1u << 5)
#define RUDDER_WROTE_ALLOWED_BITS (1u << 6)
#define RUDDER_WROTE_CANDIDATE_DELTA (1u << 7)
/* ABI 1.3, COMMIT phase: rudder_contribution.rejected was written. */
#define RUDDER_WROTE_REJECTED (1u << 8)

/* Whether the struct at `ptr` (one that starts with struct_size) covers `member` of `type`: read a member that a
 * later minor appended only if this is true. */
#define RUDDER_HAS_MEMBER(ptr, type, member) \
    ((ptr)->struct_size >= offsetof(type, member) + sizeof(((const type*)0)->member))

/* Log levels. Guarded because rudder.h defines the same type and values: both may be included. RUDDER_LOG_OFF is a
 * threshold only (rudder_set_log), never the level of a message. */
#ifndef RUDDER_LOG_LEVELS_DEFINED
#define RUDDER_LOG_LEVELS_DEFINED
typedef int32_t rudder_log_level;
enum { RUDDER_LOG_DEBUG = 0, RUDDER_LOG_INFO = 1, RUDDER_LOG_WARN = 2, RUDDER_LOG_ERROR = 3, RUDDER_LOG_OFF = 6 };
#endif

/* ---------------------------------------------------------------------------------------------------------
 * Host services that outlive a run. Owned by the host; valid from create() until the library is unloaded.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct rudder_host {
    uint32_t struct_size; /* sizeof(rudder_host) as the host compiled it */
    uint32_t abi_major, abi_minor;
    const char* host_name;    /* e.g. "rudder"; host-owned */
    const char* host_version; /* e.g. "0.1.0"; host-owned */
    /* Writes a message to the host's log. Any thread, any time. `msg` is copied before return. */
    void (*log)(const struct rudder_host* host, rudder_log_level level, const char* msg);
    /* Optional interfaces by string id ("rudder.something/1"); NULL if the host has none by that id.
     * Any thread. The returned table is host-owned and lives as long as the host. */
    const void* (*get_extension)(const struct rudder_host* host, const char* id);
} rudder_host;

/* ---------------------------------------------------------------------------------------------------------
 * One run: shapes, vocabulary and the run's services. Passed to begin(); host-owned; every pointer in it stays
 * valid until the next begin() on the same instance or destroy(). Services take `run_ctx` as first argument
 * and may be called only from the thread that is inside a callback of this instance.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct rudder_run_info {
    uint32_t struct_size;
    rudder_family family;
    int64_t batch_size;  /* B: sequences denoised together */
    int64_t seq_len;     /* L: positions per sequence (the recipe's max_length) */
    int64_t vocab_size;  /* V */
    int64_t embed_dim;   /* D for the continuous family, 0 for discrete */
    int64_t pad_id;      /* padding token: the text ends at the first pad */
    int64_t mask_id;     /* discrete family's absorbing token; -1 for continuous */
    int64_t unk_id;      /* unknown-word token, -1 if none */
    int32_t total_steps; /* reverse steps the sampler will take */
    DLDevice device;     /* where every tensor this controller sees lives: the run's device if the controller
                            declares RUDDER_CAP_ANY_DEVICE, otherwise the CPU */
    void* run_ctx;       /* opaque; pass back to the services below */

    /* Splits `text` into token ids. Writes at most `capacity` ids to `out_ids` and the full count to
     * `*n_ids`; returns RUDDER_ERR_BUFFER_TOO_SMALL if it did not fit (call again with *n_ids). */
    rudder_status (*tokenize)(void* run_ctx, const char* text, int64_t* out_ids, int64_t capacity, int64_t* n_ids);
    /* Joins ids into text (stops at the first pad). Writes a NUL-terminated string of at most `capacity`
     * bytes and its full length without NUL to `*n_bytes`; RUDDER_ERR_BUFFER_TOO_SMALL if it did not fit. */
    rudder_status (*detokenize)(void* run_ctx, const int64_t* ids, int64_t n_ids, char* out, size_t capacity,
                                size_t* n_bytes);
    /* The text of one token, or NULL if out of range. Host-owned, valid as long as this run info. */
    const char* (*token_text)(void* run_ctx, int64_t id);
    /* Re-entrant denoiser call, valid only inside step() in the PREDICT phase: evaluates the model on the
     * current step's input and time under `n_conditions` conditionings in one batched forward. A condition is
     * text the model was trained to condition on ("" = unconditional). `*out_logits` receives a host-owned
     * float32 tensor [n_conditions, B, L, V] of log-probabilities, valid until step() returns.
     * RUDDER_ERR_UNSUPPORTED if the model takes no conditioning. */
    rudder_status (*denoise)(void* run_ctx, const char* const* conditions, int32_t n_conditions,
                             const DLTensor** out_logits);

    /* ABI 1.1: read these only if struct_size covers them (a 1.0 host does not have them). */
    /* The run's model directory, absolute; "" when the model is not a directory. Host-owned. A controller that
     * ships data trained for a model (e.g. a noisy classifier) finds or checks it through this. */
    const char* model_dir;
    /* Continuous family: the model's token embedding table, float32 [V, D], the space `latent` lives in.
     * NULL for the discrete family. Host-owned, read-only, on rudder_run_info.device. */
    const DLTensor* embedding;
    /* Resolves a model the way a recipe's "model" is resolved: a bundled name (e.g. "ewt-tagger") through the
     * host's model search path, or a path relative to the recipe. Writes the absolute directory as a
     * NUL-terminated string of at most `capacity` bytes and its length without NUL to `*n_bytes`;
     * RUDDER_ERR_BUFFER_TOO_SMALL if it did not fit, RUDDER_ERR_INVALID_ARGUMENT if there is no such model (the
     * host's message, naming what it searched, is in the run's error report). */
    rudder_status (*find_model)(void* run_ctx, const char* name, char* out, size_t capacity, size_t* n_bytes);

    /* ABI 1.2: read only if struct_size covers it (a 1.1 host, or RUDDER_CONTROL_FORMS=dense, has not). */
    /* k: the candidates per row this controller gets at each PREDICT step (rudder_step.candidate_ids [N, k]). Set
     * only for a controller that declares RUDDER_CAP_CANDIDATES; 0 when the host offers none (then candidate_ids
     * and candidate_delta are NULL). Fixed for the run. */
    int32_t candidates;
    /* The ABI 1.2 forms this host gives the controller for the run: the controller's declared RUDDER_CAP_ROWS,
     * PACKED_MASK, CANDIDATES and IGNORES_X0 bits that it honours. A row-shaped buffer is [N, ...] exactly when
     * RUDDER_CAP_ROWS is set here (and the step has rows); x0_logits is NULL when RUDDER_CAP_IGNORES_X0 is. A 1.3
     * host also sets RUDDER_CAP_COMMIT here for a controller it will call in the COMMIT phase. */
    uint64_t forms;

    /* ABI 1.3: read only if struct_size covers them (a 1.2 host has not). The run's text as pieces of its tokens, for a
     * controller that follows the text through an automaton (docs/abi.md, "Token pieces"): decoding ids up to the
     * first pad writes, for each token v in turn, piece(k, v), k the kind the token before it left (0 at the start of
     * the text), and v leaves kind kind_after(v). `piece_kinds` kinds (a byte-level BPE has 1; a word-level decoder,
     * which puts spaces between words, 3); 0, and token_pieces NULL, when the tokenizer's decoding is not such a
     * concatenation. */
    int32_t piece_kinds;
    /* For kind `kind` in [0, piece_kinds): writes every token's piece into `bytes` (no NUL; at most `capacity`
     * bytes), piece v being bytes[offsets[v], offsets[v + 1]) (`offsets`: vocab_size + 1 entries), and each token's
     * kind after into `kind_after` (vocab_size entries; may be NULL); `*n_bytes` gets the bytes needed. Returns
     * RUDDER_ERR_BUFFER_TOO_SMALL when they did not fit (offsets and kinds are written anyway: call again with
     * *n_bytes). Any call of the controller's, from its thread; the same answer for the whole run. */
    rudder_status (*token_pieces)(void* run_ctx, int32_t kind, char* bytes, size_t capacity, size_t* n_bytes,
                                  int64_t* offsets, int32_t* kind_after);
} rudder_run_info;

/* ---------------------------------------------------------------------------------------------------------
 * One step's inputs. Host-owned, read-only, valid only during the step() call. Tensors are compact
 * (row-major, strides NULL) and live on rudder_run_info.device. A tensor the family has none of is NULL.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct rudder_step {
    uint32_t struct_size;
    rudder_phase phase;
    int32_t step; /* 0 .. total_steps-1, counting reverse steps taken so far */
    int32_t total_steps;
    int32_t guide_iter;        /* GUIDE phase: 0 .. K-1; PREDICT phase: 0; COMMIT: the round, 0 at a step's first */
    double t;                  /* diffusion time of the inputs, in (0, 1]; 1 = pure noise */
    double t_next;             /* time the sampler is stepping to */
    const DLTensor* latent;    /* continuous: float32 [B, L, D] (x_t, or the guided iterate in GUIDE) */
    const DLTensor* x0_logits; /* PREDICT: float32 [B, L, V] log-probabilities of the clean token ([N, V] at the
                                  step's rows with RUDDER_CAP_ROWS); NULL with RUDDER_CAP_IGNORES_X0; GUIDE and
                                  COMMIT: NULL */
    const DLTensor* tokens;    /* int64 [B, L]: discrete: the current state (mask_id where masked);
                                  continuous: argmax of x0_logits, the current best guess;
                                  COMMIT: the state before the proposed commits (not yet committed: mask_id;
                                  continuous: the rounding's token, and masked says which) */
    const DLTensor* masked;    /* discrete: uint8 [B, L], 1 where the position is still masked; continuous:
                                  NULL, but in COMMIT 1 where the rounding is not committed yet */

    /* ABI 1.2: read only if struct_size covers them (a 1.1 host, or RUDDER_CONTROL_FORMS=dense, has not). Same
     * ownership, lifetime and device as the members above; the thread is the one inside step(). */
    /* PREDICT, every 1.2 controller: int64 [N], the step's rows: the positions it samples, as flat indices b * L + i,
     * ascending (discrete: the positions that unmask this step, N may be 0; continuous: all B * L). GUIDE: NULL.
     * With RUDDER_CAP_ROWS, x0_logits is [N, V] (row r is position rows[r]) and so are the row-shaped outputs.
     * A RUDDER_CAP_COMMIT controller treats as still free, in PREDICT, the masked positions and the rows (under
     * uniform noise every position is a row and `masked` is all zero): what it allows at a row must leave a valid
     * completion given the committed positions only. COMMIT: the rows whose proposals are still to be committed. */
    const DLTensor* rows;
    /* PREDICT, RUDDER_CAP_CANDIDATES and rudder_run_info.candidates = k > 0: int64 [N, k], each row's k most likely
     * tokens under x0_logits, most likely first; and float32 [N, k], their log-probabilities. NULL otherwise. */
    const DLTensor* candidate_ids;
    const DLTensor* candidate_logp;

    /* ABI 1.3: read only if struct_size covers it (a 1.2 host, a controller built for 1.2, or RUDDER_CONTROL_FORMS=
     * dense has not). Same ownership, lifetime and device as the members above. */
    /* COMMIT: int64 [N], the token the host drew for each row (row r is position rows[r]), one the controller's last
     * PREDICT output, or its last COMMIT token_bits, allowed there. NULL in the other phases. */
    const DLTensor* proposed;
} rudder_step;

/* ---------------------------------------------------------------------------------------------------------
 * One step's outputs. Host-allocated and initialised; NULL for outputs the controller did not declare or the
 * phase does not use (a struct_size of 1.1 has no 1.2 members at all). Write in place (never replace `data`,
 * shapes or dtypes) and set the `written` bits. The host checks shapes, dtypes and that every written value is
 * finite; a violation fails the run with an error naming the controller.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct rudder_contribution {
    uint32_t struct_size;
    uint32_t written;       /* RUDDER_WROTE_* bits, set by the controller; host sets 0 before the call */
    DLTensor* logit_delta;  /* float32 [B, L, V] ([N, V] with RUDDER_CAP_ROWS), zero-filled: added (times the
                               weight) to x0 log-probs */
    DLTensor* grad;         /* float32, zero-filled. GUIDE: [B, L, D] = d log p(c|x) / dx.
                               discrete PREDICT: [B, L, V] ([N, V] with RUDDER_CAP_ROWS) =
                               d log p(c) / d onehot(tokens); the host turns it into a logit delta by
                               first-order Taylor: g[v] - g[current token] */
    DLTensor* log_prob;     /* float32 [B], zero-filled: log p(c | x) if the controller knows it. GUIDE: a recipe's
                               guidance.particles weighs and picks sequences by it (then the host may copy rows of
                               the batch between steps: keep no per-row state across steps) */
    DLTensor* fixed_tokens; /* int64 [B, L], filled with -1: a token id here fixes that position */
    DLTensor* forbidden;    /* uint8 [B, L, V], zero-filled: 1 forbids that token at that position.
                               [N, V] with RUDDER_CAP_ROWS; NULL with RUDDER_CAP_PACKED_MASK (see token_bits) */

    /* ABI 1.2: read only if struct_size covers them. Like the outputs above: host-owned, allocated and initialised
     * by the host, on rudder_run_info.device, valid during the step() call, written from the thread inside it. */
    /* HARD_CONSTRAINT + PACKED_MASK, PREDICT: uint32 [B, L, W] ([N, W] with RUDDER_CAP_ROWS); COMMIT (1.3): [N, W]
     * whatever the forms. W = ceil(V / 32), zero-filled; token v of a row is bit (v % 32) of word v / 32. Set
     * RUDDER_WROTE_FORBIDDEN_BITS (set bits are forbidden tokens) or RUDDER_WROTE_ALLOWED_BITS (set bits are the row's
     * only allowed tokens: a row with no bit set then allows nothing, a conflict the host reports). A bit at or past V
     * is an error. */
    DLTensor* token_bits;
    /* CANDIDATES, PREDICT, k > 0: float32 [N, k], zero-filled: added (times the weight) to the log-probability of
     * candidate_ids[r, j] at row r. Set RUDDER_WROTE_CANDIDATE_DELTA. NULL when the step offers no candidates. */
    DLTensor* candidate_delta;

    /* ABI 1.3: read only if struct_size covers it. Host-owned, allocated and initialised by the host, on
     * rudder_run_info.device, valid during the step() call, written from the thread inside it. */
    /* COMMIT: uint8 [N], zero-filled: 1 = the controller cannot accept row r's proposed token together with the
     * proposals it accepts (any other value is an error). Set RUDDER_WROTE_REJECTED. In the same call, token_bits
     * [N, W] (FORBIDDEN_BITS or ALLOWED_BITS, as in PREDICT) says what each row allows given the rows it accepts
     * committed: the host draws a rejected row again within it (rejecting a row without writing them is an error).
     * NULL in the other phases. */
    DLTensor* rejected;
} rudder_contribution;

/* A finished sample, for evaluate(). Host-owned, valid during the call. */
typedef struct rudder_sample {
    uint32_t struct_size;
    int64_t index;         /* sample number within the run */
    const int64_t* tokens; /* seq_len ids, on the CPU */
    int64_t seq_len;
    int64_t n_tokens; /* tokens before the first pad */
    const char* text; /* detokenized tokens[0 .. n_tokens) */
} rudder_sample;

/* A controller's verdict on a sample. Host-allocated; initialised to {satisfied = -1, score = NaN}. */
typedef struct rudder_verdict {
    uint32_t struct_size;
    int32_t satisfied;  /* 1 met, 0 not met, -1 the controller cannot tell */
    double score;       /* a controller-defined score (e.g. F1), NaN if none */
    const char* detail; /* optional JSON object text; plugin-owned, valid until the next call on this instance */
} rudder_verdict;

/* ---------------------------------------------------------------------------------------------------------
 * A controller type. Plugin-owned, immutable, valid until the library is unloaded.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct rudder_controller_desc {
    uint32_t struct_size;
    uint32_t abi_major, abi_minor;  /* the ABI this controller was built against */
    const char* id;                 /* unique name used by recipes, [a-z0-9_]+, e.g. "length" */
    const char* version;            /* semantic version of the controller, e.g. "1.2.0" */
    const char* description;        /* one line for `rudder plugins` */
    const char* params_schema_json; /* JSON Schema of the params object (documentation; may be NULL) */
    uint64_t capabilities;          /* RUDDER_CAP_* bits */

    /* Makes an instance from the params object (JSON text, host-owned, valid during the call). Checks the
     * params fully: a bad value is reported here, before any run. On success stores the instance in *self.
     * On failure returns non-OK and last_error(NULL) on the same thread gives the message. Any thread. */
    rudder_status (*create)(const rudder_host* host, const char* params_json, void** self);
    /* Frees the instance. Any thread; never concurrently with another call on the same instance. */
    void (*destroy)(void* self);
    /* Starts a run (may be called again for later runs). `run` is valid until the next begin() or destroy().
     * Return RUDDER_ERR_UNSUPPORTED for a family or shape the controller cannot handle. */
    rudder_status (*begin)(void* self, const rudder_run_info* run);
    /* Contributes to one reverse step (see rudder_step and rudder_contribution). */
    rudder_status (*step)(void* self, const rudder_step* step, rudder_contribution* out);
    /* Judges one finished sample. May be NULL if the controller lacks RUDDER_CAP_EVALUATE. */
    rudder_status (*evaluate)(void* self, const rudder_sample* sample, rudder_verdict* verdict);
    /* The message of the last failed call on `self` (or of the last failed create() on this thread when
     * self is NULL). Plugin-owned; valid until the next call on the same instance/thread. Never NULL. */
    const char* (*last_error)(void* self);
} rudder_controller_desc;

/* What a library offers. Plugin-owned, immutable, valid until the library is unloaded. */
typedef struct rudder_plugin {
    uint32_t struct_size;
    uint32_t abi_major, abi_minor; /* the ABI the library was built against */
    const char* name;              /* library name for messages, e.g. "rudder-length" */
    uint32_t controller_count;
    const rudder_controller_desc* const* controllers; /* controller_count entries */
} rudder_plugin;

/* The entry point. Called once per load, from the loading thread, with the host's ABI version. Return NULL to
 * refuse (e.g. another major), or a descriptor built for that version. */
typedef const rudder_plugin* (*rudder_plugin_entry_fn)(uint32_t host_abi_major, uint32_t host_abi_minor);

#ifdef __cplusplus
}
#endif

#endif /* RUDDER_PLUGIN_H */
