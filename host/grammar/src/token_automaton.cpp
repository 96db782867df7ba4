#include <rudder/grammar/token_automaton.hpp>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <numeric>
#include <stdexcept>

namespace rudder::grammar {

void TokenSet::seal(int64_t vocab_size) {
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    count_ = static_cast<int64_t>(ids_.size());
    // Bits take V / 8 bytes, ids 4 a token: bits once more than one token in 32 is in the set.
    if (count_ * 32 > vocab_size) {
        bits_.assign(token_words(vocab_size), 0);
        for (int32_t v : ids_) bits_[static_cast<size_t>(v) / 32] |= uint32_t{1} << (v % 32);
        ids_ = {};
    } else {
        ids_.shrink_to_fit();
    }
}

bool TokenSet::contains(int64_t token) const {
    if (!bits_.empty()) return (bits_[static_cast<size_t>(token) / 32] >> (token % 32)) & 1u;
    return std::binary_search(ids_.begin(), ids_.end(), static_cast<int32_t>(token));
}

void TokenSet::or_into(uint32_t* words) const {
    if (!bits_.empty()) {
        for (size_t w = 0; w < bits_.size(); ++w) words[w] |= bits_[w];
        return;
    }
    for (int32_t v : ids_) words[static_cast<size_t>(v) / 32] |= uint32_t{1} << (v % 32);
}

namespace {

Vocabulary::Trie build_trie(const std::vector<std::string>& pieces, const std::vector<bool>& skip) {
    std::vector<int32_t> order;
    for (size_t v = 0; v < pieces.size(); ++v)
        if (!skip[v]) order.push_back(static_cast<int32_t>(v));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });
    Vocabulary::Trie t;
    std::vector<int32_t> open;  // the nodes on the path to the current piece, by depth - 1
    std::vector<std::vector<int32_t>> ends;
    const std::string* previous = nullptr;
    for (int32_t v : order) {
        const std::string& piece = pieces[static_cast<size_t>(v)];
        if (piece.empty()) {
            t.empty.push_back(v);
            continue;
        }
        size_t common = 0;  // the prefix shared with the previous piece: its nodes are reused
        if (previous != nullptr)
            while (common < previous->size() && common < piece.size() && (*previous)[common] == piece[common]) ++common;
        for (size_t d = common; d < open.size(); ++d)
            t.subtree_end[static_cast<size_t>(open[d])] = static_cast<int32_t>(t.byte.size());
        open.resize(common);
        for (size_t d = common; d < piece.size(); ++d) {
            open.push_back(static_cast<int32_t>(t.byte.size()));
            t.byte.push_back(static_cast<uint8_t>(piece[d]));
            t.depth.push_back(static_cast<int32_t>(d + 1));
            t.subtree_end.push_back(0);
            ends.emplace_back();
        }
        ends[static_cast<size_t>(open.back())].push_back(v);
        t.max_depth = std::max(t.max_depth, static_cast<int32_t>(piece.size()));
        previous = &piece;
    }
    for (int32_t node : open) t.subtree_end[static_cast<size_t>(node)] = static_cast<int32_t>(t.byte.size());
    t.end_begin.reserve(ends.size() + 1);
    for (const auto& e : ends) {
        t.end_begin.push_back(static_cast<int32_t>(t.ends.size()));
        t.ends.insert(t.ends.end(), e.begin(), e.end());
    }
    t.end_begin.push_back(static_cast<int32_t>(t.ends.size()));
    return t;
}

}  // namespace

Vocabulary::Vocabulary(Pieces pieces) : pieces_(std::move(pieces)) {
    const int64_t V = pieces_.vocab_size();
    if (pieces_.kinds() < 1) throw std::invalid_argument("the vocabulary's pieces have no kind");
    for (const auto& kind : pieces_.text)
        if (static_cast<int64_t>(kind.size()) != V)
            throw std::invalid_argument("the vocabulary's pieces differ in size between kinds");
    for (int32_t k : pieces_.kind_after)
        if (k < 0 || k >= pieces_.kinds()) throw std::invalid_argument("a token leaves a kind the pieces do not have");
    skipped_.assign(static_cast<size_t>(V), false);
    for (int64_t v : pieces_.never)
        if (v >= 0 && v < V) skipped_[static_cast<size_t>(v)] = true;
    if (pieces_.end_token >= 0 && pieces_.end_token < V) skipped_[static_cast<size_t>(pieces_.end_token)] = true;
    for (const auto& kind : pieces_.text) tries_.push_back(build_trie(kind, skipped_));
}

