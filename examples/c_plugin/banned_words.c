/* banned_words: a Rudder controller in plain C99 with no dependency but rudder_plugin.h.
 *
 * Params: {"words": ["pub", "coffee"]}. Each word must be one token of the model's vocabulary. In every reverse
 * step the controller forbids those tokens at every position (a hard constraint, so it holds in every sample of
 * both diffusion families), and evaluate() reports whether a finished sample is free of them, with the number of
 * banned words found as its score.
 *
 * Threads: the message of a failed create() lives in one static buffer, so this controller does not declare
 * RUDDER_CAP_THREAD_SAFE and the host serialises every call into this library. (C11's _Thread_local would lift
 * that; the example stays C99.) */
#include <rudder/rudder_plugin.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 64
#define MAX_WORD_BYTES 64

typedef struct {
    char words[MAX_WORDS][MAX_WORD_BYTES]; /* from params */
    int n_words;
    int64_t ids[MAX_WORDS]; /* their token ids in the current run's vocabulary (set by begin) */
    char message[256];      /* last_error(self) */
} banned_words;

static char create_message[256] = ""; /* last_error(NULL): the last failed create() */

/* ----- params: a small strict reader for {"words": [string, ...]} ------------------------------------------- */

static const char* skip_space(const char* p) {
    while (isspace((unsigned char)*p)) ++p;
    return p;
}

/* Reads a JSON string at p (which points at the opening quote) into out; returns the position after it, or NULL. */
static const char* read_string(const char* p, char* out, size_t capacity) {
    size_t n = 0;
    if (*p != '"') return NULL;
    for (++p; *p != '"'; ++p) {
        char c = *p;
        if (c == '\0' || (unsigned char)c < 0x20) return NULL;
        if (c == '\\') {
            ++p;
            if (*p == '"' || *p == '\\' || *p == '/')
                c = *p;
            else
                return NULL; /* other escapes are not needed for vocabulary words */
        }
        if (n + 1 >= capacity) return NULL;
        out[n++] = c;
    }
    out[n] = '\0';
    return p + 1;
}

/* Returns NULL when the params are valid, else a message that names the JSON pointer inside params. */
static const char* parse_params(const char* json, banned_words* self) {
    char key[32];
    const char* p = skip_space(json != NULL ? json : "{}");
    if (*p++ != '{') return "params must be a JSON object";
    p = skip_space(p);
    if (*p == '}') return "/words: required (an array of words to forbid)";
    p = read_string(p, key, sizeof key);
    if (p == NULL || strcmp(key, "words") != 0) return "unknown key (allowed: 'words')";
    p = skip_space(p);
    if (*p++ != ':') return "params are not valid JSON";
    p = skip_space(p);
    if (*p++ != '[') return "/words: expected an array of words";
    for (p = skip_space(p); *p != ']'; p = skip_space(p)) {
        if (self->n_words == MAX_WORDS) return "/words: at most 64 words";
        p = read_string(p, self->words[self->n_words], MAX_WORD_BYTES);
        if (p == NULL) return "/words: expected words of at most 63 bytes, as JSON strings";
        ++self->n_words;
        p = skip_space(p);
        if (*p == ',')
            ++p;
        else if (*p != ']')
            return "/words: expected ',' or ']'";
    }
    p = skip_space(p + 1);
    if (*p++ != '}' || *skip_space(p) != '\0') return "only one key, 'words', is allowed";
    if (self->n_words == 0) return "/words: give at least one word";
    return NULL;
}

/* ----- the controller's callbacks --------------------------------------------------------------------------- */

static rudder_status bw_create(const rudder_host* host, const char* params_json, void** out) {
    banned_words* self = (banned_words*)calloc(1, sizeof(banned_words));
    const char* problem;
    (void)host;
    *out = NULL;
    if (self == NULL) {
        snprintf(create_message, sizeof create_message, "out of memory");
        return RUDDER_ERR_OUT_OF_MEMORY;
    }
    problem = parse_params(params_json, self);
    if (problem != NULL) {
        snprintf(create_message, sizeof create_message, "%s", problem);
        free(self);
        return RUDDER_ERR_INVALID_ARGUMENT;
    }
    *out = self;
    return RUDDER_OK;
}

