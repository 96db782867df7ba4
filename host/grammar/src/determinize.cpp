// The NFA a Lang expands to (Thompson's construction over byte ranges) and its subset construction.
#include "automaton_build.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace rudder::grammar {

void Budget::nfa_states(int64_t count) const {
    if (count > limits_.max_nfa_states) {
        throw LimitError(what_ + " expands to more than " + std::to_string(limits_.max_nfa_states) +
                         " automaton states (CompileLimits::max_nfa_states); lower its repetition counts or lengths");
    }
}

void Budget::dfa_states(int64_t count) const {
    if (count > limits_.max_states) {
        throw LimitError(what_ + " needs more than " + std::to_string(limits_.max_states) +
                         " states (CompileLimits::max_states); simplify it or raise the limit");
    }
}

CompileStopped::CompileStopped(const std::string& what, bool cancelled_)
    : LimitError(cancelled_ ? "compiling " + what + " was cancelled (its request has gone)"
                            : "compiling " + what + " ran past its time limit (CompileLimits::deadline)"),
      cancelled(cancelled_) {}

void check_stopped(const CompileLimits& limits, const std::string& what) {
    if (limits.cancelled && limits.cancelled()) throw CompileStopped(what, true);
    if (limits.deadline != std::chrono::steady_clock::time_point::max() &&
        std::chrono::steady_clock::now() > limits.deadline)
        throw CompileStopped(what, false);
}

void Budget::work(int64_t amount) {
    // The clock is read every 2^16 units of work (well under a millisecond), so a deadline holds within that.
    if ((work_ >> 16) != ((work_ + amount) >> 16)) check_stopped(limits_, what_);
    work_ += amount;
    if (work_ > limits_.max_work) {
        throw LimitError(what_ + " needs more than " + std::to_string(limits_.max_work) +
                         " steps to compile (CompileLimits::max_work); simplify it or raise the limit");
    }
}

namespace {

struct NfaEdge {
    int32_t from;
    uint8_t lo;
    uint8_t hi;
    int32_t to;  // on an epsilon edge lo > hi
};

// Expands Langs into NFA edges. emit(lang, from, to) adds edges out of `from` and into `to` only through fresh
// states, so that from == to (a loop) is safe.
class NfaBuilder {
public:
    explicit NfaBuilder(Budget& budget) : budget_(budget) {}

    int32_t add_state() {
        budget_.nfa_states(states_ + 1);
        return states_++;
    }
    void epsilon(int32_t from, int32_t to) { edges_.push_back({from, 1, 0, to}); }
    void bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to) { edges_.push_back({from, lo, hi, to}); }
    int32_t states() const { return states_; }
    const std::vector<NfaEdge>& edges() const { return edges_; }

    void emit(const Lang& lang, int32_t from, int32_t to);

private:
    void emit_code_points(const CodePointSet& set, int32_t from, int32_t to);
    void emit_repeat(const Lang& lang, int32_t from, int32_t to);
    void emit_graph(const Lang& lang, int32_t from, int32_t to);
    void emit_automaton(const Dfa& dfa, bool json_string, int32_t from, int32_t to);
    void emit_escapes(const Dfa& dfa, int32_t s, const std::vector<int32_t>& state);

    Budget& budget_;
    int32_t states_ = 0;
    std::vector<NfaEdge> edges_;
};

void NfaBuilder::emit(const Lang& lang, int32_t from, int32_t to) {
    switch (lang.kind) {
        case Lang::Kind::nothing: return;
        case Lang::Kind::bytes:
            for (const auto& r : lang.byte_ranges) bytes(from, r.first, r.second, to);
            return;
        case Lang::Kind::code_points: emit_code_points(lang.set, from, to); return;
        case Lang::Kind::sequence: {
            if (lang.children.empty()) {
                epsilon(from, to);
                return;
            }
            int32_t current = from;
            for (size_t i = 0; i < lang.children.size(); ++i) {
                const int32_t next = i + 1 == lang.children.size() ? to : add_state();
                emit(*lang.children[i], current, next);
                current = next;
            }
            return;
        }
        case Lang::Kind::choice:
            for (const auto& child : lang.children) emit(*child, from, to);
            return;
        case Lang::Kind::repeat: emit_repeat(lang, from, to); return;
        case Lang::Kind::graph: emit_graph(lang, from, to); return;
        case Lang::Kind::automaton: emit_automaton(*lang.dfa, false, from, to); return;
        case Lang::Kind::json_string: emit_automaton(*lang.dfa, true, from, to); return;
    }
}

