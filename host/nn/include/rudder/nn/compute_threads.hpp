// Compute threads: how many threads tensor computations use, decided here for every entry point (the CLI's
// --threads, the trainer's training.threads, rudder_set_compute_threads in the C API and Python).
//
// Three rules, each measured on the project's 2-core machine (docs/design.md, "Compute threads"):
//   - LibTorch's OpenMP pool owns the parallelism and OpenBLAS's own pool runs one thread. With both at two threads
//     on two cores their busy-waiting workers take turns stealing the cores: a step costs twice what one thread
//     costs, and 3 to 5 times when another process keeps a core busy.
//   - A computation uses at most the cores no other process keeps busy. OpenMP's workers spin between parallel
//     regions, which is what makes two threads fast on idle cores, and what makes them collapse on a core that
//     another process holds; a computation that sees that load uses one thread fewer, so nothing spins against it.
//   - Computations running at once in one process (generators on several threads) share the cores.
// The setting is a cap; within it a run's threads follow the load, re-decided while it runs. Samples do not depend
// on the count; trained weights do, in their last bits (the gradients' sums change order), so training is
// reproducible bit for bit at one thread, or while the load does not change.
#pragma once

namespace rudder {

// The most threads a computation may use, process-wide; 0 (the default) means OMP_NUM_THREADS when the environment
// sets it, else every core this process may run on. Also sets OpenBLAS's pool to one thread. Any thread, any time;
// computations pick it up at their next refresh.
void set_compute_threads(int max_threads);
// The cap as set (0 = every core).
int compute_threads_setting();
// The cores this process may run on (its CPU affinity).
int available_cores();
// Threads of other processes running or ready to run now (the kernel's procs_running less this process's own
// running threads), the least of a few samples a fraction of a millisecond apart so that a passing burst does not
// count; 0 where /proc cannot tell.
int busy_threads_elsewhere();

// Held by a computation while it runs (a generator's run, a training run, an annotation pass): the threads it
// may use, applied to LibTorch's pool on the calling thread (OpenMP's thread count is per thread). refresh()
// decides again: at most the cap, at most the cores other processes leave free, divided among the shares this
// process holds at the moment, and at least one. Not thread-safe: one share per computing thread.
class ComputeShare {
public:
    // `max_threads` > 0: this computation's own cap (the trainer's training.threads); 0: set_compute_threads's.
    // Decides and applies once.
    explicit ComputeShare(int max_threads = 0);
    ~ComputeShare();
    ComputeShare(const ComputeShare&) = delete;
    ComputeShare& operator=(const ComputeShare&) = delete;

    // Decides and applies; returns the threads now in use. Costs a few reads of /proc (well under a millisecond).
    int refresh();
    int threads() const { return threads_; }

private:
    int max_threads_ = 0;
    int threads_ = 0;
};

}  // namespace rudder
