// The server's Prometheus metrics (prometheus-cpp's registry; GET /metrics writes them in its text format).
#pragma once

#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace rudder::serve {

// The counters a scrape of /metrics reads.
struct Metrics {
    prometheus::Registry registry;
    prometheus::Family<prometheus::Counter>& requests = prometheus::BuildCounter()
                                                            .Name("rudder_http_requests_total")
                                                            .Help("HTTP requests answered, by path and status")
                                                            .Register(registry);
    prometheus::Family<prometheus::Counter>& failures = prometheus::BuildCounter()
                                                            .Name("rudder_generation_failures_total")
                                                            .Help("Generations that did not finish, by cause")
                                                            .Register(registry);
    prometheus::Gauge& waiting = prometheus::BuildGauge()
                                     .Name("rudder_queue_length")
                                     .Help("Generations in line for a run, their recipe checked and loaded")
                                     .Register(registry)
                                     .Add({});
    prometheus::Gauge& preparing = prometheus::BuildGauge()
                                       .Name("rudder_generations_preparing")
                                       .Help("Generations admitted whose recipe is still being checked or loaded")
                                       .Register(registry)
                                       .Add({});
    prometheus::Gauge& running = prometheus::BuildGauge()
                                     .Name("rudder_generations_running")
                                     .Help("Generations running")
                                     .Register(registry)
                                     .Add({});
    prometheus::Counter& steps = prometheus::BuildCounter()
                                     .Name("rudder_reverse_steps_total")
                                     .Help("Reverse steps taken, all generations")
                                     .Register(registry)
                                     .Add({});
    prometheus::Counter& samples =
        prometheus::BuildCounter().Name("rudder_samples_total").Help("Samples generated").Register(registry).Add({});
    prometheus::Counter& runs = prometheus::BuildCounter()
                                    .Name("rudder_runs_total")
                                    .Help("Reverse loops run; one run may serve several requests")
                                    .Register(registry)
                                    .Add({});
    prometheus::Counter& loads = prometheus::BuildCounter()
                                     .Name("rudder_generator_loads_total")
                                     .Help("Generators built (a recipe's model and plugins loaded) rather than reused")
                                     .Register(registry)
                                     .Add({});
    prometheus::Counter& models_reused =
        prometheus::BuildCounter()
            .Name("rudder_models_reused_total")
            .Help("Generators built on the model of an idle generator of another recipe instead of loading it")
            .Register(registry)
            .Add({});
    prometheus::Counter& prompt_loads =
        prometheus::BuildCounter()
            .Name("rudder_prompt_tool_loads_total")
            .Help("A model's tokenizer and chat template read for the OpenAI routes (once per model while kept)")
            .Register(registry)
            .Add({});
    prometheus::Gauge& loading = prometheus::BuildGauge()
                                     .Name("rudder_generator_loads_in_progress")
                                     .Help("Generator loads not yet ended, those whose request has left included")
                                     .Register(registry)
                                     .Add({});
    prometheus::Gauge& connections = prometheus::BuildGauge()
                                         .Name("rudder_connections_open")
                                         .Help("Client connections open, each holding a thread")
                                         .Register(registry)
                                         .Add({});
    prometheus::Family<prometheus::Counter>& dropped =
        prometheus::BuildCounter()
            .Name("rudder_connections_dropped_total")
            .Help(
                "Connections the server ended: refused (over --max-connections) or too slow (a request's headers "
                "or body past its deadline)")
            .Register(registry);
    prometheus::Histogram& latency =
        prometheus::BuildHistogram()
            .Name("rudder_generation_seconds")
            .Help("Time from a generation's arrival to its last sample")
            .Register(registry)
            .Add({}, prometheus::Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});

    void answered(const std::string& path, int status) {
        requests.Add({{"path", path}, {"code", std::to_string(status)}}).Increment();
    }
    void failed(const std::string& cause) { failures.Add({{"cause", cause}}).Increment(); }
};

}  // namespace rudder::serve