static void bw_destroy(void* self) { free(self); }

/* Looks the words up in this run's vocabulary: a word must be exactly one known token. */
static rudder_status bw_begin(void* opaque, const rudder_run_info* run) {
    banned_words* self = (banned_words*)opaque;
    int k;
    for (k = 0; k < self->n_words; ++k) {
        int64_t ids[2];
        int64_t n = 0;
        const rudder_status status = run->tokenize(run->run_ctx, self->words[k], ids, 2, &n);
        if ((status != RUDDER_OK && status != RUDDER_ERR_BUFFER_TOO_SMALL) || n != 1 || ids[0] == run->unk_id) {
            snprintf(self->message, sizeof self->message, "/words/%d: '%s' is not one word of the model's vocabulary",
                     k, self->words[k]);
            return RUDDER_ERR_INVALID_ARGUMENT;
        }
        self->ids[k] = ids[0];
    }
    return RUDDER_OK;
}

/* PREDICT phase: forbidden is uint8 [B, L, V], zero-filled by the host; 1 forbids a token at a position. */
static rudder_status bw_step(void* opaque, const rudder_step* step, rudder_contribution* out) {
    const banned_words* self = (const banned_words*)opaque;
    int64_t positions, vocab, i;
    uint8_t* forbidden;
    int k;
    if (step->phase != RUDDER_PHASE_PREDICT || out->forbidden == NULL) return RUDDER_OK;
    positions = out->forbidden->shape[0] * out->forbidden->shape[1];
    vocab = out->forbidden->shape[2];
    forbidden = (uint8_t*)out->forbidden->data;
    for (i = 0; i < positions; ++i)
        for (k = 0; k < self->n_words; ++k) forbidden[i * vocab + self->ids[k]] = 1;
    out->written |= RUDDER_WROTE_FORBIDDEN;
    return RUDDER_OK;
}

static rudder_status bw_evaluate(void* opaque, const rudder_sample* sample, rudder_verdict* verdict) {
    const banned_words* self = (const banned_words*)opaque;
    int64_t i, found = 0;
    int k;
    for (i = 0; i < sample->n_tokens; ++i)
        for (k = 0; k < self->n_words; ++k) found += sample->tokens[i] == self->ids[k];
    verdict->satisfied = found == 0;
    verdict->score = (double)found;
    return RUDDER_OK;
}

static const char* bw_last_error(void* self) { return self != NULL ? ((banned_words*)self)->message : create_message; }

/* ----- what the library offers ------------------------------------------------------------------------------ */

static const rudder_controller_desc banned_words_desc = {
    sizeof(rudder_controller_desc),
    RUDDER_ABI_MAJOR,
    RUDDER_ABI_MINOR,
    "banned_words",
    "1.0.0",
    "forbids the given words everywhere (hard constraint)",
    "{\"type\": \"object\", \"properties\": {\"words\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}},"
    " \"required\": [\"words\"], \"additionalProperties\": false}",
    RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_EVALUATE,
    bw_create,
    bw_destroy,
    bw_begin,
    bw_step,
    bw_evaluate,
    bw_last_error};

static const rudder_controller_desc* const controllers[] = {&banned_words_desc};
static const rudder_plugin plugin = {
    sizeof(rudder_plugin), RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR, "banned-words", 1, controllers};

RUDDER_EXPORT const rudder_plugin* rudder_plugin_entry(uint32_t host_abi_major, uint32_t host_abi_minor) {
    (void)host_abi_minor; /* a newer minor only appends: this descriptor is valid for all of major 1 */
    return host_abi_major == RUDDER_ABI_MAJOR ? &plugin : NULL;
}
