// Minimisation: trimming, then Valmari and Lehtinen's partition refinement for partial automata ("Efficient
// minimization of DFAs with partial transition functions", STACS 2008), O(m log n), then merged byte classes.
#include "automaton_build.hpp"

#include <algorithm>
#include <map>
#include <numeric>

namespace rudder::grammar {

namespace {

// A refinable partition of 0..n-1: the elements of set s are elements[first[s] .. past[s]), the marked ones first.
class Partition {
public:
    explicit Partition(int32_t n)
        : elements(static_cast<size_t>(n)), location(static_cast<size_t>(n)), set_of(static_cast<size_t>(n), 0),
          first(static_cast<size_t>(n) + 1, 0), past(static_cast<size_t>(n) + 1, 0),
          marked(static_cast<size_t>(n) + 1, 0) {
        std::iota(elements.begin(), elements.end(), 0);
        std::iota(location.begin(), location.end(), 0);
        sets = n > 0 ? 1 : 0;
        past[0] = n;
    }

    void mark(int32_t e) {
        const int32_t s = set_of[static_cast<size_t>(e)];
        const int32_t i = location[static_cast<size_t>(e)];
        const int32_t j = first[static_cast<size_t>(s)] + marked[static_cast<size_t>(s)];
        elements[static_cast<size_t>(i)] = elements[static_cast<size_t>(j)];
        location[static_cast<size_t>(elements[static_cast<size_t>(i)])] = i;
        elements[static_cast<size_t>(j)] = e;
        location[static_cast<size_t>(e)] = j;
        if (marked[static_cast<size_t>(s)]++ == 0) touched.push_back(s);
    }

    // Splits every touched set into its marked and unmarked elements; the smaller part becomes the new set.
    void split() {
        while (!touched.empty()) {
            const auto s = static_cast<size_t>(touched.back());
            touched.pop_back();
            const int32_t j = first[s] + marked[s];
            if (j == past[s]) {
                marked[s] = 0;
                continue;
            }
            const auto z = static_cast<size_t>(sets);
            if (marked[s] <= past[s] - j) {
                first[z] = first[s];
                past[z] = first[s] = j;
            } else {
                past[z] = past[s];
                first[z] = past[s] = j;
            }
            for (int32_t i = first[z]; i < past[z]; ++i)
                set_of[static_cast<size_t>(elements[static_cast<size_t>(i)])] = sets;
            marked[s] = marked[z] = 0;
            ++sets;
        }
    }

