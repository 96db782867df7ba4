#include "memory_release.hpp"

#include <dlfcn.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rudder::serve {
namespace {

using Call = void (*)();

// tcmalloc's C entry points when it is the allocator (looked up, so the library does not depend on it).
Call tcmalloc_call(const char* name) { return reinterpret_cast<Call>(::dlsym(RTLD_DEFAULT, name)); }

}  // namespace

void release_free_memory() {
    static const Call release = tcmalloc_call("MallocExtension_ReleaseFreeMemory");
    if (release != nullptr) return release();
#if defined(__GLIBC__)
    ::malloc_trim(0);
#endif
}

void release_thread_cache() {
    static const Call mark_idle = tcmalloc_call("MallocExtension_MarkThreadIdle");
    if (mark_idle != nullptr) mark_idle();
}

}  // namespace rudder::serve
