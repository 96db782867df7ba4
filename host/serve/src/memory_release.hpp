// Memory the server has freed, given back: to the system once the server is idle (release_free_memory), and from a
// thread's own cache when it waits for work (release_thread_cache). Under tcmalloc (the rudder command's allocator)
// each thread keeps freed blocks in a cache of its own, which with a thread per connection held tens of megabytes
// after a load; glibc's malloc keeps freed memory in its arenas until trimmed.
#pragma once

namespace rudder::serve {

void release_free_memory();
void release_thread_cache();

}  // namespace rudder::serve
