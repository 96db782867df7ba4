#include <rudder/grammar/completion.hpp>

#include <algorithm>
#include <stdexcept>

namespace rudder::grammar {
namespace {

// Marks `states` in `mark` for membership tests, and clears them again when it goes out of scope.
class Marked {
public:
    Marked(std::vector<char>& mark, const std::vector<int32_t>& states) : mark_(mark), states_(states) {
        for (int32_t s : states_) mark_[static_cast<size_t>(s)] = 1;
    }
    ~Marked() {
        for (int32_t s : states_) mark_[static_cast<size_t>(s)] = 0;
    }
    bool operator()(int32_t s) const { return s >= 0 && mark_[static_cast<size_t>(s)] != 0; }

private:
    std::vector<char>& mark_;
    const std::vector<int32_t>& states_;
};

}  // namespace

void Completion::step_forward(const std::vector<int32_t>& from, int64_t token, std::vector<int32_t>& to) {
    to.clear();
    const auto add = [&](int32_t s) {
        if (s == TokenAutomaton::kDead || mark_[static_cast<size_t>(s)]) return;
        mark_[static_cast<size_t>(s)] = 1;
        to.push_back(s);
    };
    for (int32_t q : from) {
        if (token != kFree) {
            add(automaton_.next(q, token));
        } else {
            for (const auto& e : automaton_.edges(q)) add(e.target);
        }
    }
    for (int32_t s : to) mark_[static_cast<size_t>(s)] = 0;
    std::sort(to.begin(), to.end());
}

void Completion::set(const std::vector<int64_t>& tokens) {
    tokens_ = tokens;
    const size_t L = tokens.size();
    mark_.assign(static_cast<size_t>(automaton_.states()), 0);
    member_.assign(static_cast<size_t>(automaton_.states()), 0);
    // Forward: every state each prefix may end in.
    std::vector<std::vector<int32_t>> forward(L + 1);
    forward[0] = {automaton_.start()};
    for (size_t i = 0; i < L; ++i) step_forward(forward[i], tokens[i], forward[i + 1]);
    // Backward: of those, the ones from which the rest of the sequence can still reach acceptance.
    reach_.assign(L + 1, {});
    for (int32_t s : forward[L])
        if (automaton_.accepting(s)) reach_[L].push_back(s);
    for (size_t i = L; i-- > 0;) {
        const Marked later(member_, reach_[i + 1]);
        for (int32_t q : forward[i]) {
            bool on = false;
            if (tokens[i] != kFree) {
                on = later(automaton_.next(q, tokens[i]));
            } else {
                for (const auto& e : automaton_.edges(q))
                    if (later(e.target)) {
                        on = true;
                        break;
                    }
            }
            if (on) reach_[i].push_back(q);
        }
    }
}

bool Completion::possible() const { return !reach_.empty() && !reach_[0].empty(); }

void Completion::allowed(int64_t i, uint32_t* bits) {
    if (i < 0 || static_cast<size_t>(i) + 1 >= reach_.size()) throw std::out_of_range("Completion::allowed: position");
    std::fill(bits, bits + token_words(automaton_.vocab_size()), 0u);
    const Marked later(member_, reach_[static_cast<size_t>(i) + 1]);
    for (int32_t q : reach_[static_cast<size_t>(i)])
        for (const auto& e : automaton_.edges(q))
            if (later(e.target)) e.tokens.or_into(bits);
}

std::vector<bool> Completion::accept(const std::vector<int64_t>& tokens, const std::vector<int64_t>& rows,
                                     const std::vector<int64_t>& proposed) {
    if (rows.size() != proposed.size()) throw std::invalid_argument("Completion::accept: a token per row");
    std::vector<int64_t> holes = tokens;
    for (int64_t r : rows) holes.at(static_cast<size_t>(r)) = kFree;
    set(holes);
    const std::vector<std::vector<int32_t>> free_reach = reach_;  // every proposed row still a hole
    std::vector<bool> refused(rows.size(), false);
    std::vector<int32_t> at = {automaton_.start()}, next_at;
    size_t r = 0;
    for (size_t i = 0; i < holes.size(); ++i) {
        const Marked later(member_, free_reach[i + 1]);
        const bool row = r < rows.size() && static_cast<size_t>(rows[r]) == i;
        if (row) {
            // Kept when, from where the kept tokens before it lead, it reaches a state a completion with every later
            // hole free still accepts from.
            next_at.clear();
            for (int32_t q : at) {
                const int32_t s = automaton_.next(q, proposed[r]);
                if (later(s) && std::find(next_at.begin(), next_at.end(), s) == next_at.end()) next_at.push_back(s);
            }
            if (!next_at.empty()) {
                holes[i] = proposed[r];
                at.swap(next_at);
                ++r;
                continue;
            }
            refused[r++] = true;
        }
        // A hole (a refused row stays one) or a placed token: every state it may lead to that can still accept.
        step_forward(at, holes[i], next_at);
        at.clear();
        for (int32_t s : next_at)
            if (later(s)) at.push_back(s);
    }
    set(holes);
    return refused;
}

}  // namespace rudder::grammar
