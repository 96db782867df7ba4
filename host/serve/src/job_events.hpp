// What a run tells the requests it serves, one type per event: each of a streamed request's reverse steps, each
// sample, then the run's end or its failure. The request's thread turns them into its answer (a JSON body, the native
// stream's Server-Sent Events, OpenAI's chunks); each type's `name` is its SSE event name on the native stream.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "request.hpp"

namespace rudder::serve {

// A reverse step of a streamed request: the batch and step, and the current best text of each of its samples that
// the batch holds, from its sample `first` on.
struct StepEvent {
    static constexpr const char* name = "step";
    int64_t batch = 0, batches = 0;
    int64_t step = 0, steps = 0;
    double t = 1.0;  // as the schedule means it: 0.45, not 0.44999999999999996
    int64_t first = 0;
    std::vector<std::string> texts;
};

// The native stream's data of a step event: {"batch", "batches", "first", "step", "steps", "t", "texts"}.
inline nlohmann::json step_json(const StepEvent& s) {
    return {{"batch", s.batch}, {"batches", s.batches}, {"step", s.step},  {"steps", s.steps},
            {"t", s.t},         {"first", s.first},     {"texts", s.texts}};
}

// A finished sample: sample_json's object, its "index" the request's own.
struct SampleEvent {
    static constexpr const char* name = "sample";
    nlohmann::json sample;
};

// The run is done and every sample delivered: the run's description ({"seed", "samples", "requests", "first"}).
struct DoneEvent {
    static constexpr const char* name = "done";
    nlohmann::json run;
};

// The run failed, or its request is refused after all: the status to answer (500 unless the request is to blame),
// the message and, for the request's problems, their pointers.
struct ErrorEvent {
    static constexpr const char* name = "error";
    RequestError error;
};

using JobEvent = std::variant<StepEvent, SampleEvent, DoneEvent, ErrorEvent>;

}  // namespace rudder::serve
