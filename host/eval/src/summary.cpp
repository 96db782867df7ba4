// Tallying a task's samples, and the two forms of its result (results.json, the Markdown table).
#include <rudder/eval/summary.hpp>

#include <cstdio>
#include <sstream>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/text/metrics.hpp>

#include "summarize.hpp"

namespace rudder::eval {

using json = nlohmann::json;

json result_json(const TaskResult& r) {
    json controls = json::object();
    for (const auto& label : r.order) {
        const ControlTally& t = r.controls.at(label);
        controls[label] = {{"judged", t.judged},
                           {"satisfied", t.satisfied},
                           {"success", t.success() ? json(*t.success()) : json(nullptr)},
                           {"mean_score", t.mean_score() ? json(*t.mean_score()) : json(nullptr)}};
    }
    return {{"task", r.name},
            {"family", r.family},
            {"targets", r.targets},
            {"samples", r.samples},
            {"controls", controls},
            {"all_satisfied", r.order.size() > 1 ? json(r.all_success()) : json(nullptr)},
            {"bleu", r.bleu ? json(*r.bleu) : json(nullptr)},
            {"teacher_perplexity", r.perplexity},
            {"seconds_per_sample", r.seconds_per_sample()},
            {"network_evaluations_per_sample", r.per_sample(r.denoised_sequences)},
            {"rows_drawn_per_sample", r.family == "discrete" ? json(r.per_sample(r.rows_drawn)) : json(nullptr)}};
}

std::string markdown(const std::vector<TaskResult>& results) {
    std::ostringstream md;
    md << "| task | family | targets | control: success (satisfied) / mean score | teacher ppl | s/sample | "
          "network evals/sample |\n"
       << "| --- | --- | ---: | --- | ---: | ---: | ---: |\n";
    char buf[160];
    for (const auto& r : results) {
        std::string controls;
        for (const auto& label : r.order) {
            const ControlTally& t = r.controls.at(label);
            std::snprintf(buf, sizeof buf, "%s%s: %.1f%% / %.3f", controls.empty() ? "" : "; ", label.c_str(),
                          100.0 * t.success().value_or(0.0), t.mean_score().value_or(0.0));
            controls += buf;
        }
        if (r.order.size() > 1) {
            std::snprintf(buf, sizeof buf, "; **all: %.1f%%**", 100.0 * r.all_success());
            controls += buf;
        }
        if (r.bleu) {
            std::snprintf(buf, sizeof buf, "; BLEU-4 of the middle: %.2f", 100.0 * *r.bleu);
            controls += buf;
        }
        std::snprintf(buf, sizeof buf, " | %.2f | %.2f | %.1f |", r.perplexity, r.seconds_per_sample(),
                      r.per_sample(r.denoised_sequences));
        md << "| " << r.name << " | " << r.family << " | " << r.targets << " | " << (controls.empty() ? "—" : controls)
           << buf << "\n";
    }
    return md.str();
}

TaskResult summarize(const std::string& name, const std::vector<TargetOutcome>& outcomes, const TeacherModel& teacher) {
    TaskResult result;
    result.name = name;
    result.targets = static_cast<int64_t>(outcomes.size());
    std::vector<std::string> texts;
    std::vector<std::vector<std::string>> middles, reference_middles;  // infill
    for (const auto& o : outcomes) {
        result.family = o.family;
        result.seconds += o.seconds;
        result.denoised_sequences += o.denoised_sequences;
        result.rows_drawn += o.rows_drawn;
        for (const auto& label : o.labels)
            if (!result.controls.count(label)) {
                result.order.push_back(label);
                result.controls[label] = {};
            }
        for (const auto& line : o.samples) {
            ++result.samples;
            texts.push_back(line.at("text").get<std::string>());
            if (line.contains("middle")) {
                middles.push_back(line.at("middle").get<std::vector<std::string>>());
                reference_middles.push_back(line.at("target").at("middle_tokens").get<std::vector<std::string>>());
            }
            bool all = !o.labels.empty();
            for (const auto& label : o.labels) {
                const json& verdict = line.at("controls").at(label);
                const json& satisfied = verdict.at("satisfied");
                all = all && satisfied.is_boolean() && satisfied.get<bool>();
                ControlTally& t = result.controls[label];
                if (satisfied.is_boolean()) {
                    ++t.judged;
                    t.satisfied += satisfied.get<bool>() ? 1 : 0;
                }
                if (verdict.contains("score")) {
                    ++t.scored;
                    t.score_sum += verdict.at("score").get<double>();
                }
            }
            result.all_satisfied += all ? 1 : 0;
        }
    }
    {
        ComputeShare share;
        result.perplexity = score_texts(teacher, texts).perplexity();
    }
    if (!middles.empty()) result.bleu = corpus_bleu(middles, reference_middles);
    return result;
}

}  // namespace rudder::eval
