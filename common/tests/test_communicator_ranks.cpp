// The communicator on N ranks (ctest runs this binary under mpirun with 1, 2 and 4 ranks; see
// trainmem_add_mpi_test). Every rank runs every test; every rank computes every rank's input from
// the seeds, so each checks its own result against a CPU computation, bit for bit, and the byte
// counts against the formulas for N ranks.
//
// The backend is make_communicator's choice ("auto": mpi under mpirun, local without), or
// TRAINMEM_TEST_COMM; the device is TRAINMEM_TEST_DEVICE (cpu by default; cuda runs the same
// tests through host staging, or NCCL).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "common/comm/communicator.h"
#include "common/tests/comm_test_support.h"

namespace trainmem {
namespace {

using comm_test::DeviceArray;
using comm_test::encode;
using comm_test::rank_values;
using comm_test::slice;
using comm_test::sum_over_ranks;

class CommunicatorFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = comm_test::open_test_device();
    const char* backend = std::getenv("TRAINMEM_TEST_COMM");
    comm_ = make_communicator(*device_, backend ? backend : "auto");
    N = comm_->world_size();
    rank = comm_->rank();
  }
  std::unique_ptr<Device> device_;
  std::unique_ptr<Communicator> comm_;
  int N = 1;
  int rank = 0;
};

class CommunicatorRanks : public CommunicatorFixture, public ::testing::WithParamInterface<DType> {};

TEST(CommunicatorWorld, MatchesTheProcessesMpirunStarted) {
  auto device = comm_test::open_test_device();
  auto comm = make_communicator(*device);
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int expected = launched ? std::atoi(launched) : 1;
  EXPECT_EQ(comm->world_size(), expected);
  EXPECT_GE(comm->rank(), 0);
  EXPECT_LT(comm->rank(), expected);
  if (launched && mpi_compiled()) {
    EXPECT_NE(comm->backend(), "local");
  }
  if (!launched) {
    EXPECT_EQ(comm->backend(), "local");
  }
}

// Odd sizes too: 1 element, a prime, and one large enough to be more than a cache line.
constexpr std::size_t kCounts[] = {1, 7, 1031};

TEST_P(CommunicatorRanks, AllReduceSumsEveryRanksBuffer) {
  const DType dt = GetParam();
  for (std::size_t n : kCounts) {
    const int salt = static_cast<int>(n);
    DeviceArray buf(*device_, n, dt);
    buf.upload(encode(rank_values(rank, salt, n, dt), dt));
    comm_->all_reduce(buf.data(), n, dt, MemoryCategory::gradients);
    EXPECT_EQ(buf.download(), encode(sum_over_ranks(N, salt, n, dt), dt)) << "n = " << n;
  }
}

// General values (sums not exact, magnitudes from 2^-20 to 2^20 (fp16: 2^-10 to 2^10), so that how the additions are
// grouped changes the result): the mpi backend adds in rank order, ((x_0 + x_1) + x_2) + ..., in
// fp32 and rounds once (common/comm/rank_order_sum.h). So the result equals that sum made here,
// bit for bit, on every rank, whatever MPI's own MPI_SUM would have grouped; for every dtype and
// for counts that do not divide by N (all_reduce splits the buffer in N uneven pieces).
class CommunicatorGeneralValues : public CommunicatorFixture, public ::testing::WithParamInterface<DType> {
 protected:
  static std::vector<float> values_of(int r, std::size_t n, DType dtype) {
    std::mt19937 rng(static_cast<std::uint32_t>(99 + r));
    const int e = dtype == DType::f16 ? 10 : 20;  // fp16 ends at 65504
    std::vector<float> v(n);
    for (float& x : v)
      x = std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng), std::uniform_int_distribution<int>(-e, e)(rng));
    return comm_test::decode(comm_test::encode(v, dtype), dtype);  // representable in dtype
  }
  // The rank-order sum, rounded once to dtype.
  std::vector<std::uint8_t> rank_order_sum(std::size_t n, DType dtype) const {
    std::vector<float> sum = values_of(0, n, dtype);
    for (int r = 1; r < N; ++r) {
      const std::vector<float> v = values_of(r, n, dtype);
      for (std::size_t i = 0; i < n; ++i) sum[i] += v[i];
    }
    return encode(sum, dtype);
  }
};

