// DeviceTimer on the CPU and the meta device (its CUDA events: test_device_timer_cuda.cu). Only
// lower bounds on time: a busy machine may stretch any interval, never shorten it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/device/device.h"
#include "common/device/device_timer.h"
#include "common/tests/cpu_device.h"

namespace trainmem {
namespace {

TEST(DeviceTimer, OnTheCpuItIsTheWallClockAroundTheWork) {
  auto device = testing_support::cpu_device();
  DeviceTimer timer(*device);
  timer.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the CPU backend's work runs in the call
  EXPECT_GE(timer.stop(), 0.020);
  timer.start();  // started again: the next interval counts from there, not from the first start
  EXPECT_LT(timer.stop(), 10.0);
}

TEST(DeviceTimer, OnTheMetaDeviceNothingRunsSoNoTimePasses) {
  DeviceOptions options;
  options.choice = "meta";
  auto device = Device::open(options);
  DeviceTimer timer(*device);
  timer.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(timer.stop(), 0.0);
}

}  // namespace
}  // namespace trainmem
