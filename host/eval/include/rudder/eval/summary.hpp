// A task's result: every control's verdicts and scores over the task's samples, fluency, BLEU and cost; as
// results.json holds it and as the Markdown table of `rudder eval` shows it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rudder::eval {

struct ControlTally {
    int64_t judged = 0, satisfied = 0, scored = 0;
    double score_sum = 0.0;
    std::optional<double> success() const {
        return judged ? std::optional<double>(static_cast<double>(satisfied) / static_cast<double>(judged))
                      : std::nullopt;
    }
    std::optional<double> mean_score() const {
        return scored ? std::optional<double>(score_sum / static_cast<double>(scored)) : std::nullopt;
    }
};

struct TaskResult {
    std::string name, family;
    int64_t targets = 0, samples = 0;
    std::vector<std::string> order;  // control labels in recipe order
    std::map<std::string, ControlTally> controls;
    int64_t all_satisfied = 0;   // samples every judging control called satisfied (shown for compositions)
    std::optional<double> bleu;  // infill: corpus BLEU-4 of the generated middles against the references'
    double all_success() const {
        return samples ? static_cast<double>(all_satisfied) / static_cast<double>(samples) : 0.0;
    }
    double perplexity = 0.0;
    double seconds = 0.0;  // generation only (model and plugin loading excluded)
    double seconds_per_sample() const { return samples ? seconds / static_cast<double>(samples) : 0.0; }
    // The cost of control beside the time: network evaluations of one sequence, and (discrete) positions drawn,
    // each of which a candidate-scoring controller scores.
    int64_t denoised_sequences = 0, rows_drawn = 0;
    double per_sample(int64_t n) const { return samples ? static_cast<double>(n) / static_cast<double>(samples) : 0.0; }
};

// A task's entry of results.json.
nlohmann::json result_json(const TaskResult& r);

// The results as a Markdown table, a row per task (results.md, and what `rudder eval` prints).
std::string markdown(const std::vector<TaskResult>& results);

}  // namespace rudder::eval
