// The process's own memory limit (ulimit -d here: RLIMIT_DATA; ulimit -v alike) as the host
// memory a run may take, and the CPU backend's device memory refused by the host reported as
// host memory running out, not as the device's out-of-memory report with its advice. Each case
// runs in a child process, which keeps the limit to itself.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/util/byte_size.h"
#include "common/util/host_memory.h"

namespace trainmem {
namespace {

// VmData of this process (/proc/self/status), in bytes.
std::uint64_t data_bytes_now() {
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    std::uint64_t kib = 0;
    if (key == "VmData:" && status >> kib) return kib * 1024;
    std::getline(status, key);
  }
  return 0;
}

// Leaves this process `room` bytes of private writable memory beyond what it has now.
void limit_data_to(std::uint64_t room) {
  const std::uint64_t limit = data_bytes_now() + room;
  const struct rlimit l {limit, limit};
  if (::setrlimit(RLIMIT_DATA, &l) != 0) ::_exit(10);
}

constexpr std::uint64_t kRoom = 256 * MiB;

TEST(HostLimits, TheHostMemoryAvailableIsTheRoomUnderTheProcesssLimit) {
  EXPECT_EXIT(
      {
        limit_data_to(kRoom);
        const HostMemory m = host_memory();
        const bool named = m.source.find("ulimit -d") != std::string::npos;
        ::_exit(m.available_bytes <= kRoom && named ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(HostLimits, DeviceMemoryTheHostRefusesIsAHostMemoryErrorNotAnOom) {
  EXPECT_EXIT(
      {
        limit_data_to(kRoom);
        BudgetDeviceMemory device(4 * GiB, /*backed=*/true);  // the budget has room, the host not
        CachingAllocator allocator(device);
        try {
          allocator.allocate(GiB);
          ::_exit(2);
        } catch (const HostMemoryError& e) {
          const std::string what = e.what();
          const bool says_why = what.find("the host refused 1.00 GiB") != std::string::npos &&
                                what.find("ulimit -d") != std::string::npos &&
                                what.find("host memory ran out, not the budget") != std::string::npos;
          ::_exit(says_why ? 0 : 3);
        } catch (const OutOfMemoryError&) {
          ::_exit(4);  // the device's report, whose advice (smaller batch, recompute) is not the fix
        }
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace trainmem
