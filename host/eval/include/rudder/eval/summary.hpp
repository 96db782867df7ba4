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

// The answers of a prompted task (targets "data_to_text" or "text_to_data": the sample's text after the prompt).
struct PromptedScores {
    std::string task;  // "data_to_text" or "text_to_data"
    int64_t answers = 0;
    // data_to_text: corpus BLEU-4 of the descriptions against every reference of their meaning representation (the
    // E2E challenge's way: MT-Eval's tokenization, lower case, closest reference length); the meaning
    // representations' fields a description realises (meaning::realised), and the descriptions that realise all.
    std::optional<double> bleu;
    int64_t fields = 0, fields_realised = 0, all_realised = 0;
    // text_to_data: answers that parse as a JSON object, that equal the meaning representation's record (the same
    // keys and values, in any order), and its fields given the right value; keys the representation does not have.
    int64_t valid_json = 0, exact = 0, slots = 0, slots_right = 0, extra_slots = 0;
    static double share(int64_t n, int64_t of) { return of ? static_cast<double>(n) / static_cast<double>(of) : 0.0; }
};

struct TaskResult {
    std::string name, family;
    int64_t targets = 0, samples = 0;
    std::vector<std::string> order;  // control labels in recipe order
    std::map<std::string, ControlTally> controls;
    int64_t all_satisfied = 0;               // samples every judging control called satisfied (shown for compositions)
    std::optional<double> bleu;              // infill: corpus BLEU-4 of the generated middles against the references'
    std::optional<PromptedScores> prompted;  // data_to_text, text_to_data
    double all_success() const {
        return samples ? static_cast<double>(all_satisfied) / static_cast<double>(samples) : 0.0;
    }
    std::optional<double> perplexity;  // none when the texts are not language (text_to_data's JSON records)
    double seconds = 0.0;              // generation only (model and plugin loading excluded)
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
