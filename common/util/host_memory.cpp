#include "common/util/host_memory.h"

#include <sys/resource.h>
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

// A "Key:   1234 kB" line of /proc/self/status, in bytes; false where it is not there.
bool read_status_bytes(const std::string& wanted, std::uint64_t& bytes) {
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    std::uint64_t kib = 0;
    if (key == wanted && status >> kib) {
      bytes = kib * 1024;
      return true;
    }
    std::string rest;
    std::getline(status, rest);
  }
  return false;
}

// The room left under a process limit (ulimit -v: RLIMIT_AS, measured against VmSize; ulimit -d:
// RLIMIT_DATA, against VmData); false where the limit is not set.
bool room_under_limit(int resource, const std::string& usage_key, std::uint64_t& room) {
  struct rlimit limit {};
  if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return false;
  std::uint64_t used = 0;
  if (!read_status_bytes(usage_key, used)) return false;
  room = limit.rlim_cur > used ? static_cast<std::uint64_t>(limit.rlim_cur) - used : 0;
  return true;
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
  // The process's own limits: memory the kernel would give, the process may not take.
  const struct {
    int resource;
    const char* usage_key;
    const char* source;
  } limits[] = {{RLIMIT_AS, "VmSize:", "the process's address-space limit, ulimit -v"},
                {RLIMIT_DATA, "VmData:", "the process's data limit, ulimit -d"}};
  for (const auto& limit : limits) {
    std::uint64_t room = 0;
    if (room_under_limit(limit.resource, limit.usage_key, room) && room < m.available_bytes) {
      m.available_bytes = room;
      m.source = limit.source;
    }
  }
  return m;
}

}  // namespace trainmem
