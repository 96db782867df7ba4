#include "row_products.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RUDDER_ROW_PRODUCTS 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace rudder::nn::row_products {

#ifdef RUDDER_ROW_PRODUCTS
namespace {

#define RUDDER_AVX2 __attribute__((target("avx2,fma,f16c")))

// K is taken in chunks: a chunk of every activation row (M x 2 KB) stays in the core's cache while the weight rows
// stream past it once. Every sum adds its chunks in order, so a row's result does not depend on M or on the rows
// computed beside it (an output layer run on a sampler's masked positions only gives their rows of the full one).
constexpr int64_t kChunk = 512;
// Weight rows whose partial sums stay in cache across the chunks.
constexpr int64_t kPanel = 64;
// A block: 3 activation rows by 4 weight rows, 12 accumulators + 3 activations + 1 weight = AVX2's 16 registers.
constexpr int kRows = 3, kColumns = 4;

template <Weights W>
RUDDER_AVX2 inline __m256 load8(const void* w, int64_t at) {
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

template <Weights W>
RUDDER_AVX2 inline float load1(const void* w, int64_t at) {
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

RUDDER_AVX2 inline float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// R activation rows (from x) by C weight rows (from `row`) over k in [k0, k1): out[i * ldo + j] is written with the
// sums (the first chunk) or has them added.
template <Weights W, int R, int C>
RUDDER_AVX2 void block(const float* x, int64_t K, const void* w, int64_t row, int64_t k0, int64_t k1, float* out,
                       int64_t ldo, bool add) {
    __m256 acc[R][C];
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) acc[i][j] = _mm256_setzero_ps();
    int64_t k = k0;
    for (; k + 8 <= k1; k += 8) {
        __m256 xs[R];
        for (int i = 0; i < R; ++i) xs[i] = _mm256_loadu_ps(x + i * K + k);
        for (int j = 0; j < C; ++j) {
            const __m256 ws = load8<W>(w, (row + j) * K + k);
            for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(xs[i], ws, acc[i][j]);
        }
    }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
            float s = sum8(acc[i][j]);
            for (int64_t t = k; t < k1; ++t) s += x[i * K + t] * load1<W>(w, (row + j) * K + t);
            float& o = out[i * ldo + j];
            o = add ? o + s : s;
        }
}

// Every activation row by C weight rows from `row`.
template <Weights W, int C>
RUDDER_AVX2 void all_rows(const float* x, int64_t M, int64_t K, const void* w, int64_t row, int64_t k0, int64_t k1,
                          float* out, int64_t ldo, bool add) {
    int64_t m = 0;
    for (; m + kRows <= M; m += kRows) block<W, kRows, C>(x + m * K, K, w, row, k0, k1, out + m * ldo, ldo, add);
    if (M - m == 2) block<W, 2, C>(x + m * K, K, w, row, k0, k1, out + m * ldo, ldo, add);
    if (M - m == 1) block<W, 1, C>(x + m * K, K, w, row, k0, k1, out + m * ldo, ldo, add);
}

template <Weights W>
RUDDER_AVX2 void multiply_as(const float* x, int64_t M, int64_t K, const void* w, int64_t first, int64_t last,
                             float* out, int64_t ldo) {
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

}  // namespace

bool available() {
    static const bool yes = [] {
        // (clang's __builtin_cpu_supports does not know "f16c": CPUID leaf 1, ECX bit 29)
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
        return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return yes;
}

void multiply(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last,
              float* out, int64_t ldo) {
    switch (weights) {
        case Weights::bfloat16: return multiply_as<Weights::bfloat16>(x, M, K, w, first, last, out, ldo);
        case Weights::float16: return multiply_as<Weights::float16>(x, M, K, w, first, last, out, ldo);
        case Weights::int8: return multiply_as<Weights::int8>(x, M, K, w, first, last, out, ldo);
    }
}

#else

bool available() { return false; }

void multiply(const float*, int64_t, int64_t, const void*, Weights, int64_t, int64_t, float*, int64_t) {
    throw std::logic_error("row_products::multiply: this CPU has no AVX2 (available() is false)");
}

#endif

}  // namespace rudder::nn::row_products
