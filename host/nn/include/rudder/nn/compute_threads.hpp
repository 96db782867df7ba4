// How many threads tensor computations use, process-wide.
#pragma once

namespace rudder {

// Sets LibTorch's intra-op pool and, when its BLAS is OpenBLAS (Debian's LibTorch calls the system BLAS),
// OpenBLAS's own pool, which at::set_num_threads does not reach. Left alone, OpenBLAS's idle workers spin in
// sched_yield and take about 12% of a core from a run asked to use one thread (seen on `rudder train` with
// threads 1, two runs sharing two cores).
void set_compute_threads(int threads);

}  // namespace rudder
