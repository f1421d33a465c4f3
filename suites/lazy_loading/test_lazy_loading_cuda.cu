// The lazy loader on a GPU: pinned staging memory (cudaHostAlloc), asynchronous host-to-device
// copies on the loader's own copy stream, and the events that order that stream against the
// compute stream. The batches that reach the device are the token file's, in the order
// ShuffleOrder names, for prefetch 0 (synchronous), 1 and 3, with pinned and pageable staging,
// while the compute stream is kept busy (a spinning kernel before each next()): the worker's copy
// into a ring slot must wait for the compute stream to have copied the slot's previous batch out
// (the slot's `released` event), else the trainer receives the next batch instead.
// Skipped, with the reason, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/data/token_file.h"
#include "kernels/tests/gpu_test_support.h"
#include "suites/lazy_loading/lazy_loader.h"
#include "suites/lazy_loading/loader_test_support.h"

namespace trainmem::lazy_loading {
namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// About `ms` milliseconds of one GPU thread's time.
long long cycles_for(int ms) {
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess || clock_khz <= 0) {
    cudaGetLastError();
    clock_khz = 2'000'000;  // not reported: assume 2 GHz (spinning longer is harmless)
  }
  return static_cast<long long>(clock_khz) * ms;
}

struct Config {
  std::size_t prefetch;
  bool pinned;
};

class LazyLoaderOnCuda : public ::testing::TestWithParam<Config> {};

TEST_P(LazyLoaderOnCuda, BatchesOnTheDeviceAreTheFilesTokens) {
  SKIP_WITHOUT_GPU();
  const Config c = GetParam();
  TempDir dir;
  const std::vector<std::uint16_t> data = synthetic_corpus(20001, 5);
  write_token_file(dir.file("data.tok"), data);

  DeviceOptions options;
  options.choice = "cuda";
  options.device_memory = std::size_t{256} << 20;
  auto device = Device::open(options);
  const std::size_t B = 8, T = 32;
  LazyLoaderOptions lo;
  lo.prefetch = c.prefetch;
  lo.pinned = c.pinned;
  lo.seed = 7;
  LazyLoader loader(*device, HostTokens::map_file(dir.file("data.tok")), B, T, lo);
  EXPECT_EQ(loader.pinned(), c.pinned) << "on a GPU the staging memory is pinned exactly when asked";

  const std::size_t busy_batches = 24;  // each behind 10 ms of compute-stream work
  const std::size_t count = 2 * loader.batches_per_epoch() + 3;  // into a third epoch
  const std::vector<Batch> got = pull(*device, loader, B, T, count, [&](std::size_t i) {
    if (i >= busy_batches) return;
    spin<<<1, 1>>>(cycles_for(10));
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  });
  for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(got[k], expected_batch(data, B, T, lo.seed, k)) << "batch " << k;
  EXPECT_EQ(loader.batches_served(), count);
}

INSTANTIATE_TEST_SUITE_P(PrefetchPinned, LazyLoaderOnCuda,
                         ::testing::Values(Config{0, true}, Config{1, true}, Config{3, true}, Config{1, false},
                                           Config{3, false}),
                         [](const auto& info) {
                           return "prefetch" + std::to_string(info.param.prefetch) +
                                  (info.param.pinned ? "_pinned" : "_pageable");
                         });

}  // namespace
}  // namespace trainmem::lazy_loading
