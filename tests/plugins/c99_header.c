/* The plugin ABI header must be plain C99: this file is compiled with -std=c99 -pedantic -Werror -Wall -Wextra.
 * Beyond compiling, it pins what plugins compiled against this header rely on forever within major 1: every
 * versioned struct starts with struct_size, enum values and capability bits never change. */
#include <rudder/rudder_plugin.h>

#include <stdio.h>

/* C99 has no _Static_assert: a negative array size is the classic compile-time check. */
#define STATIC_CHECK(name, condition) typedef char static_check_##name[(condition) ? 1 : -1]

STATIC_CHECK(host_size_first, offsetof(rudder_host, struct_size) == 0);
STATIC_CHECK(run_info_size_first, offsetof(rudder_run_info, struct_size) == 0);
STATIC_CHECK(step_size_first, offsetof(rudder_step, struct_size) == 0);
STATIC_CHECK(contribution_size_first, offsetof(rudder_contribution, struct_size) == 0);
STATIC_CHECK(sample_size_first, offsetof(rudder_sample, struct_size) == 0);
STATIC_CHECK(verdict_size_first, offsetof(rudder_verdict, struct_size) == 0);
STATIC_CHECK(desc_size_first, offsetof(rudder_controller_desc, struct_size) == 0);
STATIC_CHECK(plugin_size_first, offsetof(rudder_plugin, struct_size) == 0);
/* The version fields follow struct_size, so a host can read them before it knows the rest of the layout. */
STATIC_CHECK(desc_major_second, offsetof(rudder_controller_desc, abi_major) == 4);
STATIC_CHECK(plugin_major_second, offsetof(rudder_plugin, abi_major) == 4);
STATIC_CHECK(host_major_second, offsetof(rudder_host, abi_major) == 4);

STATIC_CHECK(abi_major, RUDDER_ABI_MAJOR == 1);
STATIC_CHECK(status_values, RUDDER_OK == 0 && RUDDER_ERR_INVALID_ARGUMENT == 1 && RUDDER_ERR_UNSUPPORTED == 2 &&
                                RUDDER_ERR_BUFFER_TOO_SMALL == 3 && RUDDER_ERR_INTERNAL == 4 &&
                                RUDDER_ERR_CANCELLED == 5 && RUDDER_ERR_OUT_OF_MEMORY == 6);
STATIC_CHECK(family_values, RUDDER_FAMILY_CONTINUOUS == 1 && RUDDER_FAMILY_DISCRETE == 2);
STATIC_CHECK(phase_values, RUDDER_PHASE_PREDICT == 1 && RUDDER_PHASE_GUIDE == 2);
STATIC_CHECK(log_values,
             RUDDER_LOG_DEBUG == 0 && RUDDER_LOG_INFO == 1 && RUDDER_LOG_WARN == 2 && RUDDER_LOG_ERROR == 3);
STATIC_CHECK(capability_bits, RUDDER_CAP_LOGIT_DELTA == 1 && RUDDER_CAP_GRADIENT == 2 &&
                                  RUDDER_CAP_HARD_CONSTRAINT == 4 && RUDDER_CAP_NEEDS_FRESH_LOGITS == 8 &&
                                  RUDDER_CAP_EVALUATE == 16 && RUDDER_CAP_THREAD_SAFE == 32 &&
                                  RUDDER_CAP_ANY_DEVICE == 64);
STATIC_CHECK(written_bits, RUDDER_WROTE_LOGIT_DELTA == 1 && RUDDER_WROTE_GRAD == 2 && RUDDER_WROTE_LOG_PROB == 4 &&
                               RUDDER_WROTE_FIXED_TOKENS == 8 && RUDDER_WROTE_FORBIDDEN == 16);
STATIC_CHECK(capabilities_are_64_bit, sizeof(((rudder_controller_desc*)0)->capabilities) == 8);
/* ABI 1.2: the next bits, and members appended after every 1.1 member. */
STATIC_CHECK(abi_minor, RUDDER_ABI_MINOR >= 2);
STATIC_CHECK(capability_bits_1_2, RUDDER_CAP_ROWS == 128 && RUDDER_CAP_PACKED_MASK == 256 &&
                                      RUDDER_CAP_CANDIDATES == 512 && RUDDER_CAP_IGNORES_X0 == 1024);
