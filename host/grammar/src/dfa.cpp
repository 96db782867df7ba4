#include <rudder/grammar/dfa.hpp>

#include "automaton_build.hpp"
#include "lang.hpp"

#include <unordered_map>

namespace rudder::grammar {

Dfa::Dfa() : table_(1, kDead), accepting_(1, 0), live_(1, 0), class_of_(256, 0) {}

Dfa::Dfa(int32_t start, std::vector<int32_t> table, std::vector<uint8_t> accepting, std::vector<uint8_t> class_of,
         int classes)
    : start_(start), classes_(classes), table_(std::move(table)), accepting_(std::move(accepting)),
      class_of_(std::move(class_of)) {
    const auto n = accepting_.size();
    if (classes_ < 1 || classes_ > 256 || class_of_.size() != 256 || n == 0 ||
        table_.size() != n * static_cast<size_t>(classes_) || start_ < 0 || static_cast<size_t>(start_) >= n) {
        throw std::invalid_argument("Dfa: the table, classes and states disagree");
    }
    for (uint8_t c : class_of_) {
        if (c >= classes_) throw std::invalid_argument("Dfa: a byte's class is out of range");
    }
    for (int32_t t : table_) {
        if (t < kDead || t >= static_cast<int32_t>(n)) throw std::invalid_argument("Dfa: a transition is out of range");
    }
    // live: reverse reachability from the accepting states.
    const auto k = static_cast<size_t>(classes_);
    std::vector<int32_t> in_start(n + 1, 0), sources;
    for (int32_t t : table_) {
        if (t != kDead) ++in_start[static_cast<size_t>(t) + 1];
    }
    for (size_t i = 0; i < n; ++i) in_start[i + 1] += in_start[i];
    sources.resize(static_cast<size_t>(in_start[n]));
    std::vector<int32_t> fill(in_start.begin(), in_start.end() - 1);
    for (size_t s = 0; s < n; ++s) {
        for (size_t c = 0; c < k; ++c) {
            const int32_t t = table_[s * k + c];
            if (t != kDead) sources[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
        }
    }
    live_ = accepting_;
    std::vector<int32_t> stack;
    for (size_t s = 0; s < n; ++s) {
        if (live_[s]) stack.push_back(static_cast<int32_t>(s));
    }
    while (!stack.empty()) {
        const auto t = static_cast<size_t>(stack.back());
        stack.pop_back();
        for (int32_t i = in_start[t]; i < in_start[t + 1]; ++i) {
            const auto s = static_cast<size_t>(sources[static_cast<size_t>(i)]);
            if (!live_[s]) {
                live_[s] = 1;
                stack.push_back(static_cast<int32_t>(s));
            }
        }
    }
}

bool Dfa::matches(std::string_view text) const {
    int32_t state = start_;
    for (char c : text) {
        state = next(state, static_cast<uint8_t>(c));
        if (state == kDead) return false;
    }
    return accepting(state);
}

std::optional<std::string> Dfa::shortest_from(int32_t state) const {
    if (!live(state)) return std::nullopt;
    std::vector<int32_t> parent(accepting_.size(), -2);
    std::vector<uint8_t> via(accepting_.size(), 0);
    std::vector<int32_t> queue = {state};
    parent[static_cast<size_t>(state)] = -1;
    for (size_t i = 0; i < queue.size(); ++i) {
        const int32_t s = queue[i];
        if (accepting(s)) {
            std::string text;
            for (int32_t at = s; parent[static_cast<size_t>(at)] != -1; at = parent[static_cast<size_t>(at)])
                text.insert(text.begin(), static_cast<char>(via[static_cast<size_t>(at)]));
            return text;
        }
        for (int b = 0; b < 256; ++b) {
            const int32_t t = next(s, static_cast<uint8_t>(b));
            if (t == kDead || parent[static_cast<size_t>(t)] != -2) continue;
            parent[static_cast<size_t>(t)] = s;
            via[static_cast<size_t>(t)] = static_cast<uint8_t>(b);
            queue.push_back(t);
        }
    }
    return std::nullopt;  // unreachable for a live state
}

size_t Dfa::memory_bytes() const {
    return sizeof(*this) + table_.capacity() * sizeof(int32_t) + accepting_.capacity() + live_.capacity() +
           class_of_.capacity();
}

Dfa build_dfa(const LangPtr& lang, const CompileLimits& limits, const std::string& what) {
    Budget budget(limits, what);
    return minimize(determinize(lang, budget), budget);
}

namespace {

enum class Combine { both, first_only };

Dfa product(const Dfa& a, const Dfa& b, Combine combine, const CompileLimits& limits, const std::string& what) {
    Budget budget(limits, what);
    RawDfa raw;
    // Byte classes of the product: pairs of the operands' classes.
    std::unordered_map<int, int> pair_class;
    std::vector<std::pair<int, int>> class_pairs;
    for (int byte = 0; byte < 256; ++byte) {
        const int key = a.class_of(static_cast<uint8_t>(byte)) * 256 + b.class_of(static_cast<uint8_t>(byte));
        auto it = pair_class.find(key);
        if (it == pair_class.end()) {
            it = pair_class.emplace(key, static_cast<int>(class_pairs.size())).first;
            class_pairs.emplace_back(key / 256, key % 256);
        }
        raw.class_of[static_cast<size_t>(byte)] = static_cast<uint8_t>(it->second);
    }
    raw.classes = static_cast<int>(class_pairs.size());
    std::unordered_map<int64_t, int32_t> ids;
    std::vector<std::pair<int32_t, int32_t>> states;
    auto id_of = [&](int32_t x, int32_t y) {
        const int64_t key = (static_cast<int64_t>(x) << 32) | static_cast<uint32_t>(y);
        auto it = ids.find(key);
        if (it != ids.end()) return it->second;
        const auto id = static_cast<int32_t>(states.size());
        budget.dfa_states(id + 1);
        ids.emplace(key, id);
        states.emplace_back(x, y);
        return id;
    };
    raw.start = id_of(a.start(), b.start());
    for (size_t i = 0; i < states.size(); ++i) {
        const auto [x, y] = states[i];
        raw.accepting.push_back(combine == Combine::both ? a.accepting(x) && b.accepting(y)
                                                         : a.accepting(x) && !b.accepting(y));
        budget.work(raw.classes);
        for (const auto& [ca, cb] : class_pairs) {
            const int32_t nx = a.next_by_class(x, ca);
            const int32_t ny = b.next_by_class(y, cb);
            const bool dead = nx == Dfa::kDead || (combine == Combine::both && ny == Dfa::kDead);
            raw.table.push_back(dead ? Dfa::kDead : id_of(nx, ny));
        }
    }
    return minimize(raw, budget);
}

}  // namespace

Dfa intersect(const Dfa& a, const Dfa& b, const CompileLimits& limits, const std::string& what) {
    return product(a, b, Combine::both, limits, what);
}

Dfa difference(const Dfa& a, const Dfa& b, const CompileLimits& limits, const std::string& what) {
    return product(a, b, Combine::first_only, limits, what);
}

}  // namespace rudder::grammar
