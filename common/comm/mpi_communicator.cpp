#include "common/comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "common/comm/rank_order_sum.h"
#include "common/device/device.h"
#include "common/device/device_ops.h"

namespace trainmem {

namespace {

// MPI counts are ints; longer buffers go in chunks of this many elements.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

// Sums and copies travel as fp32 or as raw 16-bit words (a copy needs no arithmetic).
MPI_Datatype mpi_type(DType dtype) { return dtype == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }

int mpi_count(std::size_t count, const char* call) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw CommError(std::string(call) + ": " + std::to_string(count) +
                    " elements per rank exceed MPI's int count; use smaller buckets");
  return static_cast<int>(count);
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

MpiCommunicator::MpiCommunicator(Device& device)
    : device_(device), staged_(device.kind() != DeviceKind::cpu) {
  ensure_mpi_initialized();
  // Our own communicator, so that our collectives never match messages of another library's.
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&comm_);
}

void* MpiCommunicator::to_host(const void* p, std::size_t bytes, std::vector<std::byte>& staging, bool copy) {
  if (!staged_) return const_cast<void*>(p);
  staging.resize(bytes);
  if (copy) copy_device_to_host(device_, staging.data(), p, bytes);
  return staging.data();
}

void MpiCommunicator::to_device(void* device_ptr, const void* host_ptr, std::size_t bytes) {
  if (staged_) copy_host_to_device(device_, device_ptr, host_ptr, bytes);
}

void MpiCommunicator::wait_for_device() { device_.synchronize(); }

// Every reduction adds in rank order (common/comm/rank_order_sum.h), not with MPI_SUM, whose
// grouping MPI chooses: each rank receives every rank's values of the elements it reduces
// (MPI_Alltoallv: (N-1)/N of the buffer out and in, as a ring reduce-scatter), adds them in rank order in fp32
// and rounds once; an all-reduce then gathers the reduced pieces. 16-bit values travel as raw
// 16-bit words and are widened where they are added.

// The elements [first, first + count) of every rank's buffer (`send`, total elements long),
// reduced: rank r gets piece r, pieces[r] elements from offsets[r]; `mine` receives this rank's
// piece, summed in rank order and rounded to dtype.
void MpiCommunicator::reduce_pieces(const void* send, const std::vector<int>& pieces, const std::vector<int>& offsets,
                                    DType dtype, void* mine) {
  const auto N = static_cast<std::size_t>(size_);
  const int my_count = pieces[static_cast<std::size_t>(rank_)];
  const std::size_t es = dtype_size(dtype);
  // From every rank, this rank's piece: block s of `blocks_` is rank s's values.
  blocks_.resize(N * static_cast<std::size_t>(my_count) * es);
  std::vector<int> recv_counts(N, my_count), recv_offsets(N);
  for (std::size_t s = 0; s < N; ++s) recv_offsets[s] = static_cast<int>(s) * my_count;
  check_mpi(MPI_Alltoallv(send, pieces.data(), offsets.data(), mpi_type(dtype), blocks_.data(), recv_counts.data(),
                          recv_offsets.data(), mpi_type(dtype), comm_),
            "MPI_Alltoallv");
  wide_out_.resize(static_cast<std::size_t>(my_count));
  add_in_rank_order(blocks_.data(), N, static_cast<std::size_t>(my_count), dtype, wide_out_.data());
  round_elements(dtype, wide_out_.data(), mine, static_cast<std::size_t>(my_count));
}

void MpiCommunicator::do_all_reduce(void* buffer, std::size_t count, DType dtype) {
  const std::size_t es = dtype_size(dtype), N = static_cast<std::size_t>(size_);
  auto* host = static_cast<std::byte*>(to_host(buffer, count * es, staging_in_, true));
  for (std::size_t at = 0; at < count; at += kMaxChunk) {
    const std::size_t n = std::min(kMaxChunk, count - at);
    // Rank r reduces the r-th of N pieces of ceil(n / N) elements (the last ones shorter or empty).
    const std::size_t piece = (n + N - 1) / N;
    std::vector<int> pieces(N), offsets(N);
    for (std::size_t r = 0; r < N; ++r) {
      const std::size_t first = std::min(n, r * piece);
      offsets[r] = static_cast<int>(first);
      pieces[r] = static_cast<int>(std::min(n, first + piece) - first);
    }
    std::byte* chunk = host + at * es;
    const std::size_t mine = static_cast<std::size_t>(offsets[static_cast<std::size_t>(rank_)]);
    reduced_piece_.resize(static_cast<std::size_t>(pieces[static_cast<std::size_t>(rank_)]) * es);
    reduce_pieces(chunk, pieces, offsets, dtype, reduced_piece_.data());
    if (!reduced_piece_.empty()) std::memcpy(chunk + mine * es, reduced_piece_.data(), reduced_piece_.size());
    check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, chunk, pieces.data(), offsets.data(),
                             mpi_type(dtype), comm_),
              "MPI_Allgatherv");
  }
  to_device(buffer, host, count * es);
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) {
  const int n = mpi_count(recv_count, "reduce_scatter");
  const std::size_t N = static_cast<std::size_t>(size_);
  const std::size_t total = N * recv_count, es = dtype_size(dtype);
  if (total > static_cast<std::size_t>(INT_MAX))
    throw CommError("reduce_scatter: " + std::to_string(total) + " elements exceed MPI's int offsets; use smaller buckets");
  const void* host_send = to_host(send, total * es, staging_in_, true);
  // recv may be this rank's own slice of send: the sum goes to a separate buffer first.
  void* host_recv = to_host(recv, recv_count * es, staging_out_, false);
  std::vector<int> pieces(N, n), offsets(N);
  for (std::size_t r = 0; r < N; ++r) offsets[r] = static_cast<int>(r) * n;
  reduced_piece_.resize(recv_count * es);
  reduce_pieces(host_send, pieces, offsets, dtype, reduced_piece_.data());
  if (!reduced_piece_.empty()) std::memcpy(host_recv, reduced_piece_.data(), reduced_piece_.size());
  to_device(recv, host_recv, recv_count * es);
}

void MpiCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) {
  const int n = mpi_count(send_count, "all_gather");
  const std::size_t es = dtype_size(dtype);
  const std::size_t slice = send_count * es, total = static_cast<std::size_t>(size_) * slice;
  const bool in_place = send == static_cast<const std::byte*>(recv) + static_cast<std::size_t>(rank_) * slice;
  if (!staged_ && in_place) {
    check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, mpi_type(dtype), comm_), "MPI_Allgather");
    return;
  }
  if (!staged_ && overlaps(send, slice, recv, total))
    throw CommError("all_gather: the send buffer overlaps the receive buffer but is not this rank's slice of it");
  const void* host_send = to_host(send, slice, staging_in_, true);
  void* host_recv = to_host(recv, total, staging_out_, false);
  check_mpi(MPI_Allgather(host_send, n, mpi_type(dtype), host_recv, n, mpi_type(dtype), comm_), "MPI_Allgather");
  to_device(recv, host_recv, total);
}

namespace {

// One MPI_Iallgather in flight; wait() is MPI_Wait. MPI completes non-blocking collectives in the
// order every rank started them, whatever else is called meanwhile.
class MpiAllGatherInFlight : public InFlight {
 public:
  explicit MpiAllGatherInFlight(MPI_Request request) : request_(request) {}
  ~MpiAllGatherInFlight() override {
    // Only reached without wait() when unwinding from an error: MPI must still finish the request.
    if (request_ != MPI_REQUEST_NULL && mpi_active()) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  void wait() override { check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait (all_gather)"); }

 private:
  MPI_Request request_;
};

}  // namespace

// Host memory only: a staged GPU buffer would need the copy back to the device after the gather
// completes, so staging runs the synchronous all_gather (nullptr). An all-gather only moves bytes,
// so 16-bit values travel as raw 16-bit words, as in do_all_gather.
std::unique_ptr<InFlight> MpiCommunicator::do_start_all_gather(const void* send, void* recv, std::size_t send_count,
                                                               DType dtype) {
  if (staged_) return nullptr;
  const int n = mpi_count(send_count, "start_all_gather");
  const std::size_t slice = send_count * dtype_size(dtype), total = static_cast<std::size_t>(size_) * slice;
  const bool in_place = send == static_cast<const std::byte*>(recv) + static_cast<std::size_t>(rank_) * slice;
  if (!in_place && overlaps(send, slice, recv, total))
    throw CommError("start_all_gather: the send buffer overlaps the receive buffer but is not this rank's slice of it");
  MPI_Request request = MPI_REQUEST_NULL;
  if (in_place)
    check_mpi(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, mpi_type(dtype), comm_, &request),
              "MPI_Iallgather");
  else
    check_mpi(MPI_Iallgather(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_, &request), "MPI_Iallgather");
  return std::make_unique<MpiAllGatherInFlight>(request);
}

void MpiCommunicator::do_broadcast(void* buffer, std::size_t count, DType dtype, int root) {
  const std::size_t es = dtype_size(dtype);
  void* host = to_host(buffer, count * es, staging_in_, rank_ == root);
  auto* bytes = static_cast<std::byte*>(host);
  for (std::size_t at = 0; at < count; at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - at));
    check_mpi(MPI_Bcast(bytes + at * es, n, mpi_type(dtype), root, comm_), "MPI_Bcast");
  }
  if (rank_ != root) to_device(buffer, host, count * es);
}

void MpiCommunicator::do_barrier() { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

// A sum in rank order too (a maximum is the same whatever the order): every rank's value, added
// left to right in double.
double MpiCommunicator::do_all_reduce_host(double value, bool max) {
  std::vector<double> values(static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(&value, 1, MPI_DOUBLE, values.data(), 1, MPI_DOUBLE, comm_), "MPI_Allgather");
  double result = values[0];
  for (std::size_t r = 1; r < values.size(); ++r) result = max ? std::max(result, values[r]) : result + values[r];
  return result;
}

}  // namespace trainmem
