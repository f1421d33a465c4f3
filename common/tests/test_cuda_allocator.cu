// The caching allocator on a real GPU: cudaMalloc'ed segments, kernels writing into blocks,
// cross-stream frees with real events, empty_cache giving memory back to the driver.
// Every test skips, saying why, where no GPU answers.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>
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

// Allocates each size on both allocators (the same sequence), writes a pattern over the whole GPU
// block with a kernel and reads it back: the block is real, writable device memory.
void allocate_and_fill(CachingAllocator& on_gpu, CachingAllocator& on_cpu, const std::size_t* sizes,
                       std::size_t count, std::vector<void*>& blocks, std::vector<void*>& cpu_blocks) {
  for (std::size_t i = 0; i < count; ++i) {
    void* p = on_gpu.allocate(sizes[i], MemoryCategory::activations);
    blocks.push_back(p);
    cpu_blocks.push_back(on_cpu.allocate(sizes[i], MemoryCategory::activations));
    const std::size_t n = sizes[i] / sizeof(unsigned);
    fill_pattern<<<256, 256>>>(static_cast<unsigned*>(p), n, static_cast<unsigned>(i));
    CUDA_OK(cudaGetLastError());
    std::vector<unsigned> host(n);
    CUDA_OK(cudaMemcpy(host.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (std::size_t k = 0; k < n; ++k)
      ASSERT_EQ(host[k], static_cast<unsigned>(k) * 2654435761u + static_cast<unsigned>(i)) << "block " << i;
  }
}

TEST(CudaAllocator, BlocksAreUsableDeviceMemoryAndStatsMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 0);
  BudgetDeviceMemory cpu(gpu.total_bytes(), /*backed=*/false);
  CachingAllocator on_gpu(gpu), on_cpu(cpu);
  const std::size_t sizes[] = {1000, 700 * KiB, 3 * MiB, 5 * MiB, 12 * MiB + 7, 64 * MiB};
  std::vector<void*> blocks, cpu_blocks;
  ASSERT_NO_FATAL_FAILURE(allocate_and_fill(on_gpu, on_cpu, sizes, std::size(sizes), blocks, cpu_blocks));
  // The policy does not depend on the hardware: the same sequence, the same statistics.
  EXPECT_EQ(on_gpu.stats().to_json(), on_cpu.stats().to_json());
  // 1000 B and 700 KiB share a 2 MiB small segment; 3 MiB and 5 MiB share a 20 MiB one;
  // 12 MiB + 7 no longer fits its 12 MiB remainder (a 14 MiB segment); 64 MiB gets its own.
  EXPECT_EQ(on_gpu.stats().segment[0].current, 4);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    on_gpu.free(blocks[i]);
    on_cpu.free(cpu_blocks[i]);
  }
  EXPECT_EQ(on_gpu.stats().to_json(), on_cpu.stats().to_json());
  EXPECT_EQ(on_gpu.stats().allocated_bytes[0].current, 0);
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
  if (clock_khz <= 0) clock_khz = 2'000'000;  // not reported: assume 2 GHz (spinning longer is harmless)

  void* p = a.allocate(4 * MiB, MemoryCategory::activations, id1);
  a.record_stream(p, id2);
  spin<<<1, 1, 0, s2>>>(static_cast<long long>(clock_khz) * 50);  // ~50 ms of work on s2
  CUDA_OK(cudaGetLastError());
  a.free(p);
  MemoryStats s = a.stats();  // s2 is still spinning: the block is awaiting its free
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].current, static_cast<std::int64_t>(4 * MiB)) << "the block must wait for s2";
  EXPECT_GT(s.active_bytes[0].current, s.allocated_bytes[0].current);
  void* q = a.allocate(4 * MiB, MemoryCategory::activations, id1);
  EXPECT_NE(q, p) << "a block still in use on s2 was handed out";
  a.free(q);

  CUDA_OK(cudaStreamSynchronize(s2));
  a.process_events();
  s = a.stats();
  EXPECT_EQ(s.active_bytes[0].current, s.allocated_bytes[0].current) << "s2 is done: the free completed";
  EXPECT_EQ(s.active_bytes[0].current, 0);
  // The freed block merged back into its segment: the next request on s1 starts there again.
  void* r = a.allocate(4 * MiB, MemoryCategory::activations, id1);
  EXPECT_EQ(r, p);
  a.free(r);
  CUDA_OK(cudaStreamDestroy(s1));
  CUDA_OK(cudaStreamDestroy(s2));
}

