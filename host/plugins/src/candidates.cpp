#include <rudder/plugins/plugins.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <rudder/base/parallel_rows.hpp>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rudder::plugins {
namespace {

// Whether any of n scores (a multiple of 4) is above `bar` (NaN is not). With SSE, compares ORed four at a time and
// read once as a mask: a third faster over a row than the compiler's vectorisation of the plain loop, which reduces
// each block to an integer (measured on 151,936 scores).
bool any_above(const float* scores, int64_t n, float bar) {
#if defined(__SSE2__)
    const __m128 threshold = _mm_set1_ps(bar);
    __m128 above = _mm_setzero_ps();
    for (int64_t j = 0; j < n; j += 4) above = _mm_or_ps(above, _mm_cmpgt_ps(_mm_loadu_ps(scores + j), threshold));
    return _mm_movemask_ps(above) != 0;
#else
    int above = 0;
    for (int64_t j = 0; j < n; ++j) above |= scores[j] > bar;
    return above != 0;
#endif
}

// The k highest of a row's V scores (k <= V), highest first, a tie going to the lower id; NaN counts as -inf. One
// pass: a heap of the k best so far, whose worst sets the bar; blocks of 32 scores none of which clears the bar (the
// test vectorises) are skipped, so past the first few blocks a row costs about one read.
void row_top_k(const float* row, int64_t V, int64_t k, std::vector<std::pair<float, int64_t>>& heap, float* top,
               int64_t* ids) {
    auto better = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    auto key = [](float value) { return std::isnan(value) ? -std::numeric_limits<float>::infinity() : value; };
    heap.clear();
    for (int64_t v = 0; v < k; ++v) heap.emplace_back(key(row[v]), v);
    std::make_heap(heap.begin(), heap.end(), better);  // front: the worst kept
    float bar = heap.front().first;
    // Later ids lose ties, so a score must clear the bar strictly.
    auto offer = [&](int64_t v) {
        if (!(row[v] > bar)) return;
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = {row[v], v};
        std::push_heap(heap.begin(), heap.end(), better);
        bar = heap.front().first;
    };
    constexpr int64_t kBlock = 32;
    int64_t v = k;
    for (; v + kBlock <= V; v += kBlock) {
        if (!any_above(row + v, kBlock, bar)) continue;
        for (int64_t j = 0; j < kBlock; ++j) offer(v + j);
    }
    for (; v < V; ++v) offer(v);
    std::sort_heap(heap.begin(), heap.end(), better);  // best first
    for (int64_t j = 0; j < k; ++j) {
        top[j] = row[heap[static_cast<size_t>(j)].second];
        ids[j] = heap[static_cast<size_t>(j)].second;
    }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> top_candidates(const at::Tensor& scores, int64_t k) {
    const int64_t N = scores.size(0), V = scores.size(1);
    k = std::min(k, V);
    // On the CPU one pass per row (row_top_k). For 8 rows of 151,936 at one thread, at::topk takes 2.0 ms, at::topk
    // over the chunks of 64 with the largest maxima 0.71, this 0.49 (one row: 0.33, 0.10, 0.046), measured.
    if (!scores.device().is_cpu() || scores.scalar_type() != at::kFloat || k == 0) return scores.topk(k, 1);
    const at::Tensor rows = scores.contiguous();
    at::Tensor top = at::empty({N, k}, rows.options());
    at::Tensor ids = at::empty({N, k}, rows.options().dtype(at::kLong));
    const float* data = rows.data_ptr<float>();
    float* top_data = top.data_ptr<float>();
    int64_t* id_data = ids.data_ptr<int64_t>();
    rudder::parallel_rows(0, N, 1, [&](int64_t begin, int64_t end) {
        std::vector<std::pair<float, int64_t>> heap;
        heap.reserve(static_cast<size_t>(k));
        for (int64_t r = begin; r < end; ++r) row_top_k(data + r * V, V, k, heap, top_data + r * k, id_data + r * k);
    });
    return {top, ids};
}

}  // namespace rudder::plugins
