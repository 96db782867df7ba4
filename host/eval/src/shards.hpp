// A run spread over processes: `--shard K/N` writes each of its targets' outcomes as a line of shard.jsonl, and
// `--merge` reads every shard's lines back, checked complete.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "target_run.hpp"

namespace rudder::eval {

// "K/N" of --shard: this process runs targets K, K + N, K + 2N, ...
std::pair<int64_t, int64_t> parse_shard(const std::string& text);

// A line of shard.jsonl: target `o` of `task` (of `targets` targets), made by shard "K/N".
nlohmann::json outcome_json(const std::string& task, int64_t targets, const std::string& shard, const TargetOutcome& o);

// Every shard's outcomes, by task, checked complete: each task's shards 0..N-1 all present, every target once.
std::map<std::string, std::vector<TargetOutcome>> read_shards(const std::vector<std::string>& dirs);

}  // namespace rudder::eval
