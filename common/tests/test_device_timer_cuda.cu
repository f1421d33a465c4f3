// DeviceTimer on a GPU: CUDA events on the kernel stream time the kernel, and stop() returns once
// it has finished. Skips, saying why, where no GPU answers.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "common/device/device.h"
#include "common/device/device_timer.h"

namespace trainmem {
namespace {

// Spins for at least `cycles` clock cycles of its multiprocessor.
__global__ void spin_for(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

TEST(DeviceTimerCuda, EventsTimeTheKernelAndStopWaitsForIt) {
  if (auto reason = cuda_unavailable_reason())
    GTEST_SKIP() << "GPU test skipped: no usable CUDA device (" << *reason << ")";
  DeviceOptions options;
  options.choice = "cuda";
  auto device = Device::open(options);
  int clock_khz = 0;  // the multiprocessors' peak clock: no cycle is shorter than 1 / peak
  ASSERT_EQ(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), cudaSuccess);
  const long long cycles = 20LL * clock_khz;  // 20 ms at the peak clock (kHz x ms = cycles)
  DeviceTimer timer(*device);
  spin_for<<<1, 1>>>(1000);  // the module loaded before the timed interval
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  timer.start();
  spin_for<<<1, 1>>>(cycles);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const double seconds = timer.stop();
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess) << "stop() returned before the kernel ended";
  EXPECT_GE(seconds, 0.020 * 0.999);  // events resolve to about half a microsecond
  EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace trainmem
