// A world of ranks and the collectives that data parallelism, ZeRO and FSDP are made of.
//
//   all_reduce      every rank ends with the element-wise sum of all ranks' buffers
//   reduce_scatter  rank r ends with the sum of slice r (count elements) of all ranks' inputs
//   all_gather      every rank ends with all ranks' count-element slices, in rank order
//   broadcast       every rank ends with root's buffer
//   barrier         nobody leaves before everybody has arrived
//
// Buffers are device buffers of the Device the communicator was made for (host memory on the
// CPU backend). Backends (no network code of our own):
//   local  world size 1: collectives are copies (a single process needs no MPI)
//   mpi    CPU ranks, and several processes that share one GPU (staged through host memory)
//   nccl   one rank per GPU; the NCCL unique id is exchanged over MPI
//
// Two byte counts per call, as nccl-tests reports two bandwidths:
//   volume_bytes  the ZeRO paper's measure: the size of the whole buffer being reduced or
//                 gathered, S = count_total * element size (reduce-scatter S, all-gather S,
//                 broadcast S, all-reduce 2S, counted as reduce-scatter + all-gather). Stage 0-2
//                 move 2Ψ elements per step, stage 3 3Ψ (Rajbhandari et al. 2019, section 7).
//   sent_bytes    what this rank sends in a ring algorithm: reduce-scatter and all-gather
//                 S*(N-1)/N, all-reduce 2*S*(N-1)/N, broadcast S (root) or 0; received likewise.
//                 sent_bytes / time is nccl-tests' bus bandwidth.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/allocator/memory_category.h"
#include "common/tensor/dtype.h"

namespace trainmem {

class CostLog;
class Device;

enum class Collective : int { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
constexpr std::size_t kNumCollectives = 5;
std::string to_string(Collective c);

// Totals for one collective or one category. Every figure is per rank (this rank's view).
struct CommCounts {
  std::uint64_t calls = 0;
  std::uint64_t volume_bytes = 0;
  std::uint64_t sent_bytes = 0;
  std::uint64_t received_bytes = 0;
  double seconds = 0;  // wall time inside the collective (the device synchronized)
};

struct CommStats {
  std::array<CommCounts, kNumCollectives> by_collective{};
  std::array<CommCounts, kNumMemoryCategories> by_category{};  // what was communicated: gradients, parameters, ...
  CommCounts total;
};

// Thrown by every rank when a collective cannot complete (another rank failed, a timeout, a
// size mismatch). The message names the rank and the cause.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Communicator;

// A backend's collective still in flight: wait() returns once its result may be used (on a GPU:
// once the compute stream is ordered after it). Only the Communicator's backends make these.
class InFlight {
 public:
  virtual ~InFlight() = default;
  virtual void wait() = 0;
};

// What start_all_gather returns: the collective, started. wait() before using the receive buffer
// (and before writing the send buffer or freeing either). Waiting twice is harmless; the
// destructor waits, so nothing is ever left in flight.
class PendingCollective {
 public:
  ~PendingCollective();
  PendingCollective(const PendingCollective&) = delete;
  PendingCollective& operator=(const PendingCollective&) = delete;

  void wait();
  bool done() const { return op_ == nullptr; }

 private:
  friend class Communicator;
  PendingCollective(Communicator& comm, Collective collective, MemoryCategory category, std::unique_ptr<InFlight> op,
                    std::uint64_t id)
      : comm_(comm), collective_(collective), category_(category), op_(std::move(op)), id_(id) {}

  Communicator& comm_;
  Collective collective_;
  MemoryCategory category_;
  std::unique_ptr<InFlight> op_;  // null once complete
  std::uint64_t id_;              // its number in the cost log (start and wait)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi" or "nccl"

  // dtype: f32, bf16 or f16; `category` says what is being moved, for the counts.
  // The order of a sum: the local and mpi backends add in rank order in fp32 and round once
  // (common/comm/rank_order_sum.h), so every rank, run and MPI build gets the same bits, equal to
  // the same sum made in one process. nccl sums in NCCL's own order (in 16 bits: one rounding per
  // ring step): the same bits for N <= 2 (one addition per element), within rounding beyond.
  // all_reduce is in place. For reduce_scatter and all_gather, recv may be the rank's own slice of
  // send / recv (recv == send + rank*count elements) as in NCCL; other overlaps are not allowed.
  // Every rank must call the same collectives in the same order with the same counts.
  void all_reduce(void* buffer, std::size_t count, DType dtype, MemoryCategory category);
  // send: world_size * recv_count elements; recv: recv_count elements.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, MemoryCategory category);
  // send: send_count elements; recv: world_size * send_count elements.
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, MemoryCategory category);
  void broadcast(void* buffer, std::size_t count, DType dtype, int root, MemoryCategory category);
  void barrier();