size_t Vocabulary::memory_bytes() const {
    size_t bytes = 0;
    for (const Trie& t : tries_)
        bytes += t.byte.capacity() + (t.depth.capacity() + t.subtree_end.capacity() + t.end_begin.capacity() +
                                      t.ends.capacity() + t.empty.capacity()) *
                                         sizeof(int32_t);
    for (const auto& kind : pieces_.text)
        for (const auto& piece : kind) bytes += sizeof(piece) + piece.capacity();
    return bytes;
}

TokenAutomaton::TokenAutomaton(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocabulary)
    : dfa_(std::move(dfa)), vocabulary_(std::move(vocabulary)), kinds_(vocabulary_->kinds()) {
    edges_.resize(static_cast<size_t>(states()));
}

int32_t TokenAutomaton::next(int32_t state, int64_t token) const {
    if (state == kDead || token < 0 || token >= vocab_size()) return kDead;
    const Pieces& p = pieces();
    if (state == end_state()) return vocabulary_->skipped(token) && token != p.end_token ? kDead : state;
    if (token == p.end_token) return accepting(state) ? end_state() : kDead;
    if (vocabulary_->skipped(token)) return kDead;
    const int32_t kind = state % kinds_;
    int32_t s = state / kinds_;
    for (const char c : p.text[static_cast<size_t>(kind)][static_cast<size_t>(token)]) {
        s = dfa_->next(s, static_cast<uint8_t>(c));
        if (s == Dfa::kDead) return kDead;
    }
    return pair(s, p.kind_after[static_cast<size_t>(token)]);
}

bool TokenAutomaton::accepting(int32_t state) const {
    return state == end_state() || (state >= 0 && state < end_state() && dfa_->accepting(state / kinds_));
}

template <class To>
void TokenAutomaton::walk(int32_t state, To&& to) const {
    const int64_t V = vocab_size();
    const Pieces& p = pieces();
    if (state == end_state()) {
        for (int64_t v = 0; v < V; ++v)
            if (!vocabulary_->skipped(v) || v == p.end_token) to(state, v);
        return;
    }
    const int32_t kind = state % kinds_, from = state / kinds_;
    const Vocabulary::Trie& t = vocabulary_->trie(kind);
    for (int32_t v : t.empty) to(pair(from, p.kind_after[static_cast<size_t>(v)]), v);
    // Depth-first over the trie: the byte automaton's state after each node's prefix, a dead one skipping the
    // node's whole subtree.
    std::vector<int32_t> at(static_cast<size_t>(t.max_depth) + 1, from);
    const int32_t nodes = static_cast<int32_t>(t.byte.size());
    for (int32_t n = 0; n < nodes;) {
        const int32_t d = t.depth[static_cast<size_t>(n)];
        const int32_t s = dfa_->next(at[static_cast<size_t>(d) - 1], t.byte[static_cast<size_t>(n)]);
        if (s == Dfa::kDead) {
            n = t.subtree_end[static_cast<size_t>(n)];
            continue;
        }
        at[static_cast<size_t>(d)] = s;
        for (int32_t e = t.end_begin[static_cast<size_t>(n)]; e < t.end_begin[static_cast<size_t>(n) + 1]; ++e) {
            const int32_t v = t.ends[static_cast<size_t>(e)];
            to(pair(s, p.kind_after[static_cast<size_t>(v)]), v);
        }
        ++n;
    }
    if (p.end_token >= 0 && dfa_->accepting(from)) to(end_state(), p.end_token);
}

std::vector<TokenAutomaton::Edge> TokenAutomaton::expand(int32_t state) const {
    std::map<int32_t, TokenSet> by_target;
    walk(state, [&](int32_t target, int64_t v) { by_target[target].add(v); });
    std::vector<Edge> out;
    out.reserve(by_target.size());
    for (auto& [target, tokens] : by_target) {
        tokens.seal(vocab_size());
        out.push_back({target, std::move(tokens)});
    }
    return out;
}

