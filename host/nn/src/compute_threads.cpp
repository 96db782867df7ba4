#include <rudder/nn/compute_threads.hpp>

#include <ATen/Parallel.h>
#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace rudder {
namespace {

std::atomic<int> g_setting{0};  // the cap; 0 = every core
std::atomic<int> g_shares{0};   // computations holding a share now

// OpenBLAS is whatever the system's libblas.so.3 and libopenblas.so.0 alternatives are, if anything: looked up at
// run time. Its pthreads build keeps a pool of its own, which runs one thread (see the header); its OpenMP build
// runs in LibTorch's OpenMP pool and follows the threads a share decides.
bool openblas_uses_openmp() {
    using GetParallel = int (*)();
    static const auto get = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    return get != nullptr && get() == 2;  // 0 sequential, 1 pthreads, 2 OpenMP
}

void set_openblas_threads(int threads) {
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

void pin_openblas_once() {
    static const bool done = [] {
        if (!openblas_uses_openmp()) set_openblas_threads(1);
        return true;
    }();
    (void)done;
}

// The kernel's count of runnable threads, system-wide; -1 if unknown.
int procs_running() {
    FILE* f = std::fopen("/proc/stat", "r");
    if (f == nullptr) return -1;
    char line[256];
    int running = -1;
    while (std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strncmp(line, "procs_running ", 14) == 0) {
            running = std::atoi(line + 14);
            break;
        }
    }
    std::fclose(f);
    return running;
}

// This process's threads in state R (running or runnable), the calling one included.
int own_running_threads() {
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) return 1;
    int running = 0;
    while (const dirent* entry = readdir(dir)) {
        if (entry->d_name[0] == '.') continue;
        const std::string path = std::string("/proc/self/task/") + entry->d_name + "/stat";
        FILE* f = std::fopen(path.c_str(), "r");
        if (f == nullptr) continue;
        char text[512];
        const size_t n = std::fread(text, 1, sizeof text - 1, f);
        std::fclose(f);
        text[n] = '\0';
        // "<tid> (<comm>) <state> ...": the name may hold spaces and parentheses, the state follows the last ')'.
        const char* close = std::strrchr(text, ')');
        if (close != nullptr && close[1] == ' ' && close[2] == 'R') ++running;
    }
    closedir(dir);
    return std::max(running, 1);
}

}  // namespace

void set_compute_threads(int max_threads) {
    g_setting.store(std::max(0, max_threads));
    pin_openblas_once();
}

int compute_threads_setting() { return g_setting.load(); }

int available_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int busy_threads_elsewhere() {
    int least = -1;
    for (int sample = 0; sample < 3; ++sample) {
        if (sample > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        const int all = procs_running();
        if (all < 0) return 0;
        const int others = std::max(0, all - own_running_threads());
        least = least < 0 ? others : std::min(least, others);
    }
    return least;
}

ComputeShare::ComputeShare(int max_threads) : max_threads_(std::max(0, max_threads)) {
    pin_openblas_once();
    g_shares.fetch_add(1);
    refresh();
}

ComputeShare::~ComputeShare() { g_shares.fetch_sub(1); }

// The cap when none was set: OMP_NUM_THREADS when the environment gives one (a user's explicit choice), else every
// core.
int default_cap(int cores) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    const int n = env != nullptr ? std::atoi(env) : 0;
    return n > 0 ? n : cores;
}

int ComputeShare::refresh() {
    const int cores = available_cores();
    const int setting = max_threads_ > 0 ? max_threads_ : g_setting.load();
    const int cap = setting > 0 ? setting : default_cap(cores);
    const int free_cores = std::max(1, cores - busy_threads_elsewhere());
    const int threads = std::max(1, std::min(cap, free_cores / std::max(1, g_shares.load())));
    // The first call on a thread sets LibTorch's defaults for it; ours go after it.
    if (threads != threads_ || at::get_num_threads() != threads) {
        at::set_num_threads(threads);
        if (openblas_uses_openmp()) set_openblas_threads(threads);
    }
    threads_ = threads;
    return threads_;
}

}  // namespace rudder