STATIC_CHECK(written_bits_1_2, RUDDER_WROTE_FORBIDDEN_BITS == 32 && RUDDER_WROTE_ALLOWED_BITS == 64 &&
                                   RUDDER_WROTE_CANDIDATE_DELTA == 128);
STATIC_CHECK(run_info_appended, offsetof(rudder_run_info, candidates) > offsetof(rudder_run_info, find_model) &&
                                    offsetof(rudder_run_info, forms) > offsetof(rudder_run_info, candidates));
STATIC_CHECK(step_appended, offsetof(rudder_step, rows) > offsetof(rudder_step, masked) &&
                                offsetof(rudder_step, candidate_ids) > offsetof(rudder_step, rows) &&
                                offsetof(rudder_step, candidate_logp) > offsetof(rudder_step, candidate_ids));
STATIC_CHECK(contribution_appended,
             offsetof(rudder_contribution, token_bits) > offsetof(rudder_contribution, forbidden) &&
                 offsetof(rudder_contribution, candidate_delta) > offsetof(rudder_contribution, token_bits));
/* ABI 1.3: the COMMIT phase, its capability and written bits, and members appended after every 1.2 member. */
STATIC_CHECK(abi_minor_1_3, RUDDER_ABI_MINOR >= 3);
STATIC_CHECK(phase_commit, RUDDER_PHASE_COMMIT == 3);
STATIC_CHECK(capability_bits_1_3, RUDDER_CAP_COMMIT == 2048);
STATIC_CHECK(written_bits_1_3, RUDDER_WROTE_REJECTED == 256);
STATIC_CHECK(step_appended_1_3, offsetof(rudder_step, proposed) > offsetof(rudder_step, candidate_logp));
STATIC_CHECK(contribution_appended_1_3,
             offsetof(rudder_contribution, rejected) > offsetof(rudder_contribution, candidate_delta));

/* The entry point's type must match what RUDDER_PLUGIN_ENTRY_SYMBOL names. */
static const rudder_plugin* entry_with_the_right_type(uint32_t major, uint32_t minor) {
    (void)major;
    (void)minor;
    return NULL;
}

int main(void) {
    rudder_plugin_entry_fn entry = entry_with_the_right_type;
    rudder_step step_1_1;
    if (entry(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR) != NULL) return 1;
    /* RUDDER_HAS_MEMBER compiles as C99 and reads struct_size: a 1.1-sized step has no rows, a full one has. */
    step_1_1.struct_size = (uint32_t)offsetof(rudder_step, rows);
    if (RUDDER_HAS_MEMBER(&step_1_1, rudder_step, rows) || !RUDDER_HAS_MEMBER(&step_1_1, rudder_step, masked)) return 1;
    step_1_1.struct_size = (uint32_t)sizeof(rudder_step);
    if (!RUDDER_HAS_MEMBER(&step_1_1, rudder_step, candidate_logp)) return 1;
    /* A 1.2-sized step has the rows but no proposals. */
    step_1_1.struct_size = (uint32_t)offsetof(rudder_step, proposed);
    if (RUDDER_HAS_MEMBER(&step_1_1, rudder_step, proposed) ||
        !RUDDER_HAS_MEMBER(&step_1_1, rudder_step, candidate_logp))
        return 1;
    printf("rudder plugin ABI %d.%d, entry symbol %s\n", RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR,
           RUDDER_PLUGIN_ENTRY_SYMBOL);
    printf(
        "sizeof: rudder_host %u, rudder_run_info %u, rudder_step %u, rudder_contribution %u, rudder_sample %u, "
        "rudder_verdict %u, rudder_controller_desc %u, rudder_plugin %u\n",
        (unsigned)sizeof(rudder_host), (unsigned)sizeof(rudder_run_info), (unsigned)sizeof(rudder_step),
        (unsigned)sizeof(rudder_contribution), (unsigned)sizeof(rudder_sample), (unsigned)sizeof(rudder_verdict),
        (unsigned)sizeof(rudder_controller_desc), (unsigned)sizeof(rudder_plugin));
    return 0;
}
