// The caching allocator on a real GPU: cudaMalloc'ed segments, kernels writing into blocks,
// cross-stream frees with real events, empty_cache giving memory back to the driver.
// Every test skips, saying why, where no GPU answers.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/device/cuda_device_memory.h"
#include "common/device/device.h"
#include "common/util/byte_size.h"

namespace trainmem {
namespace {

#define SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                 \
    if (auto reason = cuda_unavailable_reason())                                       \
      GTEST_SKIP() << "GPU test skipped: no usable CUDA device (" << *reason << ")"; \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

__global__ void fill_pattern(unsigned* out, std::size_t n, unsigned salt) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = static_cast<unsigned>(i) * 2654435761u + salt;
}

// Spins for about `cycles` clock cycles: keeps a stream busy so a free must wait for it.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

TEST(CudaAllocator, BlocksAreUsableDeviceMemoryAndStatsMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 0);
  BudgetDeviceMemory cpu(gpu.total_bytes(), /*backed=*/false);
  CachingAllocator on_gpu(gpu), on_cpu(cpu);
  const std::size_t sizes[] = {1000, 700 * KiB, 3 * MiB, 5 * MiB, 12 * MiB + 7, 64 * MiB};
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    void* p = on_gpu.allocate(sizes[i], MemoryCategory::activations);
    blocks.push_back(p);
    on_cpu.allocate(sizes[i], MemoryCategory::activations);
    const std::size_t n = sizes[i] / sizeof(unsigned);
    fill_pattern<<<256, 256>>>(static_cast<unsigned*>(p), n, static_cast<unsigned>(i));
    CUDA_OK(cudaGetLastError());
    std::vector<unsigned> host(n);
    CUDA_OK(cudaMemcpy(host.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (std::size_t k = 0; k < n; ++k)
      ASSERT_EQ(host[k], static_cast<unsigned>(k) * 2654435761u + static_cast<unsigned>(i)) << "block " << i;
  }
  // The policy does not depend on the hardware: the same sequence, the same statistics.
  EXPECT_EQ(on_gpu.stats().to_json(), on_cpu.stats().to_json());
  for (void* p : blocks) on_gpu.free(p);
}

TEST(CudaAllocator, ABudgetOnTheRealCardGivesTheOomReport) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 64 * MiB);
  CachingAllocator a(gpu);
  EXPECT_THROW(a.allocate(100 * MiB), OutOfMemoryError);
  EXPECT_EQ(a.stats().num_ooms, 1);
  void* p = a.allocate(32 * MiB);  // still usable
  EXPECT_NE(p, nullptr);
  a.free(p);
}

TEST(CudaAllocator, RecordStreamKeepsABlockUntilTheOtherStreamIsDone) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 0);
  CachingAllocator a(gpu);
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreate(&s1));
  CUDA_OK(cudaStreamCreate(&s2));
  const auto id1 = reinterpret_cast<StreamId>(s1), id2 = reinterpret_cast<StreamId>(s2);
  int clock_khz = 0;
  CUDA_OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));

  void* p = a.allocate(4 * MiB, MemoryCategory::activations, id1);
  a.record_stream(p, id2);
  spin<<<1, 1, 0, s2>>>(static_cast<long long>(clock_khz) * 50);  // ~50 ms of work on s2
  CUDA_OK(cudaGetLastError());
  a.free(p);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].current, static_cast<std::int64_t>(4 * MiB)) << "the block must wait for s2";
  void* q = a.allocate(4 * MiB, MemoryCategory::activations, id1);
  EXPECT_NE(q, p) << "a block still in use on s2 was handed out";
  a.free(q);

  CUDA_OK(cudaStreamSynchronize(s2));
  a.process_events();
  s = a.stats();
  EXPECT_EQ(s.active_bytes[0].current, 0);
  void* r = a.allocate(4 * MiB, MemoryCategory::activations, id1);
  EXPECT_TRUE(r == p || r == q);
  a.free(r);
  CUDA_OK(cudaStreamDestroy(s1));
  CUDA_OK(cudaStreamDestroy(s2));
}

TEST(CudaAllocator, EmptyCacheGivesMemoryBackToTheDriver) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 0);
  CachingAllocator a(gpu);
  for (int i = 0; i < 4; ++i) a.free(a.allocate(256 * MiB + i * MiB));
  std::size_t free_before = 0, free_after = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  const auto reserved = static_cast<std::size_t>(a.stats().reserved_bytes[0].current);
  EXPECT_GE(reserved, 4 * 256 * MiB);
  a.empty_cache();
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  EXPECT_GE(free_after, free_before + reserved - 64 * MiB);  // allow for the driver's own bookkeeping
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(a.stats().num_device_free, a.stats().num_device_alloc);
}

TEST(CudaDevice, InfoNamesTheGpuAndItsLibraries) {
  SKIP_WITHOUT_GPU();
  const DeviceInfo info = query_cuda_device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_memory_bytes, 0u);
  EXPECT_FALSE(info.compute_capability.empty());
  EXPECT_FALSE(info.runtime_version.empty());
}

}  // namespace
}  // namespace trainmem
