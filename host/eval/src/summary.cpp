// Tallying a task's samples, and the two forms of its result (results.json, the Markdown table).
#include <rudder/eval/summary.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <rudder/nn/compute_threads.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/metrics.hpp>

#include "summarize.hpp"

namespace rudder::eval {

using json = nlohmann::json;

namespace {

json prompted_json(const PromptedScores& p) {
    if (p.task == "data_to_text")
        return {{"answers", p.answers},
                {"bleu", p.bleu ? json(*p.bleu) : json(nullptr)},
                {"slots_realised", PromptedScores::share(p.fields_realised, p.fields)},
                {"all_slots_realised", PromptedScores::share(p.all_realised, p.answers)}};
    return {{"answers", p.answers},
            {"valid_json", PromptedScores::share(p.valid_json, p.answers)},
            {"exact_record", PromptedScores::share(p.exact, p.answers)},
            {"slot_accuracy", PromptedScores::share(p.slots_right, p.slots)},
            {"extra_slots_per_answer", PromptedScores::share(p.extra_slots, p.answers)}};
}

std::string prompted_markdown(const PromptedScores& p) {
    char buf[200];
    if (p.task == "data_to_text")
        std::snprintf(buf, sizeof buf, "BLEU-4 %.2f; slots realised %.1f%% (all: %.1f%%)", 100.0 * p.bleu.value_or(0.0),
                      100.0 * PromptedScores::share(p.fields_realised, p.fields),
                      100.0 * PromptedScores::share(p.all_realised, p.answers));
    else
        std::snprintf(buf, sizeof buf, "valid JSON %.1f%%; exact record %.1f%%; slot accuracy %.1f%%",
                      100.0 * PromptedScores::share(p.valid_json, p.answers),
                      100.0 * PromptedScores::share(p.exact, p.answers),
                      100.0 * PromptedScores::share(p.slots_right, p.slots));
    return buf;
}

// The answer of a prompted sample: its text after the prompt (the span controller keeps the prompt as the prefix).
std::string answer_of(const std::string& text, const std::string& prompt) {
    return text.rfind(prompt, 0) == 0 ? text.substr(prompt.size()) : text;
}

void score_answer(PromptedScores& p, const std::string& answer, const json& target,
                  std::vector<std::vector<std::string>>& hypotheses,
                  std::vector<std::vector<std::vector<std::string>>>& references) {
    ++p.answers;
    const std::vector<meaning::Field> fields = meaning::parse(target.at("mr").get<std::string>());
    if (p.task == "data_to_text") {
        hypotheses.push_back(bleu_words(answer));
        references.emplace_back();
        for (const auto& r : target.at("references")) references.back().push_back(bleu_words(r.get<std::string>()));
        int64_t realised = 0;
        for (const auto& f : fields) realised += meaning::realised(f, answer) ? 1 : 0;
        p.fields += static_cast<int64_t>(fields.size());
        p.fields_realised += realised;
        p.all_realised += realised == static_cast<int64_t>(fields.size()) ? 1 : 0;
        return;
    }
    p.slots += static_cast<int64_t>(fields.size());
    json record;
    try {
        record = json::parse(answer);
    } catch (const json::exception&) {
        return;
    }
    if (!record.is_object()) return;
    ++p.valid_json;
    int64_t right = 0;
    for (const auto& f : fields) right += record.contains(f.attribute) && record.at(f.attribute) == f.value ? 1 : 0;
    int64_t extra = 0;
    for (const auto& item : record.items())
        extra += std::none_of(fields.begin(), fields.end(),
                              [&](const meaning::Field& f) { return f.attribute == item.key(); })
                     ? 1
                     : 0;
    p.slots_right += right;
    p.extra_slots += extra;
    p.exact += right == static_cast<int64_t>(fields.size()) && extra == 0 ? 1 : 0;
}

}  // namespace

json result_json(const TaskResult& r) {
    json controls = json::object();
    for (const auto& label : r.order) {
        const ControlTally& t = r.controls.at(label);
        controls[label] = {{"judged", t.judged},
                           {"satisfied", t.satisfied},
                           {"success", t.success() ? json(*t.success()) : json(nullptr)},
                           {"mean_score", t.mean_score() ? json(*t.mean_score()) : json(nullptr)}};
    }
    json out = {{"task", r.name},
                {"family", r.family},
                {"targets", r.targets},
                {"samples", r.samples},
                {"controls", controls},
                {"all_satisfied", r.order.size() > 1 ? json(r.all_success()) : json(nullptr)},
                {"bleu", r.bleu ? json(*r.bleu) : json(nullptr)},
                {"teacher_perplexity", r.perplexity ? json(*r.perplexity) : json(nullptr)},
                {"seconds_per_sample", r.seconds_per_sample()},
                {"network_evaluations_per_sample", r.per_sample(r.denoised_sequences)},
                {"rows_drawn_per_sample", r.family == "discrete" ? json(r.per_sample(r.rows_drawn)) : json(nullptr)}};
    if (r.prompted) out[r.prompted->task] = prompted_json(*r.prompted);
    return out;
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
        if (r.prompted) controls += (controls.empty() ? "" : "; ") + prompted_markdown(*r.prompted);
        if (r.perplexity)
            std::snprintf(buf, sizeof buf, " | %.2f | %.2f | %.1f |", *r.perplexity, r.seconds_per_sample(),
                          r.per_sample(r.denoised_sequences));
        else
            std::snprintf(buf, sizeof buf, " | — | %.2f | %.1f |", r.seconds_per_sample(),
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
    std::vector<std::vector<std::string>> hypotheses;                  // data_to_text
    std::vector<std::vector<std::vector<std::string>>> references;
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
            const json& target = line.at("target");
            if (target.contains("prompt")) {
                if (!result.prompted) {
                    result.prompted.emplace();
                    result.prompted->task = target.at("task").get<std::string>();
                }
                const std::string answer =
                    answer_of(line.at("text").get<std::string>(), target.at("prompt").get<std::string>());
                score_answer(*result.prompted, answer, target, hypotheses, references);
                if (result.prompted->task == "data_to_text") texts.push_back(answer);
            } else {
                texts.push_back(line.at("text").get<std::string>());
            }
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
    // None for JSON records: not the language the teacher scores.
    if (!result.prompted || result.prompted->task != "text_to_data") {
        ComputeShare share;
        result.perplexity = score_texts(teacher, texts).perplexity();
    }
    if (!middles.empty()) result.bleu = corpus_bleu(middles, reference_middles);
    if (!hypotheses.empty()) result.prompted->bleu = multi_reference_bleu(hypotheses, references);
    return result;
}

}  // namespace rudder::eval
