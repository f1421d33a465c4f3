// The NCCL backend's streams, on one GPU (world size 1): every collective runs on the
// communicator's own stream, ordered against the compute (default) stream by events.
//   - start_all_gather (FSDP's prefetch) waits for the compute work queued before it, and neither
//     it nor its wait() blocks the host: the compute stream is still busy when both have returned;
//     a kernel queued on the compute stream after wait() reads the gathered data;
//   - the gather's buffer, freed after wait() and handed out again by the caching allocator on
//     the compute stream, is written by later compute work only after the gather is done;
//   - the barrier returns after the work queued before it.
// A spinning kernel queued first keeps the compute stream busy, so that an ordering that is
// missing shows up as a wrong result rather than by luck. Skipped, with the reason, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/comm/communicator.h"
#include "common/device/device.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Spins for about `cycles` clock cycles: keeps the compute stream busy.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void fill(std::uint32_t* out, std::size_t n, std::uint32_t salt) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = static_cast<std::uint32_t>(i) * 2654435761u + salt;
}

__global__ void copy(std::uint32_t* out, const std::uint32_t* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}

std::vector<std::uint32_t> pattern(std::size_t n, std::uint32_t salt) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint32_t>(i) * 2654435761u + salt;
  return v;
}

std::vector<std::uint32_t> download(const void* device_ptr, std::size_t n) {
  std::vector<std::uint32_t> host(n);
  if (cudaMemcpy(host.data(), device_ptr, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost) != cudaSuccess)
    ADD_FAILURE() << "cudaMemcpy D2H";
  return host;
}

// About half a second of the compute stream's time: long beside launching a collective.
long long half_a_second_of_cycles() {
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess || clock_khz <= 0) {
    cudaGetLastError();
    clock_khz = 2'000'000;  // not reported: assume 2 GHz (spinning longer is harmless)
  }
  return static_cast<long long>(clock_khz) * 500;
}

class NcclStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    if (launched_by_mpirun()) GTEST_SKIP() << "a world of one: run without mpirun";
    DeviceOptions options;
    options.choice = "cuda";
    options.device_memory = std::size_t{256} << 20;
    device_ = Device::open(options);
    comm_ = make_communicator(*device_, "nccl");
    ASSERT_EQ(comm_->backend(), "nccl");
    // NCCL sets up its buffers and connections at a communicator's first collectives: done here,
    // so that a test's own calls only launch work.
    void* warm = allocate(kWarmUp);
    comm_->all_gather(warm, warm, kWarmUp, DType::f32, MemoryCategory::other);
    device_->allocator().free(warm);
    comm_->reset_stats();
  }
  static constexpr std::size_t kWarmUp = 1024;
  void* allocate(std::size_t n) {
    return device_->allocator().allocate(n * sizeof(std::uint32_t), MemoryCategory::parameters);
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Communicator> comm_;
};

constexpr std::size_t kN = 1 << 20;  // 4 MiB of 32-bit elements
constexpr std::uint32_t kSalt = 12345;

TEST_F(NcclStreams, AsyncAllGatherWaitsForItsInputsBlocksNoHostAndOrdersTheComputeStreamAfterIt) {
  auto* send = static_cast<std::uint32_t*>(allocate(kN));
  auto* recv = static_cast<std::uint32_t*>(allocate(kN));
  auto* seen = static_cast<std::uint32_t*>(allocate(kN));
  CUDA_OK(cudaMemset(send, 0, kN * sizeof(std::uint32_t)));
  CUDA_OK(cudaMemset(recv, 0xff, kN * sizeof(std::uint32_t)));
  CUDA_OK(cudaDeviceSynchronize());

  spin<<<1, 1>>>(half_a_second_of_cycles());  // the compute stream is busy from here
  fill<<<256, 256>>>(send, kN, kSalt);        // the gather's input, written after the spin
  CUDA_OK(cudaGetLastError());
  std::unique_ptr<PendingCollective> pending =
      comm_->start_all_gather(send, recv, kN, DType::f32, MemoryCategory::parameters);
  pending->wait();
  // Neither call waited for the device: the spin is still running.
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady) << "start_all_gather or wait() synchronized the host";
  cudaGetLastError();
  copy<<<256, 256>>>(seen, recv, kN);  // queued after wait(): must see the gathered data
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  const std::vector<std::uint32_t> expected = pattern(kN, kSalt);
  EXPECT_EQ(download(recv, kN), expected) << "the gather did not wait for the kernel that wrote its input";
  EXPECT_EQ(download(seen, kN), expected) << "a kernel after wait() ran before the gather was done";
  EXPECT_EQ(comm_->stats().by_collective[static_cast<std::size_t>(Collective::all_gather)].calls, 1u);
  EXPECT_EQ(comm_->stats().total.volume_bytes, kN * sizeof(std::uint32_t));
  for (void* p : {static_cast<void*>(send), static_cast<void*>(recv), static_cast<void*>(seen)})
    device_->allocator().free(p);
}