void NfaBuilder::emit_code_points(const CodePointSet& set, int32_t from, int32_t to) {
    // A trie over the sequences' leading byte ranges keeps the shared prefixes of a large set (\p{L}) shared.
    std::map<std::tuple<int32_t, uint8_t, uint8_t>, int32_t> trie;
    for (const auto& sequence : utf8_sequences(set)) {
        int32_t current = from;
        for (size_t i = 0; i + 1 < sequence.size(); ++i) {
            const auto key = std::make_tuple(current, sequence[i].first, sequence[i].second);
            auto it = trie.find(key);
            if (it == trie.end()) {
                const int32_t next = add_state();
                bytes(current, sequence[i].first, sequence[i].second, next);
                it = trie.emplace(key, next).first;
            }
            current = it->second;
        }
        bytes(current, sequence.back().first, sequence.back().second, to);
    }
}

void NfaBuilder::emit_repeat(const Lang& lang, int32_t from, int32_t to) {
    const Lang& child = *lang.children[0];
    int32_t current = from;
    for (int i = 0; i < lang.min; ++i) {
        const int32_t next = add_state();
        emit(child, current, next);
        current = next;
    }
    if (lang.max < 0) {
        const int32_t loop = add_state();
        epsilon(current, loop);
        emit(child, loop, loop);
        epsilon(loop, to);
        return;
    }
    for (int i = lang.min; i < lang.max; ++i) {
        const int32_t next = add_state();
        epsilon(current, to);
        emit(child, current, next);
        current = next;
    }
    epsilon(current, to);
}

void NfaBuilder::emit_graph(const Lang& lang, int32_t from, int32_t to) {
    std::vector<int32_t> node(static_cast<size_t>(lang.nodes));
    for (auto& n : node) n = add_state();
    epsilon(from, node[0]);
    for (const auto& edge : lang.edges) {
        if (edge.label == nullptr) {
            epsilon(node[static_cast<size_t>(edge.from)], node[static_cast<size_t>(edge.to)]);
        } else {
            emit(*edge.label, node[static_cast<size_t>(edge.from)], node[static_cast<size_t>(edge.to)]);
        }
    }
    for (int a : lang.accepting) epsilon(node[static_cast<size_t>(a)], to);
}

void NfaBuilder::emit_automaton(const Dfa& dfa, bool json_string, int32_t from, int32_t to) {
    // The byte runs of each class, so that a transition becomes a few range edges rather than one per byte.
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> runs(static_cast<size_t>(dfa.classes()));
    for (int b = 0; b < 256; ++b) {
        auto& list = runs[dfa.class_of(static_cast<uint8_t>(b))];
        const bool escaped = json_string && !json_escape(static_cast<uint8_t>(b)).empty();
        if (escaped) continue;
        if (!list.empty() && list.back().second + 1 == b) {
            list.back().second = static_cast<uint8_t>(b);
        } else {
            list.emplace_back(static_cast<uint8_t>(b), static_cast<uint8_t>(b));
        }
    }
    std::vector<int32_t> state(static_cast<size_t>(dfa.size()));
    for (auto& s : state) s = add_state();
    epsilon(from, state[static_cast<size_t>(dfa.start())]);
    for (int32_t s = 0; s < dfa.size(); ++s) {
        if (dfa.accepting(s)) epsilon(state[static_cast<size_t>(s)], to);
        for (int c = 0; c < dfa.classes(); ++c) {
            const int32_t t = dfa.next_by_class(s, c);
            if (t == Dfa::kDead) continue;
            for (const auto& r : runs[static_cast<size_t>(c)]) {
                bytes(state[static_cast<size_t>(s)], r.first, r.second, state[static_cast<size_t>(t)]);
            }
        }
        if (json_string) emit_escapes(dfa, s, state);
    }
}

