// The MPI library's life in a trainmem process (built only where MPI was found).
//
// MPI is started once, on first use: when a communicator is made, or at the start of main when
// the process was launched by mpirun. It is finalized when the process exits normally (atexit).
// A process that fails must not reach MPI_Finalize while other ranks wait in a collective (it
// would wait for them forever): failures end the job through abort_world (MPI_Abort) instead,
// and an uncaught exception does too (the terminate handler installed here).
#pragma once
#include <mpi.h>

#include <string>

namespace trainmem {

void ensure_mpi_initialized();
bool mpi_active();  // initialized and not yet finalized

// Throws CommError "rank R of N: <call>: <MPI's error string>" unless status is MPI_SUCCESS.
void check_mpi(int status, const char* call);

// This process's rank and the world size in MPI_COMM_WORLD (MPI must be active).
int mpi_world_rank();
int mpi_world_size();

}  // namespace trainmem
