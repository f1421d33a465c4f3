// Device selection and description: --device cpu|auto|cuda, the budget the CPU backend draws
// from, and the errors a user sees for a device that cannot be had.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "kernels/layernorm.h"
#include "common/util/byte_size.h"

namespace trainmem {
namespace {

TEST(Device, CpuDrawsFromTheBudgetItWasGiven) {
  DeviceOptions options;
  options.choice = "cpu";
  options.device_memory = 1 * GiB;
  auto device = Device::open(options);
  EXPECT_EQ(device->kind(), DeviceKind::cpu);
  EXPECT_EQ(device->memory().total_bytes(), 1 * GiB);
  EXPECT_EQ(device->info().device_memory_bytes, 1 * GiB);
  void* p = device->allocator().allocate(3 * MiB);
  EXPECT_EQ(device->allocator().stats().reserved_bytes[0].current, static_cast<std::int64_t>(20 * MiB));
  EXPECT_EQ(device->memory().free_bytes(), 1 * GiB - 20 * MiB);
  static_cast<char*>(p)[3 * MiB - 1] = 42;  // real memory on the CPU backend
  device->allocator().free(p);
}

TEST(Device, CpuSaysWhatItChoseAndDescribesTheHost) {
  DeviceOptions options;
  options.choice = "cpu";
  options.backed = false;  // the default 16 GiB budget, never touched
  std::ostringstream log;
  auto device = Device::open(options, &log);
  EXPECT_EQ(log.str(), "device: cpu (chosen) with a 16.00 GiB device-memory budget\n");
  EXPECT_EQ(device->memory().total_bytes(), kDefaultDeviceMemory);
  const DeviceInfo& info = device->info();
  EXPECT_EQ(info.label(), "cpu");
  EXPECT_EQ(info.device_memory_bytes, kDefaultDeviceMemory);
  EXPECT_FALSE(info.cpu_model.empty());
  EXPECT_EQ(info.name, info.cpu_model);
  EXPECT_GE(info.cpu_cores, 1);
  EXPECT_EQ(info.sm_count, 0);  // GPU fields stay empty on the CPU
  EXPECT_TRUE(info.compute_capability.empty());
  device->synchronize();  // nothing to wait for on the CPU, and no CUDA call
}

TEST(Device, CpuInfoIsFilledAndSerialized) {
  const DeviceInfo info = query_cpu_device_info();
  EXPECT_FALSE(info.cpu_model.empty());
  EXPECT_GE(info.cpu_cores, 1);
  EXPECT_GT(info.total_memory_bytes, 0u);
  const nlohmann::json j = info.to_json();
  for (const char* key : {"kind", "label", "index", "name", "total_memory_bytes", "device_memory_bytes", "sm_count",
                          "compute_capability", "driver_version", "runtime_version", "cudnn_version", "nccl_version",
                          "cpu_model", "cpu_cores", "cpu_gemm", "cpu_gemm_kernels"})
    EXPECT_TRUE(j.contains(key)) << key;
  // The library names itself and its kernels: "oneMKL 2026.0.2, sequential" / "OpenBLAS 0.3.21".
  EXPECT_TRUE(info.cpu_gemm.rfind("oneMKL ", 0) == 0 || info.cpu_gemm.rfind("OpenBLAS ", 0) == 0) << info.cpu_gemm;
  EXPECT_FALSE(info.cpu_gemm_kernels.empty());
  EXPECT_EQ(j["kind"], "cpu");
  EXPECT_EQ(j["label"], "cpu");
}

TEST(Device, AutoPicksCudaOnlyWhenAGpuAnswersAndSaysWhy) {
  DeviceOptions options;
  options.device_memory = 256 * MiB;
  std::ostringstream log;
  const auto reason = cuda_unavailable_reason();
  auto device = Device::open(options, &log);
  if (reason) {
    EXPECT_EQ(device->kind(), DeviceKind::cpu);
    EXPECT_NE(log.str().find("device: cpu"), std::string::npos) << log.str();
    EXPECT_NE(log.str().find("(auto: " + *reason + ")"), std::string::npos) << log.str();
    EXPECT_NE(log.str().find("256.00 MiB device-memory budget"), std::string::npos) << log.str();
  } else {
    EXPECT_EQ(device->kind(), DeviceKind::cuda);
    EXPECT_NE(log.str().find("device: cuda:0 (" + device->info().name), std::string::npos) << log.str();
    EXPECT_EQ(device->memory().total_bytes(), 256 * MiB) << "--device-memory is a budget on the card too";
    EXPECT_EQ(device->info().device_memory_bytes, 256 * MiB);
    EXPECT_GT(device->info().sm_count, 0);
  }
}

// Issue 40, item 9: on a machine with no GPU (and so no NVIDIA driver), auto said "CUDA driver
// version is insufficient for CUDA runtime version", which reads as if a driver needed updating.
TEST(Device, AMachineWithNoDriverHasNoGpuFound) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without CUDA: the reason is the build's";
  if (std::ifstream("/proc/driver/nvidia/version").good()) GTEST_SKIP() << "an NVIDIA driver is loaded here";
  EXPECT_EQ(cuda_unavailable_reason(), std::optional<std::string>("no GPU found"));
  std::ostringstream log;
  Device::open(DeviceOptions{}, &log);
  EXPECT_NE(log.str().find("device: cpu (auto: no GPU found) with a"), std::string::npos) << log.str();
}

TEST(Device, AskingForCudaWithoutAGpuIsAClearError) {
  if (!cuda_unavailable_reason()) GTEST_SKIP() << "a GPU is present: this test is for machines without one";
  DeviceOptions options;
  options.choice = "cuda";
  try {
    Device::open(options);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(*cuda_unavailable_reason()), std::string::npos) << e.what();
  }
}

TEST(Device, AnUnknownChoiceIsAClearError) {
  DeviceOptions options;
  options.choice = "gpu";
  try {
    Device::open(options);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("auto, cpu, cuda, meta"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainmem

namespace trainmem {
namespace {

// meta: the allocator hands out addresses with no memory behind them, copies and kernels do
// nothing, and what the host reads back is zeros (so a step reads a loss of 0 and a clean norm).
TEST(Device, MetaHasAddressesButNoMemoryAndRunsNothing) {
  DeviceOptions options;
  options.choice = "meta";
  options.device_memory = std::size_t{1} << 50;  // 1 PiB: nothing is reserved on the host
  auto device = Device::open(options);
  EXPECT_EQ(device->kind(), DeviceKind::meta);
  EXPECT_FALSE(device->computes());
  EXPECT_FALSE(device->cuda_pattern());
  EXPECT_EQ(device->info().label(), "meta");
  void* big = device->allocator().allocate(std::size_t{1} << 45, MemoryCategory::activations);  // 32 TiB
  ASSERT_NE(big, nullptr);
  zero_device_memory(*device, big, std::size_t{1} << 45);  // would fault if it touched the address
  float host[4] = {1, 2, 3, 4};
  copy_device_to_host(*device, host, big, sizeof host);
  for (float x : host) EXPECT_EQ(x, 0.0f);
  copy_host_to_device(*device, big, host, sizeof host);
  const kernels::Stream s = kernel_stream(*device);
  EXPECT_EQ(s.backend, kernels::Backend::meta);
  kernels::layernorm_forward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1 << 20, 1 << 20);  // skipped
  device->allocator().free(big);
  EXPECT_EQ(device->allocator().stats().allocated_bytes[0].peak, std::int64_t{1} << 45);
}

}  // namespace
}  // namespace trainmem
