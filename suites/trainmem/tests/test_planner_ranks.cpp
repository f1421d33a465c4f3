// `trainmem plan` over ranks: the step time of ZeRO 0-3 and FSDP predicted from rank 0's meta
// run (its collectives timed by the calibration's curves, which were measured among these same
// ranks) against `mpirun -np 2` steps measured on this CPU. ctest runs it under mpirun with 2
// ranks; ctest gives it both cores (PROCESSORS 2), so no other test runs beside it.
//
// Margins as test_planner's one-process check (kCiMargin, prediction_check.h; bench_planner
// records the figures against kTarget).
#include <gtest/gtest.h>

#include "common/comm/communicator.h"
#include "common/tests/cpu_device.h"
#include "common/tests/sanitizers.h"
#include "suites/trainmem/planner/prediction_check.h"

namespace trainmem::planner {
namespace {

TEST(StepTimeOverRanks, ShardedStepsPredictedAgainstMeasuredOnThisCpu) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("the same test in ci/test's first ctest: it times steps, and here it would time the sanitizer");
  auto device = testing_support::cpu_device();
  auto world = make_communicator(*device);
  if (world->world_size() < 2) GTEST_SKIP() << "needs 2 ranks: ctest runs it as mpirun -np 2 (built without MPI here)";
  // As test_planner's: kCiMargin, and a second round where the first misses (rank 0 decides: the
  // ranks' steps end together, at the collectives).
  const Agreement a = agreement_on_this_machine(world.get(), kCiMargin);
  if (world->rank() != 0) return;
  EXPECT_LE(a.median_abs_error, kCiMargin.median_abs_error);
  EXPECT_GE(a.spearman, kCiMargin.spearman);
}

}  // namespace
}  // namespace trainmem::planner
