#include "row_products.hpp"

#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RUDDER_ROW_PRODUCTS 1
#include <cpuid.h>
#endif

namespace rudder::nn::row_products {

#ifdef RUDDER_ROW_PRODUCTS

bool available() {
    static const bool yes = [] {
        // (clang's __builtin_cpu_supports does not know "f16c": CPUID leaf 1, ECX bit 29)
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
        return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return yes;
}

// (__builtin_cpu_supports reports AVX-512F only where the OS saves its registers)
bool avx512_available() {
    static const bool yes = available() && __builtin_cpu_supports("avx512f");
    return yes;
}

int64_t most_rows() { return avx512_available() ? 64 : 48; }

void multiply(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last,
              float* out, int64_t ldo) {
    if (avx512_available()) return isa::avx512(x, M, K, w, weights, first, last, out, ldo);
    if (!available()) throw std::logic_error("row_products::multiply: this CPU has no AVX2, FMA and F16C");
    isa::avx2(x, M, K, w, weights, first, last, out, ldo);
}

#else

bool available() { return false; }
bool avx512_available() { return false; }
int64_t most_rows() { return 0; }

void multiply(const float*, int64_t, int64_t, const void*, Weights, int64_t, int64_t, float*, int64_t) {
    throw std::logic_error("row_products::multiply: not an x86-64 CPU (available() is false)");
}

#endif

}  // namespace rudder::nn::row_products
