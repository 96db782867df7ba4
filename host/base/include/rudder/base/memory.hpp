// The process's resident memory and the machine's, for the run-memory estimate and its limit.
#pragma once

#include <cstdint>
#include <string>

namespace rudder {

// Bytes of this process resident in memory now (/proc/self/statm); 0 where that cannot be read.
uint64_t resident_bytes();

// Bytes of physical memory in the machine; 0 where that cannot be read.
uint64_t physical_memory_bytes();

// Whether this process allocates with tcmalloc: linked into the rudder command (RUDDER_CLI_TCMALLOC) or preloaded.
// It reuses a step's freed tensors more tightly than glibc's malloc, so a run peaks lower (the run-memory estimate).
bool allocator_is_tcmalloc();

// `bytes` for people: "850 MB", "4.2 GB" (decimal units, as `free -h --si` and disk sizes).
std::string memory_text(uint64_t bytes);

}  // namespace rudder
