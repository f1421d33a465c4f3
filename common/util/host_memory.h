// How much host memory a run may still take: checked before a dataset or a synthetic corpus is
// read into memory, so that a run too large for this machine is refused with its size and the
// limit instead of being killed by the kernel (or throwing std::bad_alloc) halfway through.
#pragma once
#include <cstdint>
#include <string>

namespace trainmem {

struct HostMemory {
  std::uint64_t available_bytes = 0;  // what can be allocated now
  std::string source;                 // where the figure comes from, for messages ("MemAvailable", ...)
};

// The smallest of the kernel's MemAvailable (/proc/meminfo), inside a container the room left
// under its cgroup limit (memory.max - memory.current), and the room left under the process's own
// limits (ulimit -v: RLIMIT_AS - VmSize; ulimit -d: RLIMIT_DATA - VmData); the physical memory
// where none is readable.
HostMemory host_memory();

}  // namespace trainmem
