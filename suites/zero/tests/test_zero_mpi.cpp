// ZeRO over N ranks (ctest runs this under mpirun with 2 and 4 CPU ranks; alone it is a world
// of one). Every rank checks, for itself:
//
//   1. Equality: after 3 steps its fp32 master weights (an fp32 model's parameters) equal, bit
//      for bit, one process that adds what the N ranks add in the order they add it
//      (common/tests/data_parallel_reference.h), in fp32, bf16 and fp16 (fp16 with a static loss
//      scale), with and without accumulation and offload. No tolerance: both sides make the same
//      products of the same shapes, so whatever BLAS kernel runs, and with how many threads, the
//      sums are the same; the communicator adds in rank order (common/comm/rank_order_sum.h).
//   2. Memory: bytes per category (allocator, bf16) EXACTLY as zero_memory.h's exact formula —
//      parameters, gradients and optimizer state between steps and at their peaks (gathered units
//      and buckets included), no communication buffer, the offloaded host bytes — and within the
//      stated rounding/padding of the paper's 2Ψ+2Ψ+12Ψ (stage 0), 2Ψ+2Ψ+12Ψ/N (1), 2Ψ+(2Ψ+12Ψ)/N (2), (2Ψ+2Ψ+12Ψ)/N (3).
//   3. Communication: the communicator's volume per step, by category, EXACTLY as the exact
//      formula: 2Ψ·e for stage 0; 2P·e for stages 1-2 (P = Ψ padded per unit to N); (3P - P_root)·e
//      for stage 3, whose root unit stays gathered for the micro-step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "suites/zero/tests/zero_test_support.h"
#include "suites/zero/zero_memory.h"

namespace trainmem::zero {
namespace {

using test_support::cpu_device;
using test_support::Settings;

// fp16 runs scale the loss by 2^12, as GradScaler would, so that the gradients stay fp16 normal
// numbers (from 6.1e-5) instead of underflowing.
constexpr double kFp16LossScale = 4096;

struct Case {
  int stage;
  Offload offload;
  std::size_t accumulation;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string name = "zero";
  name += std::to_string(i.param.stage);
  name += "_offload_";
  name += to_string(i.param.offload);
  name += "_accum";
  name += std::to_string(i.param.accumulation);
  return name;
}

const auto kCases = ::testing::Values(Case{0, Offload::none, 1}, Case{1, Offload::none, 1}, Case{2, Offload::none, 1},
                                      Case{3, Offload::none, 1}, Case{0, Offload::none, 2}, Case{1, Offload::none, 2},
                                      Case{2, Offload::none, 2}, Case{3, Offload::none, 2},
                                      Case{1, Offload::optimizer, 1}, Case{2, Offload::optimizer, 2},
                                      Case{3, Offload::optimizer, 1}, Case{3, Offload::params, 2});

class ZeroOverRanks : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroOverRanks, MastersEqualTheRanksAdditionsMadeInOneProcess) {
  const Case c = GetParam();
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(to_string(precision));
    Settings s;
    s.stage = c.stage;
    s.offload = c.offload;
    s.accumulation = c.accumulation;
    s.precision = precision;
    s.loss_scale = precision == Precision::fp16 ? kFp16LossScale : 1;
    auto device = cpu_device();
    auto comm = make_communicator(*device);
    test_support::ZeroRun run = test_support::make_zero_run(std::move(device), *comm, s);
    for (int i = 0; i < s.steps; ++i) run.trainer->step();
    const auto zero = run.zero->master_values();
    const auto reference = test_support::data_parallel_reference(s, comm->world_size());
    EXPECT_TRUE(test_support::equal_bit_for_bit(zero, reference)) << "rank " << comm->rank() << " of " << comm->world_size();
  }
}