TEST(CudaAllocator, EmptyCacheGivesMemoryBackToTheDriver) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 0);
  CachingAllocator a(gpu);
  // Four blocks held at once: four 256 MiB segments, then all four cached and wholly free.
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a.allocate(256 * MiB));
  for (void* p : blocks) a.free(p);
  const auto reserved = static_cast<std::size_t>(a.stats().reserved_bytes[0].current);
  EXPECT_EQ(reserved, 4 * 256 * MiB);
  EXPECT_EQ(a.stats().num_device_free, 0) << "freeing a block keeps its segment cached";

  std::size_t free_before = 0, free_after = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  a.empty_cache();
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  // The driver gets the bytes back (2 MiB of slack: its page granularity for its own bookkeeping).
  EXPECT_GE(free_after + 2 * MiB, free_before + reserved)
      << "free before " << free_before << ", after " << free_after << ", released " << reserved;
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(a.stats().num_device_alloc, 4);
  EXPECT_EQ(a.stats().num_device_free, 4);
}

TEST(CudaAllocator, ExpandableSegmentsMapUsableMemoryAndMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  CudaDeviceMemory gpu(0, 0);
  if (!gpu.supports_virtual_memory())
    GTEST_SKIP() << "GPU test skipped: this card or driver has no virtual memory management (cuMemCreate/cuMemMap)";
  BudgetDeviceMemory cpu(gpu.total_bytes(), /*backed=*/false);
  const AllocatorConfig config = AllocatorConfig::parse("expandable_segments:True");
  CachingAllocator on_gpu(gpu, config), on_cpu(cpu, config);
  // 25 MiB after 3 MiB straddles the first and second 20 MiB pages: the kernel writes across the
  // page boundary, which works only if the pages are mapped contiguously.
  const std::size_t sizes[] = {1000, 700 * KiB, 3 * MiB, 25 * MiB, 64 * MiB + 7};
  std::vector<void*> blocks, cpu_blocks;
  ASSERT_NO_FATAL_FAILURE(allocate_and_fill(on_gpu, on_cpu, sizes, std::size(sizes), blocks, cpu_blocks));
  // The same policy on both: the same pages, the same statistics. 3 + 25 + 64 MiB in the large
  // pool: 5 pages of 20 MiB; 1000 B + 700 KiB: one 2 MiB small page.
  EXPECT_EQ(on_gpu.stats().to_json(), on_cpu.stats().to_json());
  EXPECT_EQ(on_gpu.stats().reserved_bytes[0].current, static_cast<std::int64_t>(100 * MiB + 2 * MiB));
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    on_gpu.free(blocks[i]);
    on_cpu.free(cpu_blocks[i]);
  }
  std::size_t free_before = 0, free_after = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  on_gpu.empty_cache();
  on_cpu.empty_cache();
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  EXPECT_GE(free_after + 2 * MiB, free_before + 102 * MiB) << "the unmapped pages go back to the driver";
  EXPECT_EQ(on_gpu.stats().to_json(), on_cpu.stats().to_json());
  EXPECT_EQ(on_gpu.stats().reserved_bytes[0].current, 0);
}