// FlatUnit's pattern: gather, wait, free the buffer without a host synchronization; the caching
// allocator hands the same block out again at once on the compute stream. The compute work that
// writes the new block must come after the gather's writes.
TEST_F(NcclStreams, AGatherBufferFreedAfterWaitIsRewrittenOnlyAfterTheGather) {
  auto* send = static_cast<std::uint32_t*>(allocate(kN));
  CUDA_OK(cudaMemset(send, 0, kN * sizeof(std::uint32_t)));
  CUDA_OK(cudaDeviceSynchronize());
  auto* recv = static_cast<std::uint32_t*>(allocate(kN));

  spin<<<1, 1>>>(half_a_second_of_cycles());
  fill<<<256, 256>>>(send, kN, kSalt);
  CUDA_OK(cudaGetLastError());
  {
    auto pending = comm_->start_all_gather(send, recv, kN, DType::f32, MemoryCategory::parameters);
    pending->wait();
  }
  device_->allocator().free(recv);
  auto* reused = static_cast<std::uint32_t*>(allocate(kN));
  ASSERT_EQ(reused, recv) << "the allocator did not hand the freed block out again (the test needs it to)";
  fill<<<256, 256>>>(reused, kN, kSalt + 1);  // the block's new owner writes it
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(download(reused, kN), pattern(kN, kSalt + 1)) << "the gather wrote into the block after its new owner";
  device_->allocator().free(reused);
  device_->allocator().free(send);
}

TEST_F(NcclStreams, BarrierReturnsAfterTheWorkQueuedBeforeIt) {
  spin<<<1, 1>>>(half_a_second_of_cycles() / 5);
  CUDA_OK(cudaGetLastError());
  comm_->barrier();
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess);
  comm_->barrier();  // again: its scratch element is zeroed and reused every time
  const CommCounts& barrier = comm_->stats().by_collective[static_cast<std::size_t>(Collective::barrier)];
  EXPECT_EQ(barrier.calls, 2u);
  EXPECT_EQ(barrier.volume_bytes, 0u);
}

// A host scalar while a gather is in flight: the sum is this rank's value, and the gather is
// still right (both on the communication stream, in issue order).
TEST_F(NcclStreams, HostScalarsWhileAGatherIsInFlight) {
  auto* send = static_cast<std::uint32_t*>(allocate(kN));
  auto* recv = static_cast<std::uint32_t*>(allocate(kN));
  spin<<<1, 1>>>(half_a_second_of_cycles() / 5);
  fill<<<256, 256>>>(send, kN, kSalt);
  CUDA_OK(cudaGetLastError());
  auto pending = comm_->start_all_gather(send, recv, kN, DType::f32, MemoryCategory::parameters);
  EXPECT_EQ(comm_->all_reduce_sum(2.5), 2.5);
  EXPECT_EQ(comm_->all_reduce_max(-3.0), -3.0);
  pending->wait();
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(download(recv, kN), pattern(kN, kSalt));
  device_->allocator().free(recv);
  device_->allocator().free(send);
}

}  // namespace
}  // namespace trainmem
