// main() for GoogleTest binaries that run under mpirun (trainmem_add_mpi_test in the top-level
// CMakeLists.txt): every rank runs every test, rank 0 prints gtest's usual output, the other
// ranks print only their failures (prefixed with their rank), and the exit status is non-zero on
// every rank when a test failed on any rank. Without MPI (or not under mpirun) the binary is a
// world of one.
#include <gtest/gtest.h>

#include <iostream>

#include "common/comm/communicator.h"
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
#include "common/comm/mpi_world.h"
#endif

namespace {

// What a rank other than 0 prints: its failed assertions and failed tests, nothing else.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::cout << "[rank " << rank_ << "] " << (r.file_name() ? r.file_name() : "?") << ':' << r.line_number()
              << ": Failure\n"
              << r.summary() << std::endl;
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result()->Failed())
      std::cout << "[rank " << rank_ << "] [  FAILED  ] " << t.test_suite_name() << '.' << t.name() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  trainmem::ensure_mpi_initialized();
  const int rank = trainmem::mpi_world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_anywhere = 0;
  MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed_anywhere && !failed_here)
    std::cout << "FAILED on another rank: see the [rank R] lines above" << std::endl;
  MPI_Finalize();
  return failed_anywhere;
#else
  return RUN_ALL_TESTS();
#endif
}
