// A task's result from its targets' outcomes (what a run or a merge of shards generated).
#pragma once

#include <string>
#include <vector>

#include <rudder/eval/summary.hpp>
#include <rudder/nn/teacher_model.hpp>

#include "target_run.hpp"

namespace rudder::eval {

// A task's result from its targets' outcomes, in target order: the controls' verdicts and scores, the teacher's
// perplexity of every text, BLEU of infilled middles, and the cost.
TaskResult summarize(const std::string& name, const std::vector<TargetOutcome>& outcomes, const TeacherModel& teacher);

}  // namespace rudder::eval
