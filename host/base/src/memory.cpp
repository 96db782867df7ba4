#include <rudder/base/memory.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace rudder {

uint64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    uint64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages)) return 0;
    const long page = ::sysconf(_SC_PAGESIZE);
    return page > 0 ? resident_pages * static_cast<uint64_t>(page) : 0;
}

uint64_t physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

bool allocator_is_tcmalloc() {
    // tcmalloc exports its entry points under tc_ names beside malloc's; a copy dlopen()ed locally is not in the
    // global scope and does not replace malloc, so it is rightly not found.
    static const bool found = ::dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr;
    return found;
}

std::string memory_text(uint64_t bytes) {
    char text[32];
    if (bytes >= 1000ull * 1000 * 1000)
        std::snprintf(text, sizeof text, "%.1f GB", static_cast<double>(bytes) / 1e9);
    else
        std::snprintf(text, sizeof text, "%.0f MB", static_cast<double>(bytes) / 1e6);
    return text;
}

}  // namespace rudder