TEST_P(CommunicatorGeneralValues, AllReduceAddsInRankOrder) {
  const DType dt = GetParam();
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4096}, std::size_t{4099}}) {
    DeviceArray buf(*device_, n, dt);
    buf.upload(encode(values_of(rank, n, dt), dt));
    comm_->all_reduce(buf.data(), n, dt, MemoryCategory::gradients);
    EXPECT_EQ(buf.download(), rank_order_sum(n, dt)) << "n = " << n;
  }
}

TEST_P(CommunicatorGeneralValues, ReduceScatterAddsInRankOrder) {
  const DType dt = GetParam();
  const std::size_t n = 1027, total = n * static_cast<std::size_t>(N);
  DeviceArray send(*device_, total, dt), recv(*device_, n, dt);
  send.upload(encode(values_of(rank, total, dt), dt));
  comm_->reduce_scatter(send.data(), recv.data(), n, dt, MemoryCategory::gradients);
  EXPECT_EQ(recv.download(), slice(rank_order_sum(total, dt), static_cast<std::size_t>(rank) * n, n, dt));
}

TEST_F(CommunicatorFixture, HostSumAddsInRankOrder) {
  // 1, 2^60, -2^60, 1, ...: rank order gives ((1 + 2^60) - 2^60) + 1 = 1 at N = 4 (0 + ... at N = 2).
  const double values[] = {1.0, 0x1p60, -0x1p60, 1.0};
  double want = values[0];
  for (int r = 1; r < N; ++r) want += values[r % 4];
  EXPECT_EQ(comm_->all_reduce_sum(values[rank % 4]), want);
  EXPECT_EQ(comm_->all_reduce_max(values[rank % 4]), N == 1 ? 1.0 : 0x1p60);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CommunicatorGeneralValues, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_P(CommunicatorRanks, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  const DType dt = GetParam();
  for (std::size_t n : kCounts) {
    const int salt = 100 + static_cast<int>(n);
    const std::size_t total = n * static_cast<std::size_t>(N);
    DeviceArray send(*device_, total, dt), recv(*device_, n, dt);
    send.upload(encode(rank_values(rank, salt, total, dt), dt));
    comm_->reduce_scatter(send.data(), recv.data(), n, dt, MemoryCategory::gradients);
    const auto expected = encode(sum_over_ranks(N, salt, total, dt), dt);
    EXPECT_EQ(recv.download(), slice(expected, rank * n, n, dt)) << "n = " << n;
    // The input is left as it was.
    EXPECT_EQ(send.download(), encode(rank_values(rank, salt, total, dt), dt));
  }
}

TEST_P(CommunicatorRanks, ReduceScatterInPlaceWritesTheRanksOwnSlice) {
  const DType dt = GetParam();
  const std::size_t n = 257, total = n * static_cast<std::size_t>(N);
  const int salt = 7;
  DeviceArray buf(*device_, total, dt);
  buf.upload(encode(rank_values(rank, salt, total, dt), dt));
  comm_->reduce_scatter(buf.data(), buf.bytes_at(rank * n, dt), n, dt, MemoryCategory::gradients);
  const auto expected = encode(sum_over_ranks(N, salt, total, dt), dt);
  EXPECT_EQ(slice(buf.download(), rank * n, n, dt), slice(expected, rank * n, n, dt));
}

TEST_P(CommunicatorRanks, AllGatherConcatenatesTheRanksSlicesInRankOrder) {
  const DType dt = GetParam();
  for (std::size_t n : kCounts) {
    const int salt = 200 + static_cast<int>(n);
    DeviceArray send(*device_, n, dt), recv(*device_, n * static_cast<std::size_t>(N), dt);
    send.upload(encode(rank_values(rank, salt, n, dt), dt));
    comm_->all_gather(send.data(), recv.data(), n, dt, MemoryCategory::parameters);
    std::vector<std::uint8_t> expected;
    for (int r = 0; r < N; ++r) {
      const auto part = encode(rank_values(r, salt, n, dt), dt);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    EXPECT_EQ(recv.download(), expected) << "n = " << n;
  }
}

TEST_P(CommunicatorRanks, AllGatherInPlaceFromTheRanksOwnSlice) {
  const DType dt = GetParam();
  const std::size_t n = 129;
  const int salt = 11;
  DeviceArray buf(*device_, n * static_cast<std::size_t>(N), dt);
  // Every slice but the rank's own holds garbage (0xff: NaN) before the gather.
  std::vector<std::uint8_t> start(buf.tensor.nbytes(), 0xff);
  const auto mine = encode(rank_values(rank, salt, n, dt), dt);
  std::copy(mine.begin(), mine.end(), start.begin() + static_cast<std::ptrdiff_t>(rank * n * dtype_size(dt)));
  buf.upload(start);
  comm_->all_gather(buf.bytes_at(rank * n, dt), buf.data(), n, dt, MemoryCategory::parameters);
  std::vector<std::uint8_t> expected;
  for (int r = 0; r < N; ++r) {
    const auto part = encode(rank_values(r, salt, n, dt), dt);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  EXPECT_EQ(buf.download(), expected);
}

// start_all_gather + wait must give what all_gather gives, bytes and counts alike (counted once,
// by the same formulas). Two gathers are in flight at once, one of them in place, and a
// synchronous collective runs between their start and their wait, as in FSDP's backward.
class CommunicatorAsyncGather : public CommunicatorFixture, public ::testing::WithParamInterface<DType> {};

TEST_P(CommunicatorAsyncGather, StartedGathersEqualTheSynchronousOnesInBytesAndCounts) {
  const DType dt = GetParam();
  const std::size_t n1 = 1031, n2 = 129;
  const std::size_t N_ = static_cast<std::size_t>(N);
  const auto mine1 = encode(rank_values(rank, 41, n1, dt), dt);
  const auto mine2 = encode(rank_values(rank, 42, n2, dt), dt);
  // Slices of the second buffer but the rank's own hold garbage (0xff) before the in-place gather.
  std::vector<std::uint8_t> start2(n2 * N_ * dtype_size(dt), 0xff);
  std::copy(mine2.begin(), mine2.end(), start2.begin() + static_cast<std::ptrdiff_t>(rank * n2 * dtype_size(dt)));

  // The synchronous reference.
  DeviceArray send1(*device_, n1, dt), recv1(*device_, n1 * N_, dt), buf2(*device_, n2 * N_, dt);
  send1.upload(mine1);
  buf2.upload(start2);
  comm_->reset_stats();
  comm_->all_gather(send1.data(), recv1.data(), n1, dt, MemoryCategory::parameters);
  comm_->all_gather(buf2.bytes_at(rank * n2, dt), buf2.data(), n2, dt, MemoryCategory::parameters);
  const CommStats sync = comm_->stats();
  const auto want1 = recv1.download(), want2 = buf2.download();
  std::vector<std::uint8_t> expected1;  // and the reference itself checked against the CPU
  for (int r = 0; r < N; ++r) {
    const auto part = encode(rank_values(r, 41, n1, dt), dt);
    expected1.insert(expected1.end(), part.begin(), part.end());
  }
  EXPECT_EQ(want1, expected1);  // not ASSERT: a rank that returned early would leave the others waiting

  // The same two gathers, both in flight, a reduce-scatter between start and wait.
  DeviceArray recv1b(*device_, n1 * N_, dt), buf2b(*device_, n2 * N_, dt);
  buf2b.upload(start2);
  DeviceArray rs_in(*device_, 4 * N_, DType::f32), rs_out(*device_, 4, DType::f32);
  rs_in.upload(encode(rank_values(rank, 43, 4 * N_, DType::f32), DType::f32));
  comm_->reset_stats();
  auto first = comm_->start_all_gather(send1.data(), recv1b.data(), n1, dt, MemoryCategory::parameters);
  auto second = comm_->start_all_gather(buf2b.bytes_at(rank * n2, dt), buf2b.data(), n2, dt, MemoryCategory::parameters);
  comm_->reduce_scatter(rs_in.data(), rs_out.data(), 4, DType::f32, MemoryCategory::gradients);
  second->wait();
  first->wait();
  first->wait();  // a second wait does nothing
  EXPECT_TRUE(first->done());
  EXPECT_TRUE(second->done());
  EXPECT_EQ(recv1b.download(), want1);
  EXPECT_EQ(buf2b.download(), want2);
  EXPECT_EQ(rs_out.download(), slice(encode(sum_over_ranks(N, 43, 4 * N_, DType::f32), DType::f32), rank * 4, 4,
                                     DType::f32));

  const CommStats& async = comm_->stats();
  const CommCounts& got = async.by_collective[static_cast<std::size_t>(Collective::all_gather)];
  const CommCounts& ref = sync.by_collective[static_cast<std::size_t>(Collective::all_gather)];
  EXPECT_EQ(got.calls, 2u);
  EXPECT_EQ(got.calls, ref.calls);
  EXPECT_EQ(got.volume_bytes, ref.volume_bytes);
  EXPECT_EQ(got.sent_bytes, ref.sent_bytes);
  EXPECT_EQ(got.received_bytes, ref.received_bytes);
  // The formula, S = N * (n1 + n2) * element size: volume S, sent = received = S (N-1)/N.
  const std::uint64_t S = N_ * (n1 + n2) * dtype_size(dt);
  EXPECT_EQ(got.volume_bytes, S);
  EXPECT_EQ(got.sent_bytes, S * (N_ - 1) / N_);
  const CommCounts& params = async.by_category[index_of(MemoryCategory::parameters)];
  EXPECT_EQ(params.calls, 2u);
  EXPECT_EQ(params.volume_bytes, S);
  EXPECT_EQ(async.total.calls, 3u);  // the two gathers, counted once each, and the reduce-scatter
}

class CommunicatorAsyncGatherHandle : public CommunicatorFixture {};

TEST_F(CommunicatorAsyncGatherHandle, AStartedGatherLeftUnwaitedIsWaitedForByItsHandle) {
  const std::size_t n = 64, N_ = static_cast<std::size_t>(N);
  DeviceArray send(*device_, n, DType::f32), recv(*device_, n * N_, DType::f32);
  send.upload(encode(rank_values(rank, 51, n, DType::f32), DType::f32));
  comm_->reset_stats();
  { auto pending = comm_->start_all_gather(send.data(), recv.data(), n, DType::f32, MemoryCategory::parameters); }
  std::vector<std::uint8_t> expected;
  for (int r = 0; r < N; ++r) {
    const auto part = encode(rank_values(r, 51, n, DType::f32), DType::f32);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  EXPECT_EQ(recv.download(), expected);
  EXPECT_EQ(comm_->stats().total.calls, 1u);
  EXPECT_THROW(comm_->start_all_gather(send.data(), recv.data(), n, DType::i32, MemoryCategory::parameters),
               std::invalid_argument);
  comm_->barrier();  // every rank is still in step
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CommunicatorAsyncGather, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_P(CommunicatorRanks, BroadcastGivesEveryRankTheRootsBuffer) {
  const DType dt = GetParam();
  const std::size_t n = 513;
  for (int root = 0; root < N; ++root) {
    const int salt = 300 + root;
    DeviceArray buf(*device_, n, dt);
    buf.upload(encode(rank_values(rank, salt, n, dt), dt));
    comm_->broadcast(buf.data(), n, dt, root, MemoryCategory::parameters);
    EXPECT_EQ(buf.download(), encode(rank_values(root, salt, n, dt), dt)) << "root " << root;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CommunicatorRanks, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

class CommunicatorCounts : public CommunicatorFixture {};

TEST_F(CommunicatorCounts, HostScalarsAndBarrier) {
  EXPECT_EQ(comm_->all_reduce_sum(rank + 1.0), N * (N + 1) / 2.0);  // 1 + 2 + ... + N
  EXPECT_EQ(comm_->all_reduce_max(rank + 0.5), N - 0.5);
  comm_->barrier();
  EXPECT_EQ(comm_->stats().by_collective[static_cast<std::size_t>(Collective::barrier)].calls, 1u);
  EXPECT_EQ(comm_->stats().total.sent_bytes, 0u);  // host scalars and barriers move no counted bytes
}

// Each count equals its formula for N ranks (communicator.h): S the whole buffer's bytes,
//   all_reduce     volume 2S, sent = received = 2S(N-1)/N
//   reduce_scatter volume S,  sent = received = S(N-1)/N
//   all_gather     volume S,  sent = received = S(N-1)/N
//   broadcast      volume S,  sent S at the root, received S elsewhere
TEST_F(CommunicatorCounts, BytesPerCallPerCollectiveAndPerCategoryFollowTheFormulas) {
  const std::uint64_t n = N;
  const std::size_t c = 1000;                 // elements per rank slice / per all-reduced buffer
  DeviceArray a(*device_, c * n, DType::f32);  // 4000 N bytes
  DeviceArray h(*device_, c * n, DType::bf16);
  a.upload(encode(rank_values(rank, 1, c * n, DType::f32), DType::f32));
  h.upload(encode(rank_values(rank, 1, c * n, DType::bf16), DType::bf16));
  comm_->reset_stats();

  comm_->all_reduce(a.data(), c, DType::f32, MemoryCategory::gradients);                    // S = 4000
  comm_->reduce_scatter(h.data(), h.bytes_at(rank * c, DType::bf16), c, DType::bf16,
                        MemoryCategory::gradients);                                        // S = 2000 N
  comm_->all_gather(h.bytes_at(rank * c, DType::bf16), h.data(), c, DType::bf16,
                    MemoryCategory::parameters);                                           // S = 2000 N
  comm_->broadcast(a.data(), c * n, DType::f32, 0, MemoryCategory::parameters);             // S = 4000 N
  comm_->barrier();

  const CommStats& s = comm_->stats();
  auto of = [&](Collective k) { return s.by_collective[static_cast<std::size_t>(k)]; };
  const bool root = rank == 0;

  EXPECT_EQ(of(Collective::all_reduce).calls, 1u);
  EXPECT_EQ(of(Collective::all_reduce).volume_bytes, 8000u);
  EXPECT_EQ(of(Collective::all_reduce).sent_bytes, 8000 * (n - 1) / n);
  EXPECT_EQ(of(Collective::all_reduce).received_bytes, 8000 * (n - 1) / n);

  EXPECT_EQ(of(Collective::reduce_scatter).volume_bytes, 2000 * n);
  EXPECT_EQ(of(Collective::reduce_scatter).sent_bytes, 2000 * (n - 1));
  EXPECT_EQ(of(Collective::reduce_scatter).received_bytes, 2000 * (n - 1));

  EXPECT_EQ(of(Collective::all_gather).volume_bytes, 2000 * n);
  EXPECT_EQ(of(Collective::all_gather).sent_bytes, 2000 * (n - 1));
  EXPECT_EQ(of(Collective::all_gather).received_bytes, 2000 * (n - 1));

  EXPECT_EQ(of(Collective::broadcast).volume_bytes, 4000 * n);
  EXPECT_EQ(of(Collective::broadcast).sent_bytes, root && n > 1 ? 4000 * n : 0u);
  EXPECT_EQ(of(Collective::broadcast).received_bytes, root ? 0u : 4000 * n);

  EXPECT_EQ(of(Collective::barrier).calls, 1u);
  EXPECT_EQ(of(Collective::barrier).volume_bytes, 0u);

  const CommCounts& grads = s.by_category[index_of(MemoryCategory::gradients)];
  const CommCounts& params = s.by_category[index_of(MemoryCategory::parameters)];
  EXPECT_EQ(grads.calls, 2u);
  EXPECT_EQ(grads.volume_bytes, 8000 + 2000 * n);
  EXPECT_EQ(grads.sent_bytes, 8000 * (n - 1) / n + 2000 * (n - 1));
  EXPECT_EQ(params.calls, 2u);
  EXPECT_EQ(params.volume_bytes, 2000 * n + 4000 * n);
  EXPECT_EQ(s.total.calls, 5u);
  EXPECT_EQ(s.total.volume_bytes, 8000 + 2000 * n + 2000 * n + 4000 * n);
  EXPECT_EQ(s.total.received_bytes, 8000 * (n - 1) / n + 2 * 2000 * (n - 1) + (root ? 0u : 4000 * n));
  EXPECT_GT(s.total.seconds, 0.0);

  comm_->reset_stats();
  EXPECT_EQ(comm_->stats().total.calls, 0u);
}

TEST_F(CommunicatorCounts, RefusesWhatNoBackendCanDo) {
  float x = 1;
  EXPECT_THROW(comm_->all_reduce(&x, 1, DType::i32, MemoryCategory::other), std::invalid_argument);
  EXPECT_THROW(comm_->broadcast(&x, 1, DType::f32, N, MemoryCategory::other), std::invalid_argument);
  EXPECT_EQ(comm_->stats().total.calls, 0u);
  comm_->barrier();  // every rank is still in step
}

}  // namespace
}  // namespace trainmem
