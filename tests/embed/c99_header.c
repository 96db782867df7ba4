/* The embedding API header is the contract for C applications: this program is compiled with -std=c99 -pedantic
 * -Werror -Wall -Wextra, includes rudder.h before the plugin ABI header (c99_header_other_order.c includes them the
 * other way round), pins what compiled applications rely on within API major 1, and calls the library through
 * the header the way a C program does. */
#include <rudder/rudder.h>
#include <rudder/rudder_plugin.h>

#include <stdio.h>
#include <string.h>

#define STATIC_CHECK(name, condition) typedef char static_check_##name[(condition) ? 1 : -1]

STATIC_CHECK(api_major, RUDDER_API_VERSION_MAJOR == 1);
STATIC_CHECK(shared_status_values, RUDDER_OK == 0 && RUDDER_ERR_INVALID_ARGUMENT == 1 && RUDDER_ERR_INTERNAL == 4 &&
                                       RUDDER_ERR_CANCELLED == 5 && RUDDER_ERR_OUT_OF_MEMORY == 6);
STATIC_CHECK(embedding_status_values,
             RUDDER_ERR_INVALID_RECIPE == 100 && RUDDER_ERR_GENERATION_FAILED == 101 && RUDDER_ERR_BUSY == 102);
STATIC_CHECK(log_levels, RUDDER_LOG_DEBUG == 0 && RUDDER_LOG_WARN == 2 && RUDDER_LOG_ERROR == 3 && RUDDER_LOG_OFF == 6);
STATIC_CHECK(log_levels_old_spelling, RUDDER_LOG_LEVEL_DEBUG == RUDDER_LOG_DEBUG &&
                                          RUDDER_LOG_LEVEL_WARN == RUDDER_LOG_WARN &&
                                          RUDDER_LOG_LEVEL_OFF == RUDDER_LOG_OFF);
STATIC_CHECK(options_size_first, offsetof(rudder_options, struct_size) == 0);
STATIC_CHECK(generate_options_size_first, offsetof(rudder_generate_options, struct_size) == 0);
STATIC_CHECK(progress_size_first, offsetof(rudder_progress, struct_size) == 0);
STATIC_CHECK(verdict_info_size_first, offsetof(rudder_verdict_info, struct_size) == 0);

int other_order_status_ok(void); /* c99_header_other_order.c */

static int failures = 0;
#define EXPECT(condition)                                                           \
    do {                                                                            \
        if (!(condition)) {                                                         \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
            ++failures;                                                             \
        }                                                                           \
    } while (0)

int main(void) {
    rudder_options options = rudder_default_options();
    rudder_generate_options generate_options = rudder_default_generate_options();
    rudder_generator* gen = (rudder_generator*)&options; /* a non-NULL value the failed call must reset */
    rudder_results* res = NULL;

    EXPECT(other_order_status_ok());
    EXPECT(strcmp(rudder_version(), "") != 0);
    EXPECT(rudder_api_version_major() == RUDDER_API_VERSION_MAJOR);
    EXPECT(options.struct_size == sizeof(rudder_options) && options.model == NULL && options.plugin_path == NULL);
    EXPECT(generate_options.struct_size == sizeof(rudder_generate_options) && generate_options.samples == 0 &&
           generate_options.on_progress == NULL);
    EXPECT(strcmp(rudder_status_name(RUDDER_ERR_INVALID_RECIPE), "invalid recipe") == 0);

    /* Errors are statuses with messages, even for nonsense input. */
    EXPECT(rudder_generator_create("{\"model\": 5}", &options, &gen) == RUDDER_ERR_INVALID_RECIPE);
    EXPECT(gen == NULL);
    EXPECT(strstr(rudder_last_error(), "/model") != NULL);
    EXPECT(rudder_generator_create(NULL, NULL, &gen) == RUDDER_ERR_INVALID_ARGUMENT);
    EXPECT(rudder_generate(NULL, &generate_options, &res) == RUDDER_ERR_INVALID_ARGUMENT && res == NULL);
    EXPECT(rudder_results_count(NULL) == 0 && rudder_results_text(NULL, 0) == NULL);
    EXPECT(rudder_generator_keep_partial(NULL, 1) == RUDDER_ERR_INVALID_ARGUMENT);
    rudder_generator_free(NULL);
    rudder_results_free(NULL);

    printf("rudder %s, C API %u.%u: %s\n", rudder_version(), rudder_api_version_major(), rudder_api_version_minor(),
           failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
