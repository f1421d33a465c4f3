#include "common/comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "kernels/convert.h"

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

void widen(DType dtype, const void* in, float* out, std::size_t n) {
  const auto* h = static_cast<const std::uint16_t*>(in);
  if (dtype == DType::bf16)
    kernels::cpu::from_bf16(out, h, n);
  else
    kernels::cpu::from_fp16(out, h, n);
}

// fp32 -> 16 bit, round to nearest even: the one rounding of a 16-bit sum.
void narrow(DType dtype, const float* in, void* out, std::size_t n) {
  auto* h = static_cast<std::uint16_t*>(out);
  if (dtype == DType::bf16)
    kernels::cpu::to_bf16(h, in, n);
  else
    kernels::cpu::to_fp16(h, in, n);
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

// fp32: MPI sums in place. 16 bit: widen, sum in fp32, round once.
void MpiCommunicator::do_all_reduce(void* buffer, std::size_t count, DType dtype) {
  const std::size_t bytes = count * dtype_size(dtype);
  void* host = to_host(buffer, bytes, staging_in_, true);
  float* sum = static_cast<float*>(host);
  if (dtype != DType::f32) {
    wide_in_.resize(count);
    widen(dtype, host, wide_in_.data(), count);
    sum = wide_in_.data();
  }
  for (std::size_t at = 0; at < count; at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - at));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, sum + at, n, MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce");
  }
  if (dtype != DType::f32) narrow(dtype, sum, host, count);
  to_device(buffer, host, bytes);
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) {
  const int n = mpi_count(recv_count, "reduce_scatter");
  const std::size_t total = static_cast<std::size_t>(size_) * recv_count;
  const std::size_t es = dtype_size(dtype);
  const void* host_send = to_host(send, total * es, staging_in_, true);
  void* host_recv = to_host(recv, recv_count * es, staging_out_, false);

  // MPI's in-place reduce-scatter puts the result at the start of the buffer, NCCL's at the
  // rank's own slice: the result goes through a separate buffer and is copied to its place.
  const float* in = static_cast<const float*>(host_send);
  if (dtype != DType::f32) {
    wide_in_.resize(total);
    widen(dtype, host_send, wide_in_.data(), total);
    in = wide_in_.data();
  }
  const bool direct = dtype == DType::f32 && !overlaps(host_send, total * es, host_recv, recv_count * es);
  float* out = static_cast<float*>(host_recv);
  if (!direct) {
    wide_out_.resize(recv_count);
    out = wide_out_.data();
  }
  check_mpi(MPI_Reduce_scatter_block(in, out, n, MPI_FLOAT, MPI_SUM, comm_), "MPI_Reduce_scatter_block");
  if (!direct) {
    if (dtype == DType::f32)
      std::memcpy(host_recv, out, recv_count * es);
    else
      narrow(dtype, out, host_recv, recv_count);
  }
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

double MpiCommunicator::do_all_reduce_host(double value, bool max) {
  double result = 0;
  check_mpi(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, comm_), "MPI_Allreduce");
  return result;
}

}  // namespace trainmem