TEST_P(ZeroOverRanks, BytesPerCategoryEqualTheFormula) {
  const Case c = GetParam();
  Settings s;
  s.stage = c.stage;
  s.offload = c.offload;
  s.accumulation = c.accumulation;
  s.precision = Precision::bf16;  // the paper's mixed precision: 2Ψ + 2Ψ + 12Ψ
  s.steps = 2;
  auto device = cpu_device();
  Device& d = *device;
  auto comm = make_communicator(d);
  const int N = comm->world_size();
  test_support::ZeroRun run = test_support::make_zero_run(std::move(device), *comm, s);
  for (int i = 0; i < s.steps; ++i) run.trainer->step();

  const ZeroExactBytes x =
      exact_model_states(zero_units(test_support::test_config()), N, s.stage, s.precision, s.offload, s.accumulation);
  using MC = MemoryCategory;
  // The model states between steps (current) and their peaks since the set-up, which add the
  // units gathered (parameters) and the gradient buckets open (gradients) at once.
  struct Expected {
    MC category;
    std::uint64_t at_rest, peak;
  };
  for (const Expected& e : {Expected{MC::parameters, x.parameters, x.parameters_peak},
                            Expected{MC::gradients, x.gradients, x.gradients_peak},
                            Expected{MC::optimizer_state, x.optimizer_state, x.optimizer_state}}) {
    EXPECT_EQ(test_support::category_bytes(d, e.category), static_cast<std::int64_t>(e.at_rest)) << to_string(e.category);
    EXPECT_EQ(test_support::category_peak(d, e.category), static_cast<std::int64_t>(e.peak)) << to_string(e.category);
  }
  // No buffer exists only to move bytes: nothing of category communication, ever.
  EXPECT_EQ(test_support::category_bytes(d, MC::communication), 0);
  EXPECT_EQ(test_support::category_peak(d, MC::communication), static_cast<std::int64_t>(x.communication_peak));
  EXPECT_EQ(run.zero->host_bytes(), x.host);

  // The paper's formula, up to what the exact one adds: 512-byte rounding of each allocation and
  // the padding of each unit to a multiple of N.
  const double psi = static_cast<double>(run.model->num_parameters());
  const ModelStateBytes paper = paper_model_states(psi, N, s.stage, s.precision, s.offload);
  const std::size_t units = 1 + test_support::test_config().layers;
  const std::size_t tensors = run.model->parameters().size();
  const double allocations = s.stage == 0 ? static_cast<double>(tensors) : static_cast<double>(units);
  const double slack_per_array = 512.0 * allocations + 4.0 * units;  // rounding + (N-1)/N padding elements * e / N
  EXPECT_NEAR(static_cast<double>(x.parameters), paper.parameters, slack_per_array + (s.stage < 3 ? 2.0 * N * units : 0));
  EXPECT_NEAR(static_cast<double>(x.gradients), paper.gradients, slack_per_array + (s.stage < 2 ? 2.0 * N * units : 0));
  EXPECT_NEAR(static_cast<double>(x.optimizer_state), paper.optimizer_state, 3 * slack_per_array);
  if (s.offload != Offload::none) {
    // host: 12 B of optimizer state + the 4-byte fp32 gradient copy per shard element (+ the
    // parameter shard with params offload)
    const double host_extra = 4.0 * psi / N;
    EXPECT_NEAR(static_cast<double>(x.host), paper.host + host_extra, 16.0 * units + 2.0 * units);
  }
  if (comm->rank() == 0)
    std::printf("  N=%d stage %d: parameters %llu (paper %.0f, peak %llu), gradients %llu (%.0f, peak %llu), "
                "optimizer %llu (%.0f), host %llu\n",
                N, s.stage, static_cast<unsigned long long>(x.parameters), paper.parameters,
                static_cast<unsigned long long>(x.parameters_peak), static_cast<unsigned long long>(x.gradients),
                paper.gradients, static_cast<unsigned long long>(x.gradients_peak),
                static_cast<unsigned long long>(x.optimizer_state), paper.optimizer_state,
                static_cast<unsigned long long>(x.host));
}

TEST_P(ZeroOverRanks, BytesCommunicatedPerStepEqualTheFormula) {
  const Case c = GetParam();
  Settings s;
  s.stage = c.stage;
  s.offload = c.offload;
  s.accumulation = c.accumulation;
  s.precision = Precision::bf16;
  s.steps = 2;
  auto device = cpu_device();
  auto comm = make_communicator(*device);
  const int N = comm->world_size();
  test_support::ZeroRun run = test_support::make_zero_run(std::move(device), *comm, s);
  run.trainer->step();
  comm->reset_stats();
  run.trainer->step();  // one step, measured alone

  const ZeroExactBytes x =
      exact_model_states(zero_units(test_support::test_config()), N, s.stage, s.precision, s.offload, s.accumulation);
  const CommStats& stats = comm->stats();
  const auto gradients = stats.by_category[index_of(MemoryCategory::gradients)].volume_bytes;
  const auto parameters = stats.by_category[index_of(MemoryCategory::parameters)].volume_bytes;
  EXPECT_EQ(gradients, x.volume_gradients);
  EXPECT_EQ(parameters, x.volume_parameters);
  EXPECT_EQ(stats.total.volume_bytes, gradients + parameters);  // nothing else is moved

  // Against the paper, for one micro-batch per step: 2Ψ (stage 0 exactly; 1-2 with P for Ψ) and
  // 3Ψ (stage 3: 3P less the root unit's second gather).
  const std::uint64_t e = 2, psi = run.model->num_parameters();
  std::uint64_t P = 0;
  const std::vector<UnitLayout> units = unit_layouts(test_support::test_config(), static_cast<std::size_t>(N), 1);
  for (const UnitLayout& u : units) P += u.padded_numel;
  const std::uint64_t P_root = units[0].padded_numel;
  if (s.accumulation == 1) {
    const std::uint64_t paper = s.stage == 0 ? 2 * psi * e : s.stage <= 2 ? 2 * P * e : (3 * P - P_root) * e;
    EXPECT_EQ(gradients + parameters, paper);
  }
  // sent bytes: a ring moves (N-1)/N of each volume
  EXPECT_EQ(stats.total.sent_bytes, (gradients + parameters) * static_cast<std::uint64_t>(N - 1) / static_cast<std::uint64_t>(N));
}

INSTANTIATE_TEST_SUITE_P(StagesAndOffload, ZeroOverRanks, kCases, case_name);

}  // namespace
}  // namespace trainmem::zero
