#include "common/util/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace trainmem {

namespace {

// A number from a one-line file such as cgroup v2's memory.max; false for "max" (no limit) or no file.
bool read_number(const char* path, std::uint64_t& value) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return false;
  std::istringstream parse(text);
  return static_cast<bool>(parse >> value);
}

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  m.available_bytes = pages > 0 && page_size > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) : 0;
  m.source = "physical memory";
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::uint64_t kib = 0;
    std::string unit;
    if (key == "MemAvailable:" && meminfo >> kib >> unit) {
      m.available_bytes = kib * 1024;
      m.source = "MemAvailable in /proc/meminfo";
      break;
    }
    std::getline(meminfo, unit);  // the rest of the line
  }
  std::uint64_t limit = 0, used = 0;
  if (read_number("/sys/fs/cgroup/memory.max", limit) && read_number("/sys/fs/cgroup/memory.current", used)) {
    const std::uint64_t room = limit > used ? limit - used : 0;
    if (room < m.available_bytes) {
      m.available_bytes = room;
      m.source = "the container's limit, /sys/fs/cgroup/memory.max";
    }
  }
  return m;
}

}  // namespace trainmem
