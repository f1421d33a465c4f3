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
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&device_scratch_), 2 * sizeof(double)), "cudaMalloc");
    check_cuda(cudaMallocHost(reinterpret_cast<void**>(&host_scalar_), sizeof(double)), "cudaMallocHost");
    // Non-blocking: the legacy default stream (compute) would otherwise wait for it, and it for
    // the default stream, at every launch, and nothing would overlap.
    check_cuda(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; wait() polls for errors and the timeout
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    wait_for_call(r, "ncclCommInitRankConfig");
  }

  ~NcclCommunicator() override {
    if (comm_) shut_down();
    // Nothing of this communicator may still run when its buffers go: NCCL's kernels have ended
    // (finalized, or aborted, which stops them), so this wait is short.
    if (comm_stream_) {
      cudaStreamSynchronize(comm_stream_);
      cudaStreamDestroy(comm_stream_);
    }
    if (inputs_ready_) cudaEventDestroy(inputs_ready_);
    if (done_) cudaEventDestroy(done_);
    cudaFreeHost(host_scalar_);
    cudaFree(device_scratch_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

 protected:
  void do_all_reduce(void* buffer, std::size_t count, DType dtype) override {
    collective("ncclAllReduce", [&](cudaStream_t s) {
      return ncclAllReduce(buffer, buffer, count, nccl_type(dtype), ncclSum, comm_, s);
    });
  }
  // In place when recv == send + rank*recv_count, as NCCL defines it.
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) override {
    collective("ncclReduceScatter", [&](cudaStream_t s) {
      return ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), ncclSum, comm_, s);
    });
  }
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) override {
    collective("ncclAllGather", [&](cudaStream_t s) {
      return ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, s);
    });
  }
  void do_broadcast(void* buffer, std::size_t count, DType dtype, int root) override {
    collective("ncclBroadcast", [&](cudaStream_t s) {
      return ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root, comm_, s);
    });
  }
  // NCCL has no barrier: a one-element all-reduce completes on no rank before every rank joined.
  // The element is zeroed first (on the same stream), so the sum is of defined values: 0.
  void do_barrier() override {
    collective("ncclAllReduce (barrier)", [&](cudaStream_t s) {
      double* element = barrier_slot();
      check_cuda(cudaMemsetAsync(element, 0, sizeof(double), s), "cudaMemsetAsync (barrier)");
      return ncclAllReduce(element, element, 1, ncclFloat64, ncclSum, comm_, s);
    });
  }
  // A host value: in and out through pinned host memory on the communication stream, so that the
  // host waits only by polling (with the timeout), never in a blocking copy. Independent of the
  // compute stream: nothing on it is read or written.
  double do_all_reduce_host(double value, bool max) override {
    const char* call = max ? "ncclAllReduce (max of a host value)" : "ncclAllReduce (sum of a host value)";
    wait_for_stream(comm_stream_, call);  // the pinned slot is free (an earlier call may still read it)
    *host_scalar_ = value;
    double* slot = scalar_slot();
    check_cuda(cudaMemcpyAsync(slot, host_scalar_, sizeof(double), cudaMemcpyHostToDevice, comm_stream_), call);
    wait_for_call(ncclAllReduce(slot, slot, 1, ncclFloat64, max ? ncclMax : ncclSum, comm_, comm_stream_), call);
    check_cuda(cudaMemcpyAsync(host_scalar_, slot, sizeof(double), cudaMemcpyDeviceToHost, comm_stream_), call);
    wait_for_stream(comm_stream_, call);  // the host reads the result: wait for it here
    return *host_scalar_;
  }
  // Before a synchronous collective (for its timing): the gathers in flight on the communication
  // stream first, polled with the timeout (a rank that died leaves them waiting, and a device
  // synchronization would then wait for ever), then the whole device.
  void wait_for_device() override {
    wait_for_stream(comm_stream_, "waiting for the all-gathers in flight");
    device_.synchronize();
  }

  // The asynchronous all-gather: ordered after the compute stream's work so far (the kernels that
  // wrote `send`, the allocation of `recv`), launched on the communication stream, and `done`
  // recorded after it. wait() makes the compute stream wait for `done` (cudaStreamWaitEvent: the
  // host does not block), so the kernels queued on the compute stream meanwhile run while NCCL
  // gathers. Gathers in flight share the one communication stream (in issue order, the same on
  // every rank), and every synchronous collective starts by waiting for them (wait_for_device).
  std::unique_ptr<InFlight> do_start_all_gather(const void* send, void* recv, std::size_t send_count,
                                                DType dtype) override {
    cudaEvent_t done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    auto op = std::make_unique<AllGatherInFlight>(*this, done);  // owns the event from here on, even if a call throws
    comm_after_compute();
    wait_for_call(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, comm_stream_), "ncclAllGather (async)");
    check_cuda(cudaEventRecord(done, comm_stream_), "cudaEventRecord");
    return op;
  }

 private:
  // The two streams and what orders them (never a host synchronization):
  //   compute  the default stream (nullptr), where trainmem's kernels and copies run
  //   comm     this communicator's own non-blocking stream, where every NCCL call runs
  // Before a collective the comm stream waits for an event recorded on the compute stream (its
  // inputs are written); after it, the compute stream waits for an event recorded on the comm
  // stream (its outputs are there). A synchronous collective makes the compute stream wait at
  // once; an asynchronous all-gather when its handle's wait() is called.
  //
  // The caching allocator (common/allocator) reuses a block freed on a stream at once for later
  // work on that stream; blocks used on other streams need record_stream. Every buffer NCCL reads
  // or writes here was allocated on, and is freed on, the compute stream, and the compute stream
  // waits for the collective's `done` event before anything queued after the wait can run: a
  // synchronous collective before it returns, an asynchronous one in wait() (the handle's
  // destructor waits, and FlatUnit drops its handle before freeing the buffer). So a free after
  // that point is already stream-ordered after the collective, and a block handed out again can
  // only be written by compute work that runs after NCCL is done with it: no record_stream is
  // needed (nor possible in general: NCCL is given raw pointers, e.g. a slice of a block). A
  // free *before* wait() would break this, which is why communicator.h forbids it.
  // (Teardown's unmapping waits for the whole device, common/allocator.)
  void comm_after_compute() {
    check_cuda(cudaEventRecord(inputs_ready_, compute_stream_), "cudaEventRecord (inputs ready)");
    check_cuda(cudaStreamWaitEvent(comm_stream_, inputs_ready_, 0), "cudaStreamWaitEvent (inputs ready)");
  }
  void compute_after(cudaEvent_t done, const char* call) {
    check_cuda(cudaStreamWaitEvent(compute_stream_, done, 0), call);
  }

  // A synchronous collective: launched on the comm stream in stream order, then waited for by the
  // host, polling (the counts time the transfer, and a rank that died is found by the timeout).
  template <class Launch>
  void collective(const char* call, Launch launch) {
    comm_after_compute();
    wait_for_call(launch(comm_stream_), call);
    check_cuda(cudaEventRecord(done_, comm_stream_), call);
    compute_after(done_, call);
    wait_for_event(done_, call);
  }

  class AllGatherInFlight : public InFlight {
   public:
    AllGatherInFlight(NcclCommunicator& comm, cudaEvent_t done) : comm_(comm), done_(done) {}
    ~AllGatherInFlight() override { cudaEventDestroy(done_); }
    // The compute stream's later kernels (those that read the gathered buffer, and its free)
    // run after the gather; the host goes on at once.
    void wait() override { comm_.compute_after(done_, "cudaStreamWaitEvent (all_gather)"); }

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

  // The work NCCL queued; a rank that died leaves it waiting, so poll with the timeout.
  void wait_for_event(cudaEvent_t event, const char* call) {
    poll([&] { return cudaEventQuery(event); }, call);
  }
  void wait_for_stream(cudaStream_t stream, const char* call) {
    poll([&] { return cudaStreamQuery(stream); }, call);
  }
  template <class Query>
  void poll(Query query, const char* call) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = query();
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) fail(call, cudaGetErrorString(q));
      if (comm_ == nullptr) fail(call, "the communicator was aborted by an earlier failure");
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
  const cudaStream_t compute_stream_ = nullptr;  // the default stream, where trainmem's kernels run
  cudaStream_t comm_stream_ = nullptr;           // every NCCL call, beside the compute
  cudaEvent_t inputs_ready_ = nullptr;           // recorded on compute, waited for by comm
  cudaEvent_t done_ = nullptr;                   // a synchronous collective's end, recorded on comm
  double* device_scratch_ = nullptr;  // two doubles of device memory: a host scalar's slot, the barrier's element
  double* scalar_slot() { return device_scratch_; }
  double* barrier_slot() { return device_scratch_ + 1; }
  double* host_scalar_ = nullptr;  // pinned: the copies of a host scalar never block the host
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
