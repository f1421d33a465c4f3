// Fault injection for tests: a `write` that fails on demand, preloaded into the program under
// test (LD_PRELOAD=libwrite_fault_shim.so). Writes to files whose path contains a pattern go
// through until N bytes are written (the last one cut short at N), then each fails, as on a full
// disk or a broken one, or the process sends itself SIGTERM, as `kill` would mid-write.
//
//   WRITE_FAULT=ENOSPC|EIO|SIGTERM  what happens
//   WRITE_FAULT_PATH=TEXT           for files whose path (as /proc/self/fd/N names it) contains TEXT
//   WRITE_FAULT_AFTER=N             after N bytes written to them (default 0)
//
// Without WRITE_FAULT and WRITE_FAULT_PATH every write goes through unchanged. Tests only.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using WriteFunction = ssize_t (*)(int, const void*, size_t);

ssize_t real_write(int fd, const void* buffer, size_t count) {
  static const auto next = reinterpret_cast<WriteFunction>(dlsym(RTLD_NEXT, "write"));
  return next(fd, buffer, count);
}

bool path_contains(int fd, const char* text) {
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char path[4096];
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n < 0) return false;
  path[n] = '\0';
  return std::strstr(path, text) != nullptr;
}

long long g_written = 0;  // bytes let through to the matching files so far

}  // namespace

extern "C" ssize_t write(int fd, const void* buffer, size_t count) {
  const char* fault = std::getenv("WRITE_FAULT");
  const char* pattern = std::getenv("WRITE_FAULT_PATH");
  if (fault == nullptr || pattern == nullptr || !path_contains(fd, pattern)) return real_write(fd, buffer, count);
  const char* after_text = std::getenv("WRITE_FAULT_AFTER");
  const long long after = after_text != nullptr ? std::atoll(after_text) : 0;
  if (g_written < after) {
    const auto allowed = static_cast<size_t>(after - g_written);
    const ssize_t written = real_write(fd, buffer, count < allowed ? count : allowed);
    if (written > 0) g_written += written;
    return written;
  }
  if (std::strcmp(fault, "SIGTERM") == 0) {
    std::raise(SIGTERM);  // a program that survives it goes on writing
    return real_write(fd, buffer, count);
  }
  errno = std::strcmp(fault, "EIO") == 0 ? EIO : ENOSPC;
  return -1;
}
