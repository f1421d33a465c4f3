// NCCL backend: one rank per GPU (built where CUDA and NCCL are found).
//
// Rank 0 makes NCCL's unique id and MPI broadcasts it (without mpirun: a world of one, no MPI).
// The communicator is non-blocking (ncclConfig_t.blocking = 0): every call, initialization
// included, is waited for by polling ncclCommGetAsyncError and the stream, up to a timeout
// (TRAINMEM_COMM_TIMEOUT_S seconds, default 600); an error or the timeout aborts the
// communicator (ncclCommAbort) and throws CommError naming the rank, so nothing waits forever
// on a rank that died. Collectives run on the default stream, after the kernels that produced
// their buffers, and are waited for (the counts time them); start_all_gather's run on a second,
// communication stream beside the compute (see do_start_all_gather).
//
// 16-bit sums are NCCL's own (communicator.h says how they compare with the other backends).
// The communicator allocates 16 bytes of device memory of its own (cudaMalloc, outside the
// caching allocator) for host scalars and the barrier; NCCL's internal buffers are NCCL's.
#pragma once
#include <memory>

#include "common/comm/communicator.h"

namespace trainmem {

// NCCL needs one GPU per rank. When ranks share a GPU: nullptr if not `required` (make_communicator
// then takes the mpi backend, staged through host memory), else std::invalid_argument saying
// what to change. Collective over the ranks under mpirun (every rank decides alike).
std::unique_ptr<Communicator> make_nccl_communicator(Device& device, bool required);

}  // namespace trainmem