size_t TokenAutomaton::edges_bytes(const std::vector<Edge>& edges) const {
    size_t bytes = edges.capacity() * sizeof(Edge);
    for (const Edge& e : edges) bytes += e.tokens.memory_bytes();
    return bytes;
}

const std::vector<TokenAutomaton::Edge>& TokenAutomaton::edges(int32_t state) {
    auto& slot = edges_.at(static_cast<size_t>(state));
    if (!slot) {
        slot = expand(state);
        ++expanded_;
        bytes_ += edges_bytes(*slot);
    }
    return *slot;
}

std::optional<int64_t> TokenAutomaton::shortest(int64_t max_tokens, const CompileLimits& limits) {
    // Breadth-first over whole-token transitions from the start, a layer of states per token. A state's targets are
    // walked and forgotten: a search that ends far from the start (a text longer than the run) keeps nothing.
    std::vector<char> seen(static_cast<size_t>(states()), 0);
    std::vector<int32_t> layer{start()}, next_layer;
    seen[static_cast<size_t>(start())] = 1;
    for (int64_t distance = 0; !layer.empty(); ++distance) {
        for (int32_t s : layer)
            if (accepting(s)) return distance;
        if (distance == max_tokens) return max_tokens + 1;
        next_layer.clear();
        const auto add = [&](int32_t target) {
            if (seen[static_cast<size_t>(target)]) return;
            seen[static_cast<size_t>(target)] = 1;
            next_layer.push_back(target);
        };
        for (int32_t s : layer) {
            check_stopped(limits, "the language's shortest text in tokens");
            if (const auto& slot = edges_[static_cast<size_t>(s)]) {
                for (const Edge& e : *slot) add(e.target);
            } else {
                walk(s, [&](int32_t target, int64_t) { add(target); });
            }
        }
        layer.swap(next_layer);
    }
    return std::nullopt;
}

namespace {

std::string mib(size_t bytes) {
    const double m = static_cast<double>(bytes) / (1 << 20);
    char text[32];
    std::snprintf(text, sizeof(text), m < 10 ? "%.1f MiB" : "%.0f MiB", m);
    return text;
}

}  // namespace

void TokenAutomaton::prepare(int64_t positions, const CompileLimits& limits) {
    // A state's transitions hold each token of the vocabulary at most once: as an id (4 bytes, the vector's growth
    // doubling that while they are gathered) or as a bit of a set. So one state takes at most 8 bytes a token, and
    // checking that much room before each one keeps the whole within the limit before anything is allocated.
    const size_t room = static_cast<size_t>(vocab_size()) * 8 + 4096;
    std::vector<char> seen(static_cast<size_t>(states()), 0);
    std::vector<int32_t> layer{start()}, next_layer;
    seen[static_cast<size_t>(start())] = 1;
    int64_t reached = 1;
    const auto over = [&](int64_t position) {
        return LimitError("reading the language token by token over " + std::to_string(positions) +
                          " positions needs more than " + mib(limits.max_table_bytes) +
                          " (CompileLimits::max_table_bytes): by position " + std::to_string(position + 1) +
                          " the text can be in " + std::to_string(reached) + " states of its automaton (of " +
                          std::to_string(dfa_->size() * kinds_ + 1) + "), whose transitions over the vocabulary's " +
                          std::to_string(vocab_size()) + " tokens take " + mib(memory_bytes()) + " already");
    };
    for (int64_t position = 0; position < positions && !layer.empty(); ++position) {
        next_layer.clear();
        for (int32_t s : layer) {
            check_stopped(limits, "the language's token transitions");
            if (!edges_[static_cast<size_t>(s)] && memory_bytes() + room > limits.max_table_bytes) throw over(position);
            for (const Edge& e : edges(s)) {
                if (seen[static_cast<size_t>(e.target)]) continue;
                seen[static_cast<size_t>(e.target)] = 1;
                next_layer.push_back(e.target);
                ++reached;
            }
            // A state of many targets (a word vocabulary, each token somewhere else) can take more than the room:
            // the limit is then passed by that one state at most.
            if (memory_bytes() > limits.max_table_bytes) throw over(position);
        }
        layer.swap(next_layer);
    }
}

size_t TokenAutomaton::memory_bytes() const { return edges_.capacity() * sizeof(edges_[0]) + bytes_; }

}  // namespace rudder::grammar
