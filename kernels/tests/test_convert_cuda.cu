// The GPU's conversions equal the CPU reference bit for bit, on random floats of every magnitude
// (normal, subnormal in fp16, overflowing in fp16) and on every 16-bit pattern.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/convert.h"

namespace trainmem::kernels {
namespace {

std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return cudaGetErrorString(status);
  }
  return count == 0 ? "no CUDA device found" : "";
}

#define SKIP_WITHOUT_GPU()                                                                                   \
  do {                                                                                                       \
    const std::string reason = no_gpu_reason();                                                              \
    if (!reason.empty()) GTEST_SKIP() << "GPU test skipped: no usable CUDA device (" << reason << ")"; \
  } while (0)

std::vector<float> random_floats(std::size_t n) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffffffffu);
  std::vector<float> v(n);
  for (float& x : v) {
    std::uint32_t u = bits(rng);
    u = (u & 0x80000000u) | (0x30000000u + (u & 0x1fffffffu) % 0x18000000u);  // |x| ~ 2^-31 .. 2^17
    std::memcpy(&x, &u, 4);
  }
  return v;
}

TEST(ConvertCuda, ToSixteenBitsMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const std::vector<float> in = random_floats(100003);
  const std::size_t n = in.size();
  float* d_in = nullptr;
  std::uint16_t* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (int format = 0; format < 2; ++format) {
    ASSERT_EQ(cudaMemset(d_out, 0xff, n * 2), cudaSuccess);  // poison
    if (format == 0) cuda::to_bf16(nullptr, d_out, d_in, n);
    else cuda::to_fp16(nullptr, d_out, d_in, n);
    std::vector<std::uint16_t> gpu(n), cpu_out(n);
    ASSERT_EQ(cudaMemcpy(gpu.data(), d_out, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    if (format == 0) cpu::to_bf16(cpu_out.data(), in.data(), n);
    else cpu::to_fp16(cpu_out.data(), in.data(), n);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += gpu[i] != cpu_out[i];
    EXPECT_EQ(wrong, 0u) << (format == 0 ? "bf16" : "fp16");
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(ConvertCuda, FromSixteenBitsMatchesTheCpuForEveryPattern) {
  SKIP_WITHOUT_GPU();
  std::vector<std::uint16_t> in(65536);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i);
  std::uint16_t* d_in = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, in.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, in.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  for (int format = 0; format < 2; ++format) {
    ASSERT_EQ(cudaMemset(d_out, 0xff, in.size() * 4), cudaSuccess);
    if (format == 0) cuda::from_bf16(nullptr, d_out, d_in, in.size());
    else cuda::from_fp16(nullptr, d_out, d_in, in.size());
    std::vector<float> gpu(in.size()), cpu_out(in.size());
    ASSERT_EQ(cudaMemcpy(gpu.data(), d_out, in.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    if (format == 0) cpu::from_bf16(cpu_out.data(), in.data(), in.size());
    else cpu::from_fp16(cpu_out.data(), in.data(), in.size());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const bool both_nan = gpu[i] != gpu[i] && cpu_out[i] != cpu_out[i];
      wrong += !both_nan && std::memcmp(&gpu[i], &cpu_out[i], 4) != 0;
    }
    EXPECT_EQ(wrong, 0u) << (format == 0 ? "bf16" : "fp16");
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

}  // namespace
}  // namespace trainmem::kernels
