// `rudder eval SUITE`: runs a suite of control tasks over held-out targets and reports, per task, each control's
// success, the teacher's perplexity of the texts and the seconds per sample (format in docs/eval.md).
#pragma once

#include <cstdint>
#include <string>

namespace rudder::cli {

struct EvalOptions {
    std::string suite;       // the suite's JSON file
    std::string out;         // folder for results.json, results.md and the samples; empty = <suite stem>-results
    int64_t targets = 0;     // > 0: at most this many targets per task (a quick run); 0 = the suite's count
    std::string only;        // run only the tasks whose name contains this
    int threads = 0;         // LibTorch intra-op threads; 0 = LibTorch's default
    bool quiet = false;
};

// Returns the exit code; throws for errors the CLI reports (bad suite, missing files, failed runs).
int run_eval(const EvalOptions& options);

}  // namespace rudder::cli
