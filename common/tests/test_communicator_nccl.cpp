// The NCCL backend on one GPU, world size 1 (built where CUDA and NCCL are; skipped, with the
// reason, without a GPU). Several ranks on one GPU cannot use NCCL (one GPU per rank): they take
// the mpi backend, tested by test_communicator_ranks with TRAINMEM_TEST_DEVICE=cuda.
#include <gtest/gtest.h>

#include "common/comm/communicator.h"
#include "common/tests/comm_test_support.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem {
namespace {

using comm_test::DeviceArray;
using comm_test::encode;
using comm_test::rank_values;

std::unique_ptr<Device> cuda_device() {
  DeviceOptions options;
  options.choice = "cuda";
  options.device_memory = std::size_t{256} << 20;
  return Device::open(options);
}

class NcclWorldOfOne : public ::testing::TestWithParam<DType> {};

TEST_P(NcclWorldOfOne, CollectivesAreTheRanksOwnDataAndCountsFollowTheFormulas) {
  SKIP_WITHOUT_GPU();
  if (launched_by_mpirun()) GTEST_SKIP() << "a world of one: run without mpirun";
  const DType dt = GetParam();
  auto device = cuda_device();
  auto comm = make_communicator(*device, "nccl");
  ASSERT_EQ(comm->backend(), "nccl");
  ASSERT_EQ(comm->world_size(), 1);

  const std::size_t n = 4099;
  const auto values = encode(rank_values(0, 3, n, dt), dt);
  DeviceArray buf(*device, n, dt), out(*device, n, dt);
  buf.upload(values);
  comm->all_reduce(buf.data(), n, dt, MemoryCategory::gradients);
  EXPECT_EQ(buf.download(), values);
  out.upload(std::vector<std::uint8_t>(values.size(), 0xff));
  comm->reduce_scatter(buf.data(), out.data(), n, dt, MemoryCategory::gradients);
  EXPECT_EQ(out.download(), values);
  out.upload(std::vector<std::uint8_t>(values.size(), 0xff));
  comm->all_gather(buf.data(), out.data(), n, dt, MemoryCategory::parameters);
  EXPECT_EQ(out.download(), values);
  comm->broadcast(buf.data(), n, dt, 0, MemoryCategory::parameters);
  EXPECT_EQ(buf.download(), values);
  comm->barrier();
  EXPECT_EQ(comm->all_reduce_sum(2.5), 2.5);
  EXPECT_EQ(comm->all_reduce_max(-3.0), -3.0);

  const std::uint64_t S = n * dtype_size(dt);
  EXPECT_EQ(comm->stats().total.calls, 5u);
  EXPECT_EQ(comm->stats().total.volume_bytes, 2 * S + S + S + S);
  EXPECT_EQ(comm->stats().total.sent_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclWorldOfOne, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace trainmem
