// row_products' kernel compiled for AVX2, FMA and F16C (host/nn/CMakeLists.txt).
#include "row_products_kernel.hpp"

namespace rudder::nn::row_products::isa {

void avx2(const float* x, int64_t M, int64_t K, const void* w, Weights weights, int64_t first, int64_t last, float* out,
          int64_t ldo) {
    multiply_with(x, M, K, w, weights, first, last, out, ldo);
}

}  // namespace rudder::nn::row_products::isa
