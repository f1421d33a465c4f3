// NCCL backend: one rank per GPU (built where CUDA and NCCL are found).
//
// Rank 0 makes NCCL's unique id and MPI broadcasts it (without mpirun: a world of one, no MPI).
// The communicator is non-blocking (ncclConfig_t.blocking = 0): every call, initialization
// included, is waited for by polling ncclCommGetAsyncError and the stream, up to a timeout
// (TRAINMEM_COMM_TIMEOUT_S seconds, default 600); an error or the timeout aborts the
// communicator (ncclCommAbort) and throws CommError naming the rank, so nothing waits forever
// on a rank that died. Every NCCL call runs on the communicator's own non-blocking CUDA stream,
// ordered against the compute (default) stream by events, never by a host synchronization: the
// collective waits for an event recorded on the compute stream after its inputs were written,
// and the compute stream waits for the collective's completion event before using its results.
// The synchronous calls are then waited for by the host as well (the counts time them, and the
// timeout finds a rank that died); start_all_gather's gathers are not: their wait() only orders
// the compute stream after them, so the compute kernels queued meanwhile overlap the gather.
// Host scalars go through pinned host memory on the communication stream, waited for by polling.
//
// 16-bit sums are NCCL's own (communicator.h says how they compare with the other backends).
// The communicator allocates 16 bytes of device memory (cudaMalloc) and 8 of pinned host memory
// (cudaMallocHost) of its own, outside the caching allocator, for host scalars and the barrier;
// NCCL's internal buffers are NCCL's.
#pragma once
#include <memory>

#include "common/comm/communicator.h"

namespace trainmem {

// NCCL needs one GPU per rank. When ranks share a GPU: nullptr if not `required` (make_communicator
// then takes the mpi backend, staged through host memory), else std::invalid_argument saying
// what to change. Collective over the ranks under mpirun (every rank decides alike).
std::unique_ptr<Communicator> make_nccl_communicator(Device& device, bool required);

}  // namespace trainmem