    std::vector<int32_t> elements, location, set_of, first, past, marked, touched;
    int32_t sets = 0;
};

// The states from which an accepting state is reachable.
std::vector<uint8_t> coreachable(const RawDfa& raw) {
    const auto n = raw.accepting.size();
    const auto k = static_cast<size_t>(raw.classes);
    std::vector<int32_t> start(n + 1, 0), sources;
    for (int32_t t : raw.table) {
        if (t != Dfa::kDead) ++start[static_cast<size_t>(t) + 1];
    }
    for (size_t i = 0; i < n; ++i) start[i + 1] += start[i];
    sources.resize(static_cast<size_t>(start[n]));
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (size_t s = 0; s < n; ++s) {
        for (size_t c = 0; c < k; ++c) {
            const int32_t t = raw.table[s * k + c];
            if (t != Dfa::kDead) sources[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
        }
    }
    std::vector<uint8_t> live(n, 0);
    std::vector<int32_t> stack;
    for (size_t s = 0; s < n; ++s) {
        if (raw.accepting[s]) {
            live[s] = 1;
            stack.push_back(static_cast<int32_t>(s));
        }
    }
    while (!stack.empty()) {
        const auto t = static_cast<size_t>(stack.back());
        stack.pop_back();
        for (int32_t i = start[t]; i < start[t + 1]; ++i) {
            const auto s = static_cast<size_t>(sources[static_cast<size_t>(i)]);
            if (!live[s]) {
                live[s] = 1;
                stack.push_back(static_cast<int32_t>(s));
            }
        }
    }
    return live;
}

struct Transition {
    int32_t tail;
    int32_t label;
    int32_t head;
};

// Block ids of the minimal automaton's states, over the live states (dead ones get -1).
std::vector<int32_t> refine(const RawDfa& raw, const std::vector<uint8_t>& live, int32_t& blocks) {
    const auto n = static_cast<int32_t>(raw.accepting.size());
    const auto k = static_cast<size_t>(raw.classes);
    std::vector<Transition> transitions;
    for (int32_t s = 0; s < n; ++s) {
        if (!live[static_cast<size_t>(s)]) continue;
        for (size_t c = 0; c < k; ++c) {
            const int32_t t = raw.table[static_cast<size_t>(s) * k + c];
            if (t != Dfa::kDead && live[static_cast<size_t>(t)]) transitions.push_back({s, static_cast<int32_t>(c), t});
        }
    }
    const auto m = static_cast<int32_t>(transitions.size());
    Partition b(n), c(m);
    // Dead states go to a block of their own that never splits anything (no transition leads into it).
    for (int32_t s = 0; s < n; ++s) {
        if (!live[static_cast<size_t>(s)]) b.mark(s);
    }
    b.split();
    for (int32_t s = 0; s < n; ++s) {
        if (live[static_cast<size_t>(s)] && raw.accepting[static_cast<size_t>(s)]) b.mark(s);
    }
    b.split();
    // Cords: the transitions grouped by label.
    std::stable_sort(c.elements.begin(), c.elements.end(), [&](int32_t x, int32_t y) {
        return transitions[static_cast<size_t>(x)].label < transitions[static_cast<size_t>(y)].label;
    });
    c.sets = 0;
    for (int32_t i = 0; i < m; ++i) {
        const int32_t t = c.elements[static_cast<size_t>(i)];
        if (i == 0 || transitions[static_cast<size_t>(t)].label !=
                          transitions[static_cast<size_t>(c.elements[static_cast<size_t>(i - 1)])].label) {
            if (c.sets > 0) c.past[static_cast<size_t>(c.sets - 1)] = i;
            c.first[static_cast<size_t>(c.sets++)] = i;
        }
        c.set_of[static_cast<size_t>(t)] = c.sets - 1;
        c.location[static_cast<size_t>(t)] = i;
    }
    if (c.sets > 0) c.past[static_cast<size_t>(c.sets - 1)] = m;
    // Incoming transitions of each state.
    std::vector<int32_t> in_start(static_cast<size_t>(n) + 1, 0), in(static_cast<size_t>(m));
    for (const auto& t : transitions) ++in_start[static_cast<size_t>(t.head) + 1];
    for (int32_t s = 0; s < n; ++s) in_start[static_cast<size_t>(s) + 1] += in_start[static_cast<size_t>(s)];
    std::vector<int32_t> fill(in_start.begin(), in_start.end() - 1);
    for (int32_t i = 0; i < m; ++i)
        in[static_cast<size_t>(fill[static_cast<size_t>(transitions[static_cast<size_t>(i)].head)]++)] = i;

    int32_t next_block = 1, next_cord = 0;
    while (next_cord < c.sets) {
        const auto cord = static_cast<size_t>(next_cord++);
        for (int32_t i = c.first[cord]; i < c.past[cord]; ++i)
            b.mark(transitions[static_cast<size_t>(c.elements[static_cast<size_t>(i)])].tail);
        b.split();
        while (next_block < b.sets) {
            const auto block = static_cast<size_t>(next_block++);
            for (int32_t i = b.first[block]; i < b.past[block]; ++i) {
                const auto s = static_cast<size_t>(b.elements[static_cast<size_t>(i)]);
                for (int32_t j = in_start[s]; j < in_start[s + 1]; ++j) c.mark(in[static_cast<size_t>(j)]);
            }
            c.split();
        }
    }
    blocks = b.sets;
    std::vector<int32_t> block_of(static_cast<size_t>(n));
    for (int32_t s = 0; s < n; ++s)
        block_of[static_cast<size_t>(s)] = live[static_cast<size_t>(s)] ? b.set_of[static_cast<size_t>(s)] : -1;
    return block_of;
}

}  // namespace

Dfa minimize(const RawDfa& raw, Budget& budget) {
    const auto n = static_cast<int32_t>(raw.accepting.size());
    const auto k = static_cast<size_t>(raw.classes);
    const std::vector<uint8_t> live = coreachable(raw);
    if (n == 0 || !live[static_cast<size_t>(raw.start)]) return Dfa();
    budget.work(static_cast<int64_t>(raw.table.size()));
    int32_t blocks = 0;
    const std::vector<int32_t> block_of = refine(raw, live, blocks);

    // Renumber the blocks breadth-first from the start's, and build the quotient's table.
    std::vector<int32_t> number(static_cast<size_t>(blocks), -1), representative;
    std::vector<int32_t> representative_of(static_cast<size_t>(blocks), -1);
    for (int32_t s = 0; s < n; ++s) {
        if (block_of[static_cast<size_t>(s)] >= 0 &&
            representative_of[static_cast<size_t>(block_of[static_cast<size_t>(s)])] < 0) {
            representative_of[static_cast<size_t>(block_of[static_cast<size_t>(s)])] = s;
        }
    }
    number[static_cast<size_t>(block_of[static_cast<size_t>(raw.start)])] = 0;
    representative.push_back(raw.start);
    for (size_t i = 0; i < representative.size(); ++i) {
        const auto s = static_cast<size_t>(representative[i]);
        for (size_t c = 0; c < k; ++c) {
            const int32_t t = raw.table[s * k + c];
            if (t == Dfa::kDead || block_of[static_cast<size_t>(t)] < 0) continue;
            auto& id = number[static_cast<size_t>(block_of[static_cast<size_t>(t)])];
            if (id < 0) {
                id = static_cast<int32_t>(representative.size());
                representative.push_back(representative_of[static_cast<size_t>(block_of[static_cast<size_t>(t)])]);
            }
        }
    }
    const size_t states = representative.size();
    budget.dfa_states(static_cast<int64_t>(states));
    // Merge the classes whose columns are equal.
    std::map<std::vector<int32_t>, int> column_class;
    std::vector<int> merged(k);
    std::vector<std::vector<int32_t>> columns;
    for (size_t c = 0; c < k; ++c) {
        std::vector<int32_t> column(states);
        for (size_t q = 0; q < states; ++q) {
            const int32_t t = raw.table[static_cast<size_t>(representative[q]) * k + c];
            column[q] = t == Dfa::kDead || block_of[static_cast<size_t>(t)] < 0
                            ? Dfa::kDead
                            : number[static_cast<size_t>(block_of[static_cast<size_t>(t)])];
        }
        auto it = column_class.find(column);
        if (it == column_class.end()) {
            it = column_class.emplace(column, static_cast<int>(columns.size())).first;
            columns.push_back(std::move(column));
        }
        merged[c] = it->second;
    }
    const size_t classes = columns.size();
    std::vector<int32_t> table(states * classes);
    for (size_t q = 0; q < states; ++q) {
        for (size_t c = 0; c < classes; ++c) table[q * classes + c] = columns[c][q];
    }
    std::vector<uint8_t> accepting(states), class_of(256);
    for (size_t q = 0; q < states; ++q) accepting[q] = raw.accepting[static_cast<size_t>(representative[q])];
    for (size_t b = 0; b < 256; ++b) class_of[b] = static_cast<uint8_t>(merged[raw.class_of[b]]);
    return Dfa(0, std::move(table), std::move(accepting), std::move(class_of), static_cast<int>(classes));
}

}  // namespace rudder::grammar
