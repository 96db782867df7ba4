// shard.jsonl: writing a target's line, reading every shard's lines back.
#include "shards.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace rudder::eval {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

TargetOutcome outcome_from_json(const json& j) {
    TargetOutcome o;
    o.index = j.at("index").get<int64_t>();
    o.family = j.at("family").get<std::string>();
    o.labels = j.at("labels").get<std::vector<std::string>>();
    o.samples = j.at("samples").get<std::vector<json>>();
    o.seconds = j.at("seconds").get<double>();
    o.denoised_sequences = j.at("denoised_sequences").get<int64_t>();
    o.rows_drawn = j.at("rows_drawn").get<int64_t>();
    return o;
}

// What the shards hold of one task so far.
struct SeenTask {
    int64_t targets = -1, shards = -1;
    std::set<int64_t> shard_ids;
    std::map<int64_t, TargetOutcome> by_index;
};

// One line of a shard file, added to its task; throws for a line that contradicts the others.
void add_shard_line(const json& j, std::map<std::string, SeenTask>& tasks) {
    SeenTask& seen = tasks[j.at("task").get<std::string>()];
    const auto [k, n] = parse_shard(j.at("shard").get<std::string>());
    const int64_t targets = j.at("targets").get<int64_t>();
    if ((seen.shards >= 0 && seen.shards != n) || (seen.targets >= 0 && seen.targets != targets))
        throw std::runtime_error("task '" + j.at("task").get<std::string>() + "' was sharded differently elsewhere (" +
                                 std::to_string(n) + " shards of " + std::to_string(targets) + " targets here)");
    seen.shards = n;
    seen.targets = targets;
    seen.shard_ids.insert(k);
    TargetOutcome o = outcome_from_json(j);
    if (o.index < 0 || o.index >= targets || o.index % n != k)
        throw std::runtime_error("target " + std::to_string(o.index) + " does not belong to shard " +
                                 j.at("shard").get<std::string>());
    if (!seen.by_index.emplace(o.index, std::move(o)).second)
        throw std::runtime_error("target " + std::to_string(j.at("index").get<int64_t>()) + " appears twice");
}

}  // namespace

std::pair<int64_t, int64_t> parse_shard(const std::string& text) {
    const auto slash = text.find('/');
    try {
        if (slash != std::string::npos) {
            size_t used_k = 0, used_n = 0;
            const int64_t k = std::stoll(text.substr(0, slash), &used_k),
                          n = std::stoll(text.substr(slash + 1), &used_n);
            if (used_k == slash && used_n == text.size() - slash - 1 && n >= 1 && k >= 0 && k < n) return {k, n};
        }
    } catch (const std::exception&) {
    }
    throw std::runtime_error("--shard: expected K/N with 0 <= K < N (this process runs targets K, K+N, ...), got '" +
                             text + "'");
}

json outcome_json(const std::string& task, int64_t targets, const std::string& shard, const TargetOutcome& o) {
    return {{"task", task},
            {"targets", targets},
            {"shard", shard},
            {"index", o.index},
            {"family", o.family},
            {"labels", o.labels},
            {"samples", o.samples},
            {"seconds", o.seconds},
            {"denoised_sequences", o.denoised_sequences},
            {"rows_drawn", o.rows_drawn}};
}

std::map<std::string, std::vector<TargetOutcome>> read_shards(const std::vector<std::string>& dirs) {
    std::map<std::string, SeenTask> tasks;
    for (const auto& dir : dirs) {
        const fs::path file = fs::path(dir) / "shard.jsonl";
        std::ifstream in(file);
        if (!in)
            throw std::runtime_error("--merge: no '" + file.string() + "' (the output of `rudder eval --shard K/N -o " +
                                     dir + "`)");
        std::string line;
        for (int64_t number = 1; std::getline(in, line); ++number) {
            if (line.empty()) continue;
            const std::string where = file.string() + ":" + std::to_string(number);
            try {
                add_shard_line(json::parse(line), tasks);
            } catch (const json::exception& e) {
                throw std::runtime_error("--merge: " + where + ": not a shard record (" + e.what() + ")");
            } catch (const std::runtime_error& e) {
                throw std::runtime_error("--merge: " + where + ": " + e.what());
            }
        }
    }
    std::map<std::string, std::vector<TargetOutcome>> out;
    for (auto& [task, seen] : tasks) {
        for (int64_t k = 0; k < seen.shards; ++k)
            if (!seen.shard_ids.count(k) && k < seen.targets)
                throw std::runtime_error("--merge: task '" + task + "': shard " + std::to_string(k) + "/" +
                                         std::to_string(seen.shards) + " is missing");
        if (static_cast<int64_t>(seen.by_index.size()) != seen.targets)
            throw std::runtime_error("--merge: task '" + task + "': " + std::to_string(seen.by_index.size()) + " of " +
                                     std::to_string(seen.targets) + " targets in the shards given");
        for (auto& [index, o] : seen.by_index) out[task].push_back(std::move(o));
    }
    return out;
}

}  // namespace rudder::eval
