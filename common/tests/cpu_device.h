// The device most tests run on: the CPU backend as a simulated card of `budget` bytes (1 GiB
// unless a test wants a smaller card, to reach out-of-memory sooner).
#pragma once
#include <cstddef>
#include <memory>

#include "common/device/device.h"

namespace trainmem::testing_support {

inline std::unique_ptr<Device> cpu_device(std::size_t budget = std::size_t{1} << 30) {
  DeviceOptions options;
  options.choice = "cpu";
  options.device_memory = budget;
  return Device::open(options);
}

}  // namespace trainmem::testing_support
