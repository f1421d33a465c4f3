// The communicator in one process: the local backend (world size 1), the choice of backend,
// and the errors for a backend this build or this device cannot give. The collectives on 1, 2
// and 4 ranks are tested in test_communicator_ranks.cpp (under mpirun).
#include <gtest/gtest.h>

#include "common/comm/communicator.h"
#include "common/comm/local_communicator.h"
#include "common/tests/comm_test_support.h"
#include "common/tests/cpu_device.h"

namespace trainmem {
namespace {

using comm_test::DeviceArray;
using comm_test::encode;
using comm_test::rank_values;

// A 64 MiB card: the collectives here move a few KiB.
std::unique_ptr<Device> card_of_64_mib() { return testing_support::cpu_device(std::size_t{64} << 20); }

TEST(Communicator, OneProcessIsAWorldOfOneWithoutMpi) {
  if (launched_by_mpirun()) GTEST_SKIP() << "this test is about a process not started by mpirun";
  auto device = card_of_64_mib();
  auto comm = make_communicator(*device);
  EXPECT_EQ(comm->backend(), "local");
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->rank(), 0);
}

TEST(Communicator, NamesOfCollectives) {
  EXPECT_EQ(to_string(Collective::all_reduce), "all_reduce");
  EXPECT_EQ(to_string(Collective::reduce_scatter), "reduce_scatter");
  EXPECT_EQ(to_string(Collective::all_gather), "all_gather");
  EXPECT_EQ(to_string(Collective::broadcast), "broadcast");
  EXPECT_EQ(to_string(Collective::barrier), "barrier");
}

// An impossible choice says what to change.
TEST(Communicator, RefusesABackendItCannotGive) {
  auto device = card_of_64_mib();
  try {
    make_communicator(*device, "gloo");
    FAIL() << "an unknown backend was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("auto, local, mpi or nccl"), std::string::npos) << e.what();
  }
  // NCCL needs a GPU (and a build with NCCL): on the cpu device it is refused either way.
  try {
    make_communicator(*device, "nccl");
    FAIL() << "nccl on the cpu device was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("CUDA device") != std::string::npos || what.find("without NCCL") != std::string::npos)
        << what;
  }
  if (!mpi_compiled()) {
    try {
      make_communicator(*device, "mpi");
      FAIL() << "mpi was accepted by a build without MPI";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("libopenmpi-dev"), std::string::npos) << e.what();
    }
  }
}

class LocalCollectives : public ::testing::TestWithParam<DType> {
 protected:
  std::unique_ptr<Device> device_ = card_of_64_mib();
  LocalCommunicator comm_{*device_};
};

// With one rank: the sum is the rank's own buffer, its slice is the whole buffer, the gather is
// its slice, the broadcast from rank 0 is its buffer, all bit for bit (16-bit values too).
TEST_P(LocalCollectives, AreCopiesOfTheRanksOwnData) {
  const DType dt = GetParam();
  const std::size_t n = 333;
  const auto values = encode(rank_values(0, 5, n, dt), dt);

  DeviceArray buf(*device_, n, dt), out(*device_, n, dt);
  buf.upload(values);
  comm_.all_reduce(buf.data(), n, dt, MemoryCategory::gradients);
  EXPECT_EQ(buf.download(), values);

  out.upload(std::vector<std::uint8_t>(values.size(), 0xff));
  comm_.reduce_scatter(buf.data(), out.data(), n, dt, MemoryCategory::gradients);
  EXPECT_EQ(out.download(), values);
  comm_.reduce_scatter(buf.data(), buf.data(), n, dt, MemoryCategory::gradients);  // in place
  EXPECT_EQ(buf.download(), values);

  out.upload(std::vector<std::uint8_t>(values.size(), 0xff));
  comm_.all_gather(buf.data(), out.data(), n, dt, MemoryCategory::parameters);
  EXPECT_EQ(out.download(), values);
  comm_.all_gather(buf.data(), buf.data(), n, dt, MemoryCategory::parameters);  // in place
  EXPECT_EQ(buf.download(), values);

  comm_.broadcast(buf.data(), n, dt, 0, MemoryCategory::parameters);
  EXPECT_EQ(buf.download(), values);
  comm_.barrier();
  EXPECT_EQ(comm_.all_reduce_sum(2.5), 2.5);
  EXPECT_EQ(comm_.all_reduce_max(-1.0), -1.0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LocalCollectives, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// N = 1: nothing is sent or received; the volume is still the buffer's (communicator.h).
TEST(LocalCounts, VolumeIsTheBufferAndNothingTravels) {
  auto device = card_of_64_mib();
  LocalCommunicator comm(*device);
  DeviceArray a(*device, 100, DType::f32);
  DeviceArray h(*device, 100, DType::bf16);
  comm.all_reduce(a.data(), 100, DType::f32, MemoryCategory::gradients);             // 2 * 400
  comm.reduce_scatter(h.data(), h.data(), 100, DType::bf16, MemoryCategory::gradients);  // 200
  comm.all_gather(h.data(), h.data(), 100, DType::bf16, MemoryCategory::parameters);     // 200
  comm.broadcast(a.data(), 100, DType::f32, 0, MemoryCategory::optimizer_state);         // 400
  comm.barrier();
  const CommStats& s = comm.stats();
  EXPECT_EQ(s.total.calls, 5u);
  EXPECT_EQ(s.total.volume_bytes, 800u + 200u + 200u + 400u);
  EXPECT_EQ(s.total.sent_bytes, 0u);
  EXPECT_EQ(s.total.received_bytes, 0u);
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::gradients)].volume_bytes, 1000u);
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::parameters)].volume_bytes, 200u);
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::optimizer_state)].volume_bytes, 400u);
  EXPECT_EQ(s.by_collective[static_cast<std::size_t>(Collective::all_reduce)].volume_bytes, 800u);
  EXPECT_EQ(s.by_collective[static_cast<std::size_t>(Collective::barrier)].calls, 1u);
  comm.reset_stats();
  EXPECT_EQ(comm.stats().total.volume_bytes, 0u);
}

TEST(LocalCounts, RefusesAnotherRootOrDtype) {
  auto device = card_of_64_mib();
  LocalCommunicator comm(*device);
  float x = 1;
  EXPECT_THROW(comm.broadcast(&x, 1, DType::f32, 1, MemoryCategory::other), std::invalid_argument);
  EXPECT_THROW(comm.all_gather(&x, &x, 1, DType::i64, MemoryCategory::other), std::invalid_argument);
  EXPECT_EQ(comm.stats().total.calls, 0u);
}

}  // namespace
}  // namespace trainmem