TEST(CudaDevice, OpeningCudaGivesTheCardWithItsBudgetAndAllocator) {
  SKIP_WITHOUT_GPU();
  DeviceOptions options;
  options.choice = "cuda";
  options.device_memory = 1 * GiB;
  auto device = Device::open(options);
  EXPECT_EQ(device->kind(), DeviceKind::cuda);
  EXPECT_EQ(device->info().label(), "cuda:0");
  EXPECT_EQ(device->memory().total_bytes(), 1 * GiB);
  EXPECT_EQ(device->info().device_memory_bytes, 1 * GiB);
  EXPECT_EQ(device->memory().name().rfind("cuda:0 (", 0), 0u) << device->memory().name();
  void* p = device->allocator().allocate(3 * MiB);
  EXPECT_EQ(device->allocator().stats().reserved_bytes[0].current, static_cast<std::int64_t>(20 * MiB));
  EXPECT_LE(device->memory().free_bytes(), 1 * GiB - 20 * MiB);
  const std::size_t n = 3 * MiB / sizeof(unsigned);
  fill_pattern<<<128, 256>>>(static_cast<unsigned*>(p), n, 7u);
  CUDA_OK(cudaGetLastError());
  device->synchronize();
  unsigned last = 0;
  CUDA_OK(cudaMemcpy(&last, static_cast<unsigned*>(p) + n - 1, sizeof last, cudaMemcpyDeviceToHost));
  EXPECT_EQ(last, static_cast<unsigned>(n - 1) * 2654435761u + 7u);
  device->allocator().free(p);
}

TEST(CudaDevice, InfoNamesTheGpuAndItsLibraries) {
  SKIP_WITHOUT_GPU();
  const DeviceInfo info = query_cuda_device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_memory_bytes, 0u);
  EXPECT_FALSE(info.compute_capability.empty());
  EXPECT_FALSE(info.runtime_version.empty());
  EXPECT_FALSE(info.driver_version.empty());
  EXPECT_FALSE(info.cpu_model.empty()) << "the host is described too";
  if (!info.cudnn_version.empty()) EXPECT_EQ(info.cudnn_version.rfind("9.", 0), 0u) << info.cudnn_version;
}

// The GPUs on which this process holds a CUDA context (a primary context that is active), asked
// of the driver directly (libcuda, opened at run time as cuda_backend.cu does): the runtime has no
// call that tells, and asking must not make one. nullopt when the driver cannot be asked.
std::optional<std::set<int>> gpus_with_a_context() {
  using DeviceGet = int (*)(int*, int);
  using PrimaryCtxGetState = int (*)(int, unsigned*, int*);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) return std::nullopt;
  const auto device_get = reinterpret_cast<DeviceGet>(dlsym(driver, "cuDeviceGet"));
  const auto get_state = reinterpret_cast<PrimaryCtxGetState>(dlsym(driver, "cuDevicePrimaryCtxGetState"));
  if (device_get == nullptr || get_state == nullptr) return std::nullopt;
  std::set<int> active;
  for (int index = 0; index < cuda_device_count(); ++index) {
    int device = 0, is_active = 0;
    unsigned flags = 0;
    if (device_get(&device, index) != 0 || get_state(device, &flags, &is_active) != 0) return std::nullopt;
    if (is_active) active.insert(index);
  }
  return active;
}

// Under mpirun every rank probes for a GPU before it opens its own. The probe must make no CUDA
// context (one made there lands on GPU 0 and stays, so every rank would hold memory on GPU 0),
// and opening the device makes the process's first context on its own GPU only. Checked in a
// fresh process (a death test re-runs this binary), as this rank of the node: the last GPU.
TEST(CudaDevice, ProbingMakesNoContextAndOpeningMakesOneOnThisRanksOwnGpu) {
  SKIP_WITHOUT_GPU();
  if (!gpus_with_a_context()) GTEST_SKIP() << "GPU test skipped: the CUDA driver (libcuda.so.1) cannot be asked";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts from exec: no CUDA state
  const int own = cuda_device_count() - 1;
  EXPECT_EXIT(
      {
        setenv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(own).c_str(), 1);
        int status = 0;
        if (cuda_unavailable_reason()) status |= 1;  // the probe must still say yes
        if (gpus_with_a_context() != std::set<int>{}) status |= 2;
        DeviceOptions options;
        options.choice = "cuda";
        options.device_memory = 64 * MiB;
        auto device = Device::open(options);
        if (device->info().index != own) status |= 4;
        if (gpus_with_a_context() != std::set<int>{own}) status |= 8;
        std::exit(status);
      },
      ::testing::ExitedWithCode(0), "")
      << "exit code bits: 1 the probe said no, 2 the probe made a context, 4 not this rank's GPU, "
         "8 a context on another GPU than this rank's";
}

}  // namespace
}  // namespace trainmem