// The escape sequences of the bytes JSON escapes, from state s: one trie per target state, so that the 34 escapes
// share their prefixes (`\`, `\u00`) instead of each taking a chain of states.
void NfaBuilder::emit_escapes(const Dfa& dfa, int32_t s, const std::vector<int32_t>& state) {
    std::map<int32_t, std::vector<const std::string*>> by_target;
    for (int b = 0; b < 0x80; ++b) {
        const std::string& escape = json_escape(static_cast<uint8_t>(b));
        if (escape.empty()) continue;
        const int32_t t = dfa.next(s, static_cast<uint8_t>(b));
        if (t != Dfa::kDead) by_target[t].push_back(&escape);
    }
    for (const auto& [t, escapes] : by_target) {
        std::map<std::pair<int32_t, uint8_t>, int32_t> trie;
        for (const std::string* escape : escapes) {
            int32_t current = state[static_cast<size_t>(s)];
            for (size_t i = 0; i + 1 < escape->size(); ++i) {
                const auto byte = static_cast<uint8_t>((*escape)[i]);
                auto it = trie.find({current, byte});
                if (it == trie.end()) {
                    const int32_t next = add_state();
                    bytes(current, byte, byte, next);
                    it = trie.emplace(std::make_pair(current, byte), next).first;
                }
                current = it->second;
            }
            const auto last = static_cast<uint8_t>(escape->back());
            bytes(current, last, last, state[static_cast<size_t>(t)]);
        }
    }
}

struct VectorHash {
    size_t operator()(const std::vector<int32_t>& v) const {
        size_t h = v.size();
        for (int32_t x : v) h = h * 1000003u ^ static_cast<size_t>(x);
        return h;
    }
};

// The NFA in compressed rows: per state, its epsilon targets and its (first class, last class, target) edges.
struct CompactNfa {
    std::vector<int32_t> epsilon_start, epsilon_to;
    std::vector<int32_t> edge_start;
    std::vector<std::tuple<int, int, int32_t>> edges;
    std::vector<uint8_t> class_of;
    int classes = 0;
};

CompactNfa compact(const NfaBuilder& nfa) {
    CompactNfa out;
    std::vector<bool> boundary(257, false);
    boundary[0] = true;
    for (const auto& e : nfa.edges()) {
        if (e.lo > e.hi) continue;
        boundary[e.lo] = true;
        boundary[static_cast<size_t>(e.hi) + 1] = true;
    }
    out.class_of.resize(256);
    int current = -1;
    for (int b = 0; b < 256; ++b) {
        if (boundary[static_cast<size_t>(b)]) ++current;
        out.class_of[static_cast<size_t>(b)] = static_cast<uint8_t>(current);
    }
    out.classes = current + 1;
    const auto n = static_cast<size_t>(nfa.states());
    out.epsilon_start.assign(n + 1, 0);
    out.edge_start.assign(n + 1, 0);
    for (const auto& e : nfa.edges()) ++(e.lo > e.hi ? out.epsilon_start : out.edge_start)[e.from + 1];
    for (size_t i = 0; i < n; ++i) {
        out.epsilon_start[i + 1] += out.epsilon_start[i];
        out.edge_start[i + 1] += out.edge_start[i];
    }
    out.epsilon_to.resize(static_cast<size_t>(out.epsilon_start[n]));
    out.edges.resize(static_cast<size_t>(out.edge_start[n]));
    std::vector<int32_t> fill_epsilon(out.epsilon_start.begin(), out.epsilon_start.end() - 1);
    std::vector<int32_t> fill_edge(out.edge_start.begin(), out.edge_start.end() - 1);
    for (const auto& e : nfa.edges()) {
        if (e.lo > e.hi) {
            out.epsilon_to[static_cast<size_t>(fill_epsilon[static_cast<size_t>(e.from)]++)] = e.to;
        } else {
            out.edges[static_cast<size_t>(fill_edge[static_cast<size_t>(e.from)]++)] =
                std::make_tuple(out.class_of[e.lo], out.class_of[e.hi], e.to);
        }
    }
    return out;
}

}  // namespace

