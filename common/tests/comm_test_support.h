// What the communicator tests share: inputs every rank can compute for every rank (seeded by
// rank, never zero), their expected reductions, and device buffers to run collectives on.
//
// Inputs are chosen so that the fp32 sum of any number of ranks' values is exact, whatever order
// the backend adds them in; the expected result is then one exact number, rounded once to the
// dtype (RNE, kernels/convert.h), and a backend must match it bit for bit:
//   f32:  k * 2^-8, k a random non-zero integer in [-2000, 2000]
//   bf16, f16: +-(1 + m/128) * 2^e, m in [0, 127], e in [-3, 3]: exact in both 16-bit formats,
//         while their sums usually are not (so the one rounding is tested).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "common/tensor/tensor.h"
#include "kernels/convert.h"

namespace trainmem::comm_test {

// The values rank `rank` starts with in the test identified by `salt`.
inline std::vector<float> rank_values(int rank, int salt, std::size_t n, DType dtype) {
  std::mt19937 rng(static_cast<std::uint32_t>(1000003 * salt + 7919 * rank + 17));
  std::vector<float> v(n);
  for (float& x : v) {
    if (dtype == DType::f32) {
      int k = 0;
      while (k == 0) k = std::uniform_int_distribution<int>(-2000, 2000)(rng);
      x = static_cast<float>(k) / 256.0f;
    } else {
      const int m = std::uniform_int_distribution<int>(0, 127)(rng);
      const int e = std::uniform_int_distribution<int>(-3, 3)(rng);
      const float sign = std::uniform_int_distribution<int>(0, 1)(rng) ? 1.0f : -1.0f;
      x = sign * std::ldexp(1.0f + static_cast<float>(m) / 128.0f, e);
    }
  }
  return v;
}

// The element-wise sum of every rank's values (exact in fp32 for these inputs).
inline std::vector<float> sum_over_ranks(int world, int salt, std::size_t n, DType dtype) {
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> v = rank_values(r, salt, n, dtype);
    for (std::size_t i = 0; i < n; ++i) sum[i] += v[i];
  }
  return sum;
}

// The bytes of `values` stored as `dtype`, each rounded once (RNE).
inline std::vector<std::uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<std::uint8_t> bytes(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[4 * i], &values[i], 4);
    } else {
      const std::uint16_t h = dtype == DType::bf16 ? kernels::cpu::float_to_bf16(values[i])
                                                   : kernels::cpu::float_to_fp16(values[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  return bytes;
}

// The values stored in `bytes` as `dtype` (16-bit widened exactly).
inline std::vector<float> decode(const std::vector<std::uint8_t>& bytes, DType dtype) {
  const std::size_t es = dtype_size(dtype);
  std::vector<float> values(bytes.size() / es);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&values[i], &bytes[4 * i], 4);
    } else {
      std::uint16_t h = 0;
      std::memcpy(&h, &bytes[2 * i], 2);
      values[i] = dtype == DType::bf16 ? kernels::cpu::bf16_to_float(h) : kernels::cpu::fp16_to_float(h);
    }
  }
  return values;
}

// A device buffer of n elements from the device's allocator, uploaded from / downloaded to host
// bytes.
struct DeviceArray {
  DeviceArray(Device& device, std::size_t n, DType dtype)
      : device(device), tensor(device.allocator(), {static_cast<std::int64_t>(n)}, dtype,
                               MemoryCategory::communication, "comm_test") {}
  void upload(const std::vector<std::uint8_t>& bytes) {
    ASSERT_EQ(bytes.size(), tensor.nbytes());
    copy_host_to_device(device, tensor.data(), bytes.data(), bytes.size());
  }
  std::vector<std::uint8_t> download() const {
    std::vector<std::uint8_t> bytes(tensor.nbytes());
    copy_device_to_host(device, bytes.data(), tensor.data(), bytes.size());
    return bytes;
  }
  void* data() { return tensor.data(); }
  std::byte* bytes_at(std::size_t element, DType dtype) {
    return static_cast<std::byte*>(tensor.data()) + element * dtype_size(dtype);
  }

  Device& device;
  Tensor tensor;
};

// A slice [from, from + n) of a host byte vector holding elements of `dtype`.
inline std::vector<std::uint8_t> slice(const std::vector<std::uint8_t>& bytes, std::size_t from, std::size_t n,
                                       DType dtype) {
  const std::size_t es = dtype_size(dtype);
  return {bytes.begin() + static_cast<std::ptrdiff_t>(from * es),
          bytes.begin() + static_cast<std::ptrdiff_t>((from + n) * es)};
}

// The device the tests run on: TRAINMEM_TEST_DEVICE (cpu by default; cuda on a GPU machine, to
// run the same tests through host staging), with a small budget.
inline std::unique_ptr<Device> open_test_device() {
  DeviceOptions options;
  const char* choice = std::getenv("TRAINMEM_TEST_DEVICE");
  options.choice = choice ? choice : "cpu";
  options.device_memory = std::size_t{256} << 20;
  return Device::open(options);
}

}  // namespace trainmem::comm_test