  // all_gather, started but not waited for, so that the caller computes while it runs (FSDP's
  // prefetch). Same buffers and rules as all_gather, plus: every rank starts the same gathers in
  // the same order, and several may be in flight at once (other collectives may run meanwhile).
  // Counted once, like all_gather: calls and bytes when started, by the same formulas; seconds are
  // the time the host spent in start_all_gather plus in wait().
  //   local, mpi staging a GPU:  run the synchronous all_gather; the handle is already complete
  //   mpi on the CPU:            MPI_Iallgather; wait() is MPI_Wait
  //   nccl:                      ncclAllGather on a communication stream, ordered after the work
  //                              already queued on the compute stream; wait() orders the compute
  //                              stream after the gather (the host does not block, so seconds are
  //                              the launch only, not the transfer)
  std::unique_ptr<PendingCollective> start_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype,
                                                      MemoryCategory category);
  // All-reduce of a host scalar (max or sum): gradient norms, found-inf flags, losses. Not
  // counted in the stats (8 bytes, not a device buffer).
  double all_reduce_sum(double value);
  double all_reduce_max(double value);

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  // Where each collective is declared (common/device/cost_log.h); nullptr: nowhere.
  void set_cost_log(CostLog* log) { cost_log_ = log; }

 protected:
  // What each backend implements; the public calls count bytes and time around them.
  virtual void do_all_reduce(void* buffer, std::size_t count, DType dtype) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) = 0;
  virtual void do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) = 0;
  virtual void do_broadcast(void* buffer, std::size_t count, DType dtype, int root) = 0;
  virtual void do_barrier() = 0;
  // The asynchronous all-gather, where the backend has one; nullptr means "none": start_all_gather
  // then runs the synchronous all_gather.
  virtual std::unique_ptr<InFlight> do_start_all_gather(const void* /*send*/, void* /*recv*/,
                                                        std::size_t /*send_count*/, DType /*dtype*/) {
    return nullptr;
  }
  virtual double do_all_reduce_host(double value, bool max) = 0;
  // Waits for work already queued on the device, so that a collective's time is its own.
  virtual void wait_for_device() {}

 private:
  friend class PendingCollective;
  template <class Body>
  void counted(Collective c, std::uint64_t bytes_total, MemoryCategory category, bool is_root, Body body);
  // Adds one call's counts (communicator.cpp has the formulas) / more seconds to the totals, to
  // the collective's and to the category's.
  void count_call(Collective c, std::uint64_t bytes_total, MemoryCategory category, bool is_root, double seconds);
  void count_seconds(Collective c, MemoryCategory category, double seconds);
  CommStats stats_;
  CostLog* cost_log_ = nullptr;
  std::uint64_t started_ = 0;  // asynchronous collectives started so far (their ids)
};

// The world this process belongs to: "local" when not started by mpirun (or built without MPI),
// "mpi" under mpirun on the CPU, "nccl" under mpirun on GPUs (one per rank) when NCCL is present,
// else "mpi" with host staging. `backend` forces one ("auto", "local", "mpi", "nccl"); an
// impossible choice throws std::invalid_argument saying what to change.
std::unique_ptr<Communicator> make_communicator(Device& device, const std::string& backend = "auto");

// Whether this process was launched by mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set), without
// initializing anything: decides before the device is opened.
bool launched_by_mpirun();
// The number of ranks mpirun started, from the same environment (1 for a single process): for
// work done before any communicator exists, e.g. loading the data of the whole global batch.
std::size_t launched_world_size();
// This process's rank among them, from the same environment (0 for a single process).
std::size_t launched_rank();
// The ranks mpirun started on this machine (OMPI_COMM_WORLD_LOCAL_SIZE; 1 for a single process):
// CPU ranks on one machine share its memory.
std::size_t launched_local_size();

// Starts MPI now when launched by mpirun and built with MPI (else does nothing), so that an
// error before any communicator exists still ends every rank through MPI_Abort. Call it first
// thing in main; MPI is finalized at exit.
void init_mpi_if_launched();

// Whether this trainmem was built with MPI (TRAINMEM_WITH_MPI) / with NCCL.
bool mpi_compiled();
bool nccl_compiled();

// Ends the whole job from any rank: prints "trainmem: rank R of N: <message>" and makes every
// rank exit with `exit_code` (MPI_Abort under MPI; plain exit otherwise). Never returns.
[[noreturn]] void abort_world(const std::string& message, int exit_code);

}  // namespace trainmem
