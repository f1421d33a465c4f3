// What every backend shares: the byte and time counts around each collective, the choice of
// backend, and ending the whole job from one rank.
#include "common/comm/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <unistd.h>

#include "common/comm/local_communicator.h"
#include "common/device/cost_log.h"
#include "common/device/device.h"

#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
#include "common/comm/mpi_communicator.h"
#include "common/comm/mpi_world.h"
#endif
#if defined(TRAINMEM_WITH_NCCL) && TRAINMEM_WITH_NCCL
#include "common/comm/nccl_communicator.h"
#endif

namespace trainmem {

std::string to_string(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::broadcast: return "broadcast";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

namespace {

// The counts of one call on one rank, for a collective over a whole buffer of S bytes among N
// ranks (see communicator.h):
//   all_reduce      volume 2S, sent = received = 2*S*(N-1)/N   (reduce-scatter + all-gather)
//   reduce_scatter  volume S,  sent = received = S*(N-1)/N
//   all_gather      volume S,  sent = received = S*(N-1)/N
//   broadcast       volume S,  sent S by the root, received S by every other rank
// S is a multiple of N for reduce-scatter and all-gather; for all-reduce S*(N-1)/N is rounded
// down to whole bytes.
CommCounts counts_of_call(Collective c, std::uint64_t S, std::uint64_t N, bool is_root) {
  CommCounts k;
  k.calls = 1;
  switch (c) {
    case Collective::all_reduce:
      k.volume_bytes = 2 * S;
      k.sent_bytes = k.received_bytes = 2 * S * (N - 1) / N;
      break;
    case Collective::reduce_scatter:
    case Collective::all_gather:
      k.volume_bytes = S;
      k.sent_bytes = k.received_bytes = S * (N - 1) / N;
      break;
    case Collective::broadcast:
      k.volume_bytes = S;
      k.sent_bytes = (is_root && N > 1) ? S : 0;
      k.received_bytes = is_root ? 0 : S;
      break;
    case Collective::barrier:
      break;
  }
  return k;
}

void add(CommCounts& into, const CommCounts& k) {
  into.calls += k.calls;
  into.volume_bytes += k.volume_bytes;
  into.sent_bytes += k.sent_bytes;
  into.received_bytes += k.received_bytes;
  into.seconds += k.seconds;
}

void check_dtype(DType dtype, const char* call) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw std::invalid_argument(std::string(call) + ": dtype must be f32, bf16 or f16, not " +
                                std::string(to_string(dtype)));
}

using Clock = std::chrono::steady_clock;

}  // namespace

// Runs `body` (the backend's collective), timing it, and adds the call's counts to the totals,
// to its collective and to its category.
template <class Body>
void Communicator::counted(Collective c, std::uint64_t bytes_total, MemoryCategory category, bool is_root, Body body) {
  wait_for_device();
  const auto start = Clock::now();
  body();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  count_call(c, bytes_total, category, is_root, seconds);
  if (cost_log_) {
    CommCounts call = counts_of_call(c, bytes_total, static_cast<std::uint64_t>(world_size()), is_root);
    call.seconds = seconds;
    cost_log_->collective(c, call, world_size(), false, 0);
  }
}

void Communicator::count_call(Collective c, std::uint64_t bytes_total, MemoryCategory category, bool is_root,
                              double seconds) {
  CommCounts k = counts_of_call(c, bytes_total, static_cast<std::uint64_t>(world_size()), is_root);
  k.seconds = seconds;
  add(stats_.by_collective[static_cast<std::size_t>(c)], k);
  add(stats_.by_category[index_of(category)], k);
  add(stats_.total, k);
}

void Communicator::count_seconds(Collective c, MemoryCategory category, double seconds) {
  stats_.by_collective[static_cast<std::size_t>(c)].seconds += seconds;
  stats_.by_category[index_of(category)].seconds += seconds;
  stats_.total.seconds += seconds;
}

void Communicator::all_reduce(void* buffer, std::size_t count, DType dtype, MemoryCategory category) {
  check_dtype(dtype, "all_reduce");
  counted(Collective::all_reduce, count * dtype_size(dtype), category, false,
          [&] { do_all_reduce(buffer, count, dtype); });
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  MemoryCategory category) {
  check_dtype(dtype, "reduce_scatter");
  const std::uint64_t S = static_cast<std::uint64_t>(world_size()) * recv_count * dtype_size(dtype);
  counted(Collective::reduce_scatter, S, category, false,
          [&] { do_reduce_scatter(send, recv, recv_count, dtype); });
}

void Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype,
                              MemoryCategory category) {
  check_dtype(dtype, "all_gather");
  const std::uint64_t S = static_cast<std::uint64_t>(world_size()) * send_count * dtype_size(dtype);
  counted(Collective::all_gather, S, category, false,
          [&] { do_all_gather(send, recv, send_count, dtype); });
}

std::unique_ptr<PendingCollective> Communicator::start_all_gather(const void* send, void* recv, std::size_t send_count,
                                                                  DType dtype, MemoryCategory category) {
  check_dtype(dtype, "start_all_gather");
  const auto start = Clock::now();
  std::unique_ptr<InFlight> op = do_start_all_gather(send, recv, send_count, dtype);
  if (!op) {
    // No asynchronous version on this backend: the synchronous call, which counts itself.
    all_gather(send, recv, send_count, dtype, category);
  } else {
    // Counted now, once, as all_gather counts: S = N * send_count * element size (volume S,
    // sent = received = S*(N-1)/N); wait() adds the seconds it spends.
    const std::uint64_t S = static_cast<std::uint64_t>(world_size()) * send_count * dtype_size(dtype);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    count_call(Collective::all_gather, S, category, false, seconds);
    if (cost_log_) {
      CommCounts call = counts_of_call(Collective::all_gather, S, static_cast<std::uint64_t>(world_size()), false);
      call.seconds = seconds;
      cost_log_->collective(Collective::all_gather, call, world_size(), true, started_ + 1);
    }
  }
  const std::uint64_t id = op ? ++started_ : 0;
  return std::unique_ptr<PendingCollective>(
      new PendingCollective(*this, Collective::all_gather, category, std::move(op), id));
}

