// row_products' kernel compiled for AVX-512F (host/nn/CMakeLists.txt).
#include "row_products_kernel.hpp"

namespace rudder::nn::row_products::isa {

void avx512(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last,
            float* out, int64_t ldo) {
    multiply_with(x, M, K, w, weights, first, last, out, ldo);
}

}  // namespace rudder::nn::row_products::isa
