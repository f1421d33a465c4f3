#include "common/comm/mpi_world.h"

#include <cstdlib>
#include <exception>

#include "common/comm/communicator.h"

namespace trainmem {

namespace {

void finalize_at_exit() {
  if (mpi_active()) MPI_Finalize();
}

// An exception nobody caught would abort this process only; the other ranks would learn of it
// from mpirun at best. Name the rank and the cause, and end them all.
[[noreturn]] void abort_world_on_terminate() {
  std::string cause = "terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      cause = std::string("uncaught exception: ") + x.what();
    } catch (...) {
      cause = "uncaught exception of unknown type";
    }
  }
  abort_world(cause, 1);
}

}  // namespace

void ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;  // started here before, or by the program (e.g. the MPI test main)
  // FUNNELED: other threads (data loaders) exist, but only the main thread calls MPI.
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as codes (thrown as CommError, which reach abort_world with the rank named)
  // instead of MPI's default abort without context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finalize_at_exit);
  std::set_terminate(abort_world_on_terminate);
}

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int mpi_world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  std::string message = "rank ";
  message += std::to_string(mpi_world_rank());
  message += " of ";
  message += std::to_string(mpi_world_size());
  message += ": ";
  message += call;
  message += " failed: ";
  message.append(text, static_cast<std::size_t>(length));
  throw CommError(message);
}

}  // namespace trainmem
