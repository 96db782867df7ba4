#include "batches.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <random>

#include <rudder/text/words.hpp>
#include "networks.hpp"

namespace rudder::train {

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The order of the examples in one epoch: a Fisher-Yates shuffle written out, so it is the same with any
// standard library.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::mt19937_64 rng(derived_seed(seed, Stream::epoch_order, static_cast<uint64_t>(epoch)));
    for (int64_t i = n - 1; i > 0; --i)
        std::swap(order[static_cast<size_t>(i)], order[rng() % static_cast<uint64_t>(i + 1)]);
    return order;
}

// Row b of span targets [B, L+1, L+1] for a sentence of n words: every span [i, j) of the sentence is "no
// constituent" (0) unless `spans` ((start, end, label + 1) triples) has it; the rest stays -1.
void fill_span_targets(at::Tensor& targets, int64_t b, int64_t n, const std::vector<int64_t>& spans) {
    auto row = targets.accessor<int64_t, 3>()[b];
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j <= n; ++j) row[i][j] = 0;
    for (size_t k = 0; k + 2 < spans.size(); k += 3) row[spans[k]][spans[k + 1]] = spans[k + 2];
}

// A batch of treebank sentences, padded to the batch's longest: word ids, features and the targets of the kind.
nn::TrainingBatch make_syntax_batch(const std::vector<Example>& examples, const std::vector<int64_t>& rows,
                                    const std::string& kind) {
    const int64_t B = static_cast<int64_t>(rows.size());
    int64_t L = 1;
    for (int64_t row : rows) L = std::max(L, static_cast<int64_t>(examples[static_cast<size_t>(row)].tokens.size()));
    nn::TrainingBatch batch;
    batch.tokens = at::zeros({B, L}, at::kLong);
    batch.features = at::zeros({B, L, syntax::kWordFeatures}, at::kLong);
    batch.targets = kind == "tagger" ? at::full({B, L, 2}, -1, at::kLong) : at::full({B, L + 1, L + 1}, -1, at::kLong);
    auto tokens = batch.tokens.accessor<int64_t, 2>();
    auto features = batch.features.accessor<int64_t, 3>();
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        const auto n = static_cast<int64_t>(e.tokens.size());
        for (int64_t t = 0; t < n; ++t) {
            tokens[b][t] = e.tokens[static_cast<size_t>(t)];
            for (int64_t k = 0; k < syntax::kWordFeatures; ++k)
                features[b][t][k] = e.features[static_cast<size_t>(t * syntax::kWordFeatures + k)];
        }
        if (kind == "tagger") {
            auto targets = batch.targets.accessor<int64_t, 3>();
            for (int64_t t = 0; t < n; ++t) {
                targets[b][t][0] = e.targets[static_cast<size_t>(2 * t)];
                targets[b][t][1] = e.targets[static_cast<size_t>(2 * t + 1)];
            }
        } else {
            fill_span_targets(batch.targets, b, n, e.targets);
        }
    }
    return batch;
}

// A batch for a controller's classifier: tokens padded to max_length (the length the sampler runs at); for the
// syntax classifier tag + 1 per word and 0 after the text, span targets as the parser's; for the attribute
// classifier the text's class.
nn::TrainingBatch make_classifier_batch(const std::vector<Example>& examples, const std::vector<int64_t>& rows,
                                        int64_t max_length, int64_t pad) {
    const int64_t B = static_cast<int64_t>(rows.size()), L = max_length;
    nn::TrainingBatch batch;
    batch.tokens = at::full({B, L}, pad, at::kLong);
    auto tokens = batch.tokens.accessor<int64_t, 2>();
    const bool attribute = !examples.empty() && examples.front().label >= 0;
    if (attribute) {
        batch.classes = at::zeros({B}, at::kLong);
    } else {
        batch.tags = at::zeros({B, L}, at::kLong);
        batch.targets = at::full({B, L + 1, L + 1}, -1, at::kLong);
    }
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        const auto n = static_cast<int64_t>(e.tokens.size());
        for (int64_t t = 0; t < n; ++t) tokens[b][t] = e.tokens[static_cast<size_t>(t)];
        if (attribute) {
            batch.classes[b] = e.label;
            continue;
        }
        auto tags = batch.tags.accessor<int64_t, 2>();
        for (int64_t t = 0; t < n; ++t) tags[b][t] = e.tags[static_cast<size_t>(t)];
        fill_span_targets(batch.targets, b, n, e.targets);
    }
    return batch;
}