void PendingCollective::wait() {
  if (!op_) return;
  const auto start = Clock::now();
  op_->wait();
  op_.reset();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  comm_.count_seconds(collective_, category_, seconds);
  if (comm_.cost_log_) comm_.cost_log_->collective_wait(id_, seconds);
}

PendingCollective::~PendingCollective() {
  // A destructor must not throw: a collective that fails here (another rank died) ends the job,
  // as a failed collective would have through the caller.
  try {
    wait();
  } catch (const std::exception& e) {
    std::string what = "a collective left in flight failed: ";
    what += e.what();
    abort_world(what, 1);
  }
}

void Communicator::broadcast(void* buffer, std::size_t count, DType dtype, int root, MemoryCategory category) {
  check_dtype(dtype, "broadcast");
  if (root < 0 || root >= world_size()) {
    std::string what = "broadcast: root ";
    what += std::to_string(root);
    what += " is not a rank of a world of ";
    what += std::to_string(world_size());
    throw std::invalid_argument(what);
  }
  counted(Collective::broadcast, count * dtype_size(dtype), category, root == rank(),
          [&] { do_broadcast(buffer, count, dtype, root); });
}

void Communicator::barrier() {
  counted(Collective::barrier, 0, MemoryCategory::other, false, [&] { do_barrier(); });
}

double Communicator::all_reduce_sum(double value) { return do_all_reduce_host(value, false); }
double Communicator::all_reduce_max(double value) { return do_all_reduce_host(value, true); }

// --- the world

bool launched_by_mpirun() {
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's hydra and Slurm's PMI set PMI_SIZE.
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

bool mpi_compiled() {
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool nccl_compiled() {
#if defined(TRAINMEM_WITH_NCCL) && TRAINMEM_WITH_NCCL
  return true;
#else
  return false;
#endif
}

void init_mpi_if_launched() {
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  if (launched_by_mpirun()) ensure_mpi_initialized();
#endif
}

namespace {

// Rank and size from mpirun's environment, for a process whose MPI is not (or not yet) started.
int env_int(const char* a, const char* b, int fallback) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return fallback;
}

}  // namespace

std::size_t launched_world_size() {
  return static_cast<std::size_t>(std::max(1, env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1)));
}

std::size_t launched_rank() {
  return static_cast<std::size_t>(std::max(0, env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0)));
}

std::size_t launched_local_size() {
  return static_cast<std::size_t>(std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", 1)));
}

void abort_world(const std::string& message, int exit_code) {
  int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
  int size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  const bool mpi = mpi_active();
  if (mpi) {
    rank = mpi_world_rank();
    size = mpi_world_size();
  }
#endif
  std::cout.flush();
  // One write(2) of the whole line: std::cerr is unbuffered, so `<<` piece by piece would be
  // several writes, and mpirun's own abort banner could land between them.
  std::string line = "trainmem: rank ";
  line += std::to_string(rank);
  line += " of ";
  line += std::to_string(size);
  line += ": ";
  line += message;
  line += '\n';
  std::fflush(nullptr);
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  // MPI_Abort makes mpirun end every rank, including those waiting in a collective.
  if (mpi) MPI_Abort(MPI_COMM_WORLD, exit_code == 0 ? 1 : exit_code);
#endif
  // Without MPI running: a non-zero exit is enough, mpirun ends the other ranks when it sees one.
  std::_Exit(exit_code == 0 ? 1 : exit_code);
}

std::unique_ptr<Communicator> make_communicator(Device& device, const std::string& backend) {
  if (backend != "auto" && backend != "local" && backend != "mpi" && backend != "nccl")
    throw std::invalid_argument("communicator backend must be auto, local, mpi or nccl, not '" + backend + "'");

  if (backend == "local") return std::make_unique<LocalCommunicator>(device);

  if (backend == "auto" && !launched_by_mpirun()) return std::make_unique<LocalCommunicator>(device);

#if defined(TRAINMEM_WITH_NCCL) && TRAINMEM_WITH_NCCL
  if (backend == "nccl" || (backend == "auto" && device.kind() == DeviceKind::cuda)) {
    if (device.kind() != DeviceKind::cuda)
      throw std::invalid_argument("the nccl communicator needs a CUDA device; use --device cuda, or the mpi backend on the cpu");
    // auto: NCCL where every rank has its own GPU, else MPI staged through host memory.
    if (auto nccl = make_nccl_communicator(device, /*required=*/backend == "nccl")) return nccl;
  }
#else
  if (backend == "nccl")
    throw std::invalid_argument(
        "this trainmem was built without NCCL (it needs CUDA and libnccl); use the mpi backend (mpirun) or local");
#endif

#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  return std::make_unique<MpiCommunicator>(device);
#else
  if (backend == "mpi")
    throw std::invalid_argument(
        "this trainmem was built without MPI: install libopenmpi-dev and openmpi-bin (ci/setup) and "
        "reconfigure, or run a single process (local backend)");
  // auto under mpirun: N copies of a world of one would each train alone; refuse rather than mislead.
  throw std::invalid_argument(
      "launched by mpirun, but this trainmem was built without MPI: install libopenmpi-dev and "
      "openmpi-bin (ci/setup) and reconfigure, or run one process without mpirun");
#endif
}

}  // namespace trainmem
