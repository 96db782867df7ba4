#include <rudder/nn/compute_threads.hpp>

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace rudder {

void set_compute_threads(int threads) {
    at::set_num_threads(threads);
    // Looked up at run time: OpenBLAS is whatever the system's libblas.so.3 alternative is, if anything.
    using SetThreads = void (*)(int);
    if (auto set_openblas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
        set_openblas(threads);
}

}  // namespace rudder