RawDfa determinize(const LangPtr& lang, Budget& budget) {
    NfaBuilder builder(budget);
    const int32_t start = builder.add_state();
    const int32_t accept = builder.add_state();
    builder.emit(*lang, start, accept);
    const CompactNfa nfa = compact(builder);
    budget.work(static_cast<int64_t>(builder.edges().size()));

    std::vector<int32_t> seen(static_cast<size_t>(builder.states()), -1);
    int32_t stamp = 0;
    std::vector<int32_t> stack;
    // The epsilon closure of `set`, sorted.
    auto close = [&](std::vector<int32_t>& set) {
        ++stamp;
        stack.assign(set.begin(), set.end());
        set.clear();
        while (!stack.empty()) {
            const int32_t s = stack.back();
            stack.pop_back();
            if (seen[static_cast<size_t>(s)] == stamp) continue;
            seen[static_cast<size_t>(s)] = stamp;
            set.push_back(s);
            for (int32_t i = nfa.epsilon_start[static_cast<size_t>(s)]; i < nfa.epsilon_start[s + 1]; ++i) {
                stack.push_back(nfa.epsilon_to[static_cast<size_t>(i)]);
            }
        }
        std::sort(set.begin(), set.end());
        budget.work(static_cast<int64_t>(set.size()));
    };

    RawDfa raw;
    raw.classes = nfa.classes;
    raw.class_of = nfa.class_of;
    std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> ids;
    std::vector<std::vector<int32_t>> sets;
    auto id_of = [&](std::vector<int32_t>&& set) {
        auto it = ids.find(set);
        if (it != ids.end()) return it->second;
        const auto id = static_cast<int32_t>(sets.size());
        budget.dfa_states(id + 1);
        ids.emplace(set, id);
        sets.push_back(std::move(set));
        return id;
    };
    std::vector<int32_t> first = {start};
    close(first);
    raw.start = id_of(std::move(first));
    std::vector<std::vector<int32_t>> buckets(static_cast<size_t>(nfa.classes));
    for (size_t d = 0; d < sets.size(); ++d) {
        for (int32_t s : sets[d]) {
            for (int32_t i = nfa.edge_start[static_cast<size_t>(s)]; i < nfa.edge_start[s + 1]; ++i) {
                const auto& [lo, hi, to] = nfa.edges[static_cast<size_t>(i)];
                for (int c = lo; c <= hi; ++c) buckets[static_cast<size_t>(c)].push_back(to);
                budget.work(hi - lo + 1);
            }
        }
        raw.accepting.push_back(std::binary_search(sets[d].begin(), sets[d].end(), accept) ? 1 : 0);
        // Neighbouring classes often reach the same NFA states (the bytes a context does not tell apart): the
        // previous class's targets are remembered so that their closure is computed once.
        std::vector<int32_t> previous_targets;
        int32_t previous_id = Dfa::kDead;
        for (int c = 0; c < nfa.classes; ++c) {
            auto& bucket = buckets[static_cast<size_t>(c)];
            if (bucket.empty()) {
                raw.table.push_back(Dfa::kDead);
                continue;
            }
            if (previous_id != Dfa::kDead && bucket == previous_targets) {
                raw.table.push_back(previous_id);
                bucket.clear();
                continue;
            }
            previous_targets = bucket;
            close(bucket);
            previous_id = id_of(std::move(bucket));
            raw.table.push_back(previous_id);
            bucket = {};
        }
    }
    return raw;
}

}  // namespace rudder::grammar
