#include "common/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/device/device.h"
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
#include "common/comm/mpi_world.h"
#endif

namespace trainmem {

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: return ncclFloat32;  // the public calls accept f32, bf16 and f16 only
  }
}

// How long one call may take before this rank gives up on the others.
double timeout_seconds() {
  if (const char* v = std::getenv("TRAINMEM_COMM_TIMEOUT_S")) {
    const double s = std::atof(v);
    if (s > 0) return s;
  }
  return 600.0;
}

std::string rank_prefix(int rank, int size) {
  std::string p = "rank ";
  p += std::to_string(rank);
  p += " of ";
  p += std::to_string(size);
  p += ": ";
  return p;
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Device& device, int rank, int size, const ncclUniqueId& id)
      : device_(device), rank_(rank), size_(size), timeout_(timeout_seconds()) {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), 2 * sizeof(double)), "cudaMalloc");
    // Non-blocking: the legacy default stream (compute) would otherwise wait for it, and it for
    // the default stream, at every launch, and nothing would overlap.
    check_cuda(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; wait() polls for errors and the timeout
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    wait_for_call(r, "ncclCommInitRankConfig");
  }

  ~NcclCommunicator() override {
    if (comm_) shut_down();
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    cudaFree(scratch_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

 protected:
  void do_all_reduce(void* buffer, std::size_t count, DType dtype) override {
    run(ncclAllReduce(buffer, buffer, count, nccl_type(dtype), ncclSum, comm_, stream_), "ncclAllReduce");
  }
  // In place when recv == send + rank*recv_count, as NCCL defines it.
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) override {
    run(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), ncclSum, comm_, stream_), "ncclReduceScatter");
  }
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) override {
    run(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, stream_), "ncclAllGather");
  }
  void do_broadcast(void* buffer, std::size_t count, DType dtype, int root) override {
    run(ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root, comm_, stream_), "ncclBroadcast");
  }
  // NCCL has no barrier: a one-element all-reduce completes on no rank before every rank joined.
  void do_barrier() override {
    run(ncclAllReduce(scratch_, scratch_, 1, ncclFloat64, ncclSum, comm_, stream_), "ncclAllReduce (barrier)");
  }
  double do_all_reduce_host(double value, bool max) override {
    check_cuda(cudaMemcpy(scratch_, &value, sizeof value, cudaMemcpyHostToDevice), "cudaMemcpy");
    run(ncclAllReduce(scratch_, scratch_, 1, ncclFloat64, max ? ncclMax : ncclSum, comm_, stream_), "ncclAllReduce");
    double result = 0;
    check_cuda(cudaMemcpy(&result, scratch_, sizeof result, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return result;
  }
  void wait_for_device() override { device_.synchronize(); }

  // The asynchronous all-gather, on the communication stream, with two events:
  //   ready  recorded on the compute stream: the kernels that wrote `send` (and the allocation of
  //          `recv`) come before it; the communication stream waits for it
  //   done   recorded on the communication stream after the gather; wait() makes the compute
  //          stream wait for it (cudaStreamWaitEvent: the host does not block)
  // Nothing synchronizes the device, so the kernels queued meanwhile on the compute stream run
  // while NCCL gathers. Two operations of this communicator never run at once: gathers in flight
  // share the one communication stream (in issue order), and every synchronous collective starts
  // with wait_for_device(), cudaDeviceSynchronize, which lets the gathers in flight finish first
  // (every rank issued them at the same point, so they can). A rank that died leaves `done`
  // unrecorded: the next synchronous call's device synchronization waits on it (a hang that the
  // dead rank's MPI_Abort ends, as for any collective).
  std::unique_ptr<InFlight> do_start_all_gather(const void* send, void* recv, std::size_t send_count,
                                                DType dtype) override {
    cudaEvent_t ready = nullptr, done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(ready, stream_), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(comm_stream_, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);  // allowed while in use: CUDA frees it once the wait is done
    wait_for_call(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, comm_stream_), "ncclAllGather (async)");
    check_cuda(cudaEventRecord(done, comm_stream_), "cudaEventRecord");
    return std::make_unique<AllGatherInFlight>(*this, done);
  }

 private:
  class AllGatherInFlight : public InFlight {
   public:
    AllGatherInFlight(NcclCommunicator& comm, cudaEvent_t done) : comm_(comm), done_(done) {}
    ~AllGatherInFlight() override { cudaEventDestroy(done_); }
    // The compute stream's later kernels (those that read the gathered buffer, and its free)
    // run after the gather.
    void wait() override {
      comm_.check_cuda(cudaStreamWaitEvent(comm_.stream_, done_, 0), "cudaStreamWaitEvent (all_gather)");
    }

   private:
    NcclCommunicator& comm_;
    cudaEvent_t done_;
  };

  // The clean end nccl.h describes: ncclCommFinalize flushes what was issued and leaves the state
  // ncclInProgress until every rank is quiescent; then ncclCommDestroy frees the rest without
  // blocking. A destructor cannot throw, so an error or the timeout aborts instead.
  void shut_down() noexcept {
    ncclResult_t r = ncclCommFinalize(comm_);
    const auto start = std::chrono::steady_clock::now();
    while (r == ncclSuccess || r == ncclInProgress) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
        comm_ = nullptr;
        return;
      }
      if (state != ncclInProgress) break;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_) break;
      std::this_thread::yield();
    }
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // A collective: the call, then its work on the stream, both waited for.
  void run(ncclResult_t launched, const char* call) {
    wait_for_call(launched, call);
    wait_for_stream(call);
  }

  // A non-blocking communicator's call may still be in progress when it returns.
  void wait_for_call(ncclResult_t launched, const char* call) {
    if (launched != ncclSuccess && launched != ncclInProgress) fail(call, ncclGetErrorString(launched));
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(call, ncclGetErrorString(state));
      check_timeout(start, call);
      std::this_thread::yield();
    }
  }

  // The kernels NCCL queued; a rank that died leaves them waiting, so poll with the timeout.
  void wait_for_stream(const char* call) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) fail(call, cudaGetErrorString(q));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(call, ncclGetErrorString(state));
      check_timeout(start, call);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void check_timeout(std::chrono::steady_clock::time_point start, const char* call) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited <= timeout_) return;
    std::string why = "no answer after ";
    why += std::to_string(static_cast<long>(timeout_));
    why += " s (did another rank fail or call a different collective? TRAINMEM_COMM_TIMEOUT_S sets the limit)";
    fail(call, why);
  }

  [[noreturn]] void fail(const char* call, const std::string& why) {
    if (comm_) ncclCommAbort(comm_);  // frees NCCL's resources and stops its kernels waiting for peers
    comm_ = nullptr;
    std::string what = rank_prefix(rank_, size_);
    what += call;
    what += " failed: ";
    what += why;
    throw CommError(what);
  }

  void check_cuda(cudaError_t status, const char* call) {
    if (status != cudaSuccess) fail(call, cudaGetErrorString(status));
  }

  Device& device_;
  int rank_;
  int size_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the default stream, where trainmem's kernels run
  cudaStream_t comm_stream_ = nullptr;  // start_all_gather's gathers, beside the compute
  double* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Device& device, bool required) {
  int rank = 0, size = 1;
  if (launched_by_mpirun()) {
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
    ensure_mpi_initialized();
    rank = mpi_world_rank();
    size = mpi_world_size();
#else
    throw std::invalid_argument(
        "nccl under mpirun needs MPI to exchange NCCL's id, and this trainmem was built without MPI: "
        "install libopenmpi-dev and openmpi-bin (ci/setup) and reconfigure");
#endif
  }

  ncclUniqueId id{};
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  if (size > 1) {
    // One GPU per rank: every rank learns every rank's GPU (its PCI bus id) and all decide alike.
    constexpr int kIdLength = 64;
    char mine[kIdLength] = {};
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess || cudaDeviceGetPCIBusId(mine, kIdLength, current) != cudaSuccess)
      throw CommError(rank_prefix(rank, size) + "cannot identify this rank's GPU");
    std::vector<char> all(static_cast<std::size_t>(size) * kIdLength);
    check_mpi(MPI_Allgather(mine, kIdLength, MPI_CHAR, all.data(), kIdLength, MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
    for (int a = 0; a < size; ++a)
      for (int b = a + 1; b < size; ++b)
        if (std::strncmp(&all[a * kIdLength], &all[b * kIdLength], kIdLength) == 0) {
          if (!required) return nullptr;
          std::string what = "nccl needs one GPU per rank, but ranks ";
          what += std::to_string(a);
          what += " and ";
          what += std::to_string(b);
          what += " share the GPU at ";
          what += &all[a * kIdLength];
          what += "; use the mpi backend (ranks that share a GPU are staged through host memory), or give each "
                  "rank its own GPU";
          throw std::invalid_argument(what);
        }
  }
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw CommError(rank_prefix(rank, size) + "ncclGetUniqueId failed: " + ncclGetErrorString(r));
  }
  if (size > 1) check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast (NCCL id)");
#else
  (void)required;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) throw CommError(rank_prefix(rank, size) + "ncclGetUniqueId failed: " + ncclGetErrorString(r));
#endif
  return std::make_unique<NcclCommunicator>(device, rank, size, id);
}

}  // namespace trainmem