// The condition a row trains on under field dropout: each field of `e` kept with probability 1/2 (at least one),
// in their order, joined by the separator the whole representation uses.
std::vector<int64_t> some_fields(const Example& e, std::mt19937_64& rng) {
    const size_t fields = e.field_spans.size() / 2;
    std::vector<bool> keep(fields);
    bool any = false;
    for (size_t f = 0; f < fields; ++f) any |= (keep[f] = (rng() >> 63) != 0);
    if (!any) keep[rng() % fields] = true;
    std::vector<int64_t> condition;
    for (size_t f = 0; f < fields; ++f) {
        if (!keep[f]) continue;
        if (!condition.empty())  // the separator: the tokens between the first field and the second
            condition.insert(condition.end(), e.condition.begin() + e.field_spans[1],
                             e.condition.begin() + e.field_spans[2]);
        condition.insert(condition.end(), e.condition.begin() + e.field_spans[2 * f],
                         e.condition.begin() + e.field_spans[2 * f + 1]);
    }
    return condition;
}

// A batch of examples: tokens padded to max_length, conditions to the batch's longest (denoisers); with `fields_rng`,
// a share `field_dropout` of the rows keep only some of their conditions' fields.
nn::TrainingBatch make_e2e_batch(const std::vector<Example>& examples, const std::vector<int64_t>& rows,
                                 int64_t max_length, int64_t pad, bool conditional, double field_dropout,
                                 std::mt19937_64* fields_rng) {
    const int64_t B = static_cast<int64_t>(rows.size());
    nn::TrainingBatch batch;
    batch.tokens = at::full({B, max_length}, pad, at::kLong);
    auto tokens = batch.tokens.accessor<int64_t, 2>();
    std::vector<std::vector<int64_t>> conditions(static_cast<size_t>(B));
    size_t width = 1;
    for (int64_t b = 0; b < B; ++b) {
        const Example& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        for (size_t j = 0; j < e.tokens.size(); ++j) tokens[b][static_cast<int64_t>(j)] = e.tokens[j];
        auto& condition = conditions[static_cast<size_t>(b)];
        // Drawn for every row, so which rows drop fields does not depend on their field counts.
        const bool drop = fields_rng && static_cast<double>((*fields_rng)() >> 11) * 0x1.0p-53 < field_dropout;
        condition = drop && e.field_spans.size() >= 4 ? some_fields(e, *fields_rng) : e.condition;
        width = std::max(width, condition.size());
    }
    if (!conditional) return batch;
    batch.condition = at::full({B, static_cast<int64_t>(width)}, pad, at::kLong);
    auto condition = batch.condition.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
        const auto& row = conditions[static_cast<size_t>(b)];
        for (size_t j = 0; j < row.size(); ++j) condition[b][static_cast<int64_t>(j)] = row[j];
    }
    return batch;
}

}  // namespace

uint64_t derived_seed(uint64_t seed, Stream stream, uint64_t index) {
    return splitmix64(seed ^ splitmix64((static_cast<uint64_t>(stream) << 56) ^ index));
}

std::vector<int64_t> EpochOrder::rows(int64_t step, int64_t batch_size) {
    std::vector<int64_t> rows;
    for (int64_t position = (step - 1) * batch_size; position < step * batch_size; ++position) {
        if (position / n_ != epoch_) {
            epoch_ = position / n_;
            order_ = epoch_order(n_, seed_, epoch_);
        }
        rows.push_back(order_[static_cast<size_t>(position % n_)]);
    }
    return rows;
}

nn::TrainingBatch make_batch(const TrainConfig& c, const std::vector<Example>& examples,
                             const std::vector<int64_t>& rows, int64_t pad, std::optional<uint64_t> fields_seed) {
    if (is_controller_kind(c.kind)) return make_classifier_batch(examples, rows, c.max_length, pad);
    if (is_syntax_kind(c.kind)) return make_syntax_batch(examples, rows, c.kind);
    if (is_hub_kind(c.kind)) {
        nn::TrainingBatch batch = make_e2e_batch(examples, rows, c.max_length, pad, false, 0.0, nullptr);
        // A prompt is given, never generated: its positions stay clean (LLaDA's supervised fine-tuning does so).
        at::Tensor prompt_length = at::empty({static_cast<int64_t>(rows.size()), 1}, at::kLong);
        auto lengths = prompt_length.accessor<int64_t, 2>();
        for (size_t b = 0; b < rows.size(); ++b)
            lengths[static_cast<int64_t>(b)][0] = examples[static_cast<size_t>(rows[b])].prompt_length;
        batch.clean = at::arange(c.max_length, at::kLong).unsqueeze(0).lt(prompt_length);
        return batch;
    }
    std::optional<std::mt19937_64> fields_rng;
    if (fields_seed && c.field_dropout > 0) fields_rng.emplace(*fields_seed);
    return make_e2e_batch(examples, rows, c.max_length, pad, is_denoiser_kind(c.kind), c.field_dropout,
                          fields_rng ? &*fields_rng : nullptr);
}

}  // namespace rudder::train
