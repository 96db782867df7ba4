/* c_host: generate text from a recipe with Rudder's C embedding API, printing progress and each sample with its
 * controllers' verdicts. Usage: rudder_c_host RECIPE.json [SAMPLES] */
#include <rudder/rudder.h>

#include <stdio.h>
#include <stdlib.h>

/* After every reverse step: a progress line with the first sample's current best guess. Return 0 to go on. */
static int32_t on_step(const rudder_progress* p, void* user_data) {
    (void)user_data;
    if (p->step % 25 == 0 || p->step == p->steps)
        fprintf(stderr, "[batch %lld/%lld] step %lld/%lld t=%.2f  %s\n", (long long)p->batch + 1, (long long)p->batches,
                (long long)p->step, (long long)p->steps, p->t, p->n_texts > 0 ? p->texts[0] : "");
    return 0;
}

int main(int argc, char** argv) {
    rudder_generator* gen = NULL;
    rudder_results* res = NULL;
    rudder_generate_options options = rudder_default_generate_options();
    size_t i, k;

    if (argc < 2) {
        fprintf(stderr, "usage: %s RECIPE.json [SAMPLES]\n", argv[0]);
        return 2;
    }
    rudder_keep_freed_memory_in_process(); /* faster generation; a process-wide choice, so the app makes it */
    if (rudder_generator_create_from_file(argv[1], NULL, &gen) != RUDDER_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], rudder_last_error()); /* every problem, with its JSON pointer */
        return 2;
    }
    options.samples = argc > 2 ? atoll(argv[2]) : 0; /* 0 keeps the recipe's */
    options.on_progress = on_step;
    options.progress_text = 1;
    if (rudder_generate(gen, &options, &res) != RUDDER_OK) {
        fprintf(stderr, "generation failed: %s\n", rudder_generator_last_error(gen));
        rudder_generator_free(gen);
        return 1;
    }
    for (i = 0; i < rudder_results_count(res); ++i) {
        printf("%zu. %s\n", i + 1, rudder_results_text(res, i));
        for (k = 0; k < rudder_results_verdict_count(res); ++k) {
            const rudder_verdict_info* v = rudder_results_verdict(res, i, k);
            printf("     %s: %s\n", v->label, v->satisfied == 1 ? "ok" : v->satisfied == 0 ? "NOT MET" : "n/a");
        }
    }
    rudder_results_free(res);
    rudder_generator_free(gen);
    return 0;
}
