// The kernel of row_products, written once for both vector widths: row_products_avx2.cpp and
// row_products_avx512.cpp each include it compiled for their own instruction set (eight float lanes and a block of
// 3 x 4, or sixteen and 4 x 6), and row_products.cpp runs the widest this CPU has. Everything here has internal
// linkage, so the two copies never meet.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "row_products.hpp"

namespace rudder::nn::row_products {
namespace {

#if defined(__AVX512F__)
using Vector = __m512;
constexpr int kLanes = 16;
// A block: 4 activation rows by 6 weight rows, 24 accumulators + 4 activations + 1 weight of AVX-512's 32 registers.
constexpr int kRows = 4, kColumns = 6;
inline Vector zero() { return _mm512_setzero_ps(); }
inline Vector load(const float* p) { return _mm512_loadu_ps(p); }
inline Vector fmadd(Vector a, Vector b, Vector c) { return _mm512_fmadd_ps(a, b, c); }
inline float sum(Vector v) { return _mm512_reduce_add_ps(v); }
template <Weights W>
inline Vector load_weights(const void* w, int64_t at) {
    if constexpr (W == Weights::bfloat16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + at));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else if constexpr (W == Weights::float16) {
        return _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + at)));
    } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(w) + at));
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    }
}
#else
using Vector = __m256;
constexpr int kLanes = 8;
// A block: 3 activation rows by 4 weight rows, 12 accumulators + 3 activations + 1 weight = AVX2's 16 registers.
constexpr int kRows = 3, kColumns = 4;
inline Vector zero() { return _mm256_setzero_ps(); }
inline Vector load(const float* p) { return _mm256_loadu_ps(p); }
inline Vector fmadd(Vector a, Vector b, Vector c) { return _mm256_fmadd_ps(a, b, c); }
inline float sum(Vector v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
template <Weights W>
inline Vector load_weights(const void* w, int64_t at) {
    if constexpr (W == Weights::bfloat16) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + at));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (W == Weights::float16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + at)));
    } else {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(w) + at));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    }
}
#endif

template <Weights W>
inline float load_weight(const void* w, int64_t at) {
    if constexpr (W == Weights::bfloat16) {
        const uint32_t bits = uint32_t{static_cast<const uint16_t*>(w)[at]} << 16;
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
    } else if constexpr (W == Weights::float16) {
        return _cvtsh_ss(static_cast<const uint16_t*>(w)[at]);
    } else {
        return static_cast<float>(static_cast<const int8_t*>(w)[at]);
    }
}

// K is taken in chunks: a chunk of every activation row (M x 2 KB) stays in the core's cache while the weight rows
// stream past it once. Every sum adds its chunks in order, so a row's result does not depend on M or on the rows
// computed beside it (an output layer run on a sampler's masked positions only gives their rows of the full one).
constexpr int64_t kChunk = 512;
// Weight rows whose partial sums stay in cache across the chunks.
constexpr int64_t kPanel = 64;

// R activation rows (from x) by C weight rows (from `row`) over k in [k0, k1): out[i * ldo + j] is written with the
// sums (the first chunk) or has them added.
template <Weights W, int R, int C>
void block(const float* x, int64_t K, const void* w, int64_t row, int64_t k0, int64_t k1, float* out, int64_t ldo,
           bool add) {
    Vector acc[R][C];
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = zero();
    int64_t k = k0;
    for (; k + kLanes <= k1; k += kLanes) {
        Vector xs[R];
        for (int i = 0; i < R; ++i) xs[i] = load(x + i * K + k);
        for (int j = 0; j < C; ++j) {
            const Vector ws = load_weights<W>(w, (row + j) * K + k);
            for (int i = 0; i < R; ++i) acc[i][j] = fmadd(xs[i], ws, acc[i][j]);
        }
    }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
            float s = sum(acc[i][j]);
            for (int64_t t = k; t < k1; ++t) s += x[i * K + t] * load_weight<W>(w, (row + j) * K + t);
            float& o = out[i * ldo + j];
            o = add ? o + s : s;
        }
}

// The last M % kRows activation rows, R at a time down to one.
template <Weights W, int C, int R = kRows - 1>
void remaining_rows(const float* x, int64_t left, int64_t K, const void* w, int64_t row, int64_t k0, int64_t k1,
                    float* out, int64_t ldo, bool add) {
    if constexpr (R > 0) {
        if (left == R) return block<W, R, C>(x, K, w, row, k0, k1, out, ldo, add);
        remaining_rows<W, C, R - 1>(x, left, K, w, row, k0, k1, out, ldo, add);
    }
}

// Every activation row by C weight rows from `row`.
template <Weights W, int C>
void all_rows(const float* x, int64_t M, int64_t K, const void* w, int64_t row, int64_t k0, int64_t k1, float* out,
              int64_t ldo, bool add) {
    int64_t m = 0;
    for (; m + kRows <= M; m += kRows) block<W, kRows, C>(x + m * K, K, w, row, k0, k1, out + m * ldo, ldo, add);
    remaining_rows<W, C>(x + m * K, M - m, K, w, row, k0, k1, out + m * ldo, ldo, add);
}

template <Weights W>
void multiply_as(const float* x, int64_t M, int64_t K, const void* w, int64_t first, int64_t last, float* out,
                 int64_t ldo) {
    for (int64_t panel = first; panel < last; panel += kPanel) {
        const int64_t end = std::min(last, panel + kPanel);
        for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
            const int64_t k1 = std::min(K, k0 + kChunk);
            int64_t r = panel;
            for (; r + kColumns <= end; r += kColumns)
                all_rows<W, kColumns>(x, M, K, w, r, k0, k1, out + (r - first), ldo, k0 > 0);
            for (; r < end; ++r) all_rows<W, 1>(x, M, K, w, r, k0, k1, out + (r - first), ldo, k0 > 0);
        }
    }
}

void multiply_with(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last,
                   float* out, int64_t ldo) {
    switch (weights) {
        case Weights::bfloat16: return multiply_as<Weights::bfloat16>(x, M, K, w, first, last, out, ldo);
        case Weights::float16: return multiply_as<Weights::float16>(x, M, K, w, first, last, out, ldo);
        case Weights::int8: return multiply_as<Weights::int8>(x, M, K, w, first, last, out, ldo);
    }
}

}  // namespace
}  // namespace rudder::nn::row_products
