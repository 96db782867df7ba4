// A loop over rows split among LibTorch's compute threads, for code of Rudder's own (not LibTorch operators) that
// reads or writes independent rows: the products of held weights, the masks of a guidance step, top-k per row.
//
// Why not at::parallel_for: in LibTorch's OpenMP build (Debian's, PyTorch's wheels) it is a header whose
// `#pragma omp parallel` only runs in parallel in code compiled with OpenMP on GNU's runtime, which clang does not
// generate (-fopenmp=libgomp links it but compiles the pragma away): compiled by clang, the loop ran on the calling
// thread alone. parallel_rows calls libgomp's GOMP_parallel itself, the call GCC emits for that pragma, so the rows
// run on the pool LibTorch and OpenBLAS already use (one pool; never a second) at LibTorch's thread count. Targets
// that include this link rudder_torch_pool (CMakeLists.txt: this header and the libgomp LibTorch runs on).
#pragma once

#include <ATen/Config.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

#if AT_PARALLEL_OPENMP
#ifdef _OPENMP
#include <omp.h>  // (its declarations, where a file is compiled with OpenMP after all)
#else
extern "C" {
int omp_get_thread_num(void);
int omp_get_num_threads(void);
int omp_in_parallel(void);
}
#endif
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
#endif

namespace rudder {

// f(first, last) over [begin, end) in one contiguous share per thread, each of at least `grain` rows; on the calling
// thread alone when there is one share or when already inside a parallel region. An exception thrown by f on any
// thread is rethrown here once every share has ended.
template <typename F>
void parallel_rows(int64_t begin, int64_t end, int64_t grain, const F& f) {
    if (end <= begin) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t shares = std::min<int64_t>(at::get_num_threads(), (end - begin + grain - 1) / grain);
#if AT_PARALLEL_OPENMP
    if (shares > 1 && !omp_in_parallel()) {
        struct Job {
            const F* f;
            int64_t begin, end;
            std::exception_ptr error;
            std::mutex error_mutex;
        } job{&f, begin, end, nullptr, {}};
        GOMP_parallel(
            [](void* data) {
                Job& j = *static_cast<Job*>(data);
                const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
                const int64_t chunk = (j.end - j.begin + threads - 1) / threads;
                const int64_t first = j.begin + t * chunk, last = std::min(j.end, first + chunk);
                if (first >= last) return;
                try {
                    (*j.f)(first, last);
                } catch (...) {
                    std::lock_guard<std::mutex> lock(j.error_mutex);
                    if (!j.error) j.error = std::current_exception();
                }
            },
            &job, static_cast<unsigned>(shares), 0);
        if (job.error) std::rethrow_exception(job.error);
        return;
    }
#endif
    at::parallel_for(begin, end, grain, f);  // one share, a region already parallel, or another parallel backend
}

}  // namespace rudder
