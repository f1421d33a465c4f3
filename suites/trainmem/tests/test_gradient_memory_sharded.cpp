// Gradients on demand and the optimizer in the backward (suites/gradient_memory) under every
// sharding mode (ctest runs this under mpirun with 2 CPU ranks; alone it is a world of one). For
// each plan -- ZeRO 0-3 (with optimizer and parameter offload) and FSDP full, grad_op and none --
// each rank trains the same steps with persistent gradients and with the technique, and checks:
//
//   1. The same training, bit for bit: every step's loss and gradient norm, and the fp32 master
//      weights after the steps. On demand changes when a gradient's storage exists, not one
//      operation on its numbers (a fresh gradient is zeroed before the backward adds into it; a
//      shard is written whole by the reduce-scatter). fp32, bf16 and fp16 (whose first steps
//      overflow and are skipped: the gradients are freed after a skipped step too), accumulation
//      1 and 2, clipping on.
//   2. Memory, to the byte, against the sharding suites' formulas with --grads on-demand
//      (zero_memory.h, fsdp_memory.h, common/sharding/gradient_peaks.h, as the registrations'
//      formulas give them: ShardedFormulas' gradients_between_steps and gradients_peak): no
//      gradient byte held between steps, allocated bytes between steps = persistent - the
//      persistent gradients, and the peak of the gradients category.
//   3. The optimizer in the backward (each unit's shard updated right after its reduction): the
//      same losses and master weights, bit for bit, as persistent gradients without clipping
//      (fp32, bf16; the update is the same kernel on the same reduced numbers, only earlier), no
//      gradient between steps, the gradients' peak as the formulas say; ZeRO-0 refuses it.
//
// The techniques together, so a driver's test: each setup is `trainmem train` flags (train's
// parser, sample_setups.h), the run is TrainingRun over the registered techniques, and the master
// weights are the sharding strategy's (common/train/data_parallel_strategy.h). The gradient memory
// suite's own test (test_gradient_memory.cpp) checks the technique alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/comm/communicator.h"
#include "common/data/token_file.h"
#include "common/tests/cpu_device.h"
#include "common/tests/same_training.h"
#include "common/train/data_parallel_strategy.h"
#include "common/train/training_run.h"
#include "suites/trainmem/tests/sample_setups.h"

namespace trainmem {
namespace {

using testing_support::setup_from_flags;

struct Plan {
  std::string name;
  std::string flags;  // the sharding flags of `trainmem train`
  bool refuses_update_in_backward = false;  // ZeRO-0: the model's own gradients are all-reduced
};

const std::vector<Plan>& plans() {
  static const std::vector<Plan> list{
      {"zero0", "--zero 0", true},
      {"zero1", "--zero 1"},
      {"zero2", "--zero 2"},
      {"zero3", "--zero 3"},
      {"zero2_offload_optimizer", "--zero 2 --offload optimizer"},
      {"zero3_offload_params", "--zero 3 --offload params"},
      {"fsdp_full", "--fsdp full"},
      {"fsdp_grad_op", "--fsdp grad_op"},
      {"fsdp_none", "--fsdp none"},
  };
  return list;
}

// The world this process is part of: {size, rank}.
std::pair<int, int> world_and_rank() {
  auto device = testing_support::cpu_device();
  auto comm = make_communicator(*device);
  return {comm->world_size(), comm->rank()};
}

// The flags of one run: tiny, B = 2, TrainingSetup's learning rate (3e-4), clipping to 1 unless
// the update is in the backward (or `clip` is false); fp16 with a loss scale that overflows at
// first (2^18), so that skipped steps are part of the run.
std::string run_flags(const Plan& plan, const std::string& grads, Precision precision, std::size_t accum,
                      bool in_backward = false, bool clip = true) {
  std::string flags = "--model tiny --batch 2 --lr 0.0003 --accum " + std::to_string(accum) + " --precision " +
                      to_string(precision) + " --grads " + grads + " --grad-clip " + (clip && !in_backward ? "1" : "0");
  if (in_backward) flags += " --optimizer-in-backward";
  if (precision == Precision::fp16) flags += " --loss-scale 262144";
  return flags + " " + plan.flags;
}

// The setup `trainmem train FLAGS` runs on each rank of this world.
TrainingSetup setup_of(const std::string& flags) {
  return setup_from_flags(flags, DeviceKind::cpu, static_cast<std::size_t>(world_and_rank().first));
}

struct Trained {
  std::vector<StepResult> steps;
  std::vector<float> masters;  // the fp32 master weights, whole, after the steps
  std::vector<std::int64_t> allocated_between_steps, gradients_between_steps;
  std::int64_t gradients_peak = 0;
};

Trained train(const TrainingSetup& s, int steps = 4) {
  auto device = testing_support::cpu_device();
  auto world = make_communicator(*device);
  TrainingRun run(s, registered_techniques(), *device, world.get(), HostTokens(synthetic_corpus(100000, 5)));
  device->allocator().reset_peak_stats();  // training's peaks (the model was built whole, with its gradients)
  Trained t;
  for (int i = 0; i < steps; ++i) {
    t.steps.push_back(run.step());
    const MemoryStats stats = device->allocator().stats();
    t.allocated_between_steps.push_back(t.steps.back().allocated_bytes);
    t.gradients_between_steps.push_back(stats.by_category[index_of(MemoryCategory::gradients)].current);
  }
  t.gradients_peak = device->allocator().stats().by_category[index_of(MemoryCategory::gradients)].peak;
  // The sharding technique's strategy (ZeRO's or FSDP's): every rank gathers the whole masters.
  const Technique* sharding = registered_techniques().sharding(run.setup());
  if (auto* data_parallel = sharding ? dynamic_cast<DataParallelStrategy*>(run.strategy_of(*sharding)) : nullptr)
    t.masters = data_parallel->master_values();
  return t;
}

using testing_support::same_bits;

// The formulas' gradient bytes held between steps and their peak, per rank: the sharding
// technique's, through the registrations (Techniques::formulas, ShardedFormulas).
struct GradientFigures {
  std::int64_t between_steps = 0, peak = 0;
};
GradientFigures formula(const TrainingSetup& s) {
  const std::optional<ShardedFormulas> sharded = registered_techniques().formulas(s).sharded;
  if (!sharded) {
    ADD_FAILURE() << "no sharding technique gave formulas for " << registered_techniques().describe(s);
    return {};
  }
  return {static_cast<std::int64_t>(sharded->gradients_between_steps), static_cast<std::int64_t>(sharded->gradients_peak)};
}

// A run whose gradients are not kept between steps (`freed`) against persistent gradients
// (`kept`): no gradient byte between steps, allocated bytes between steps lower by exactly the
// persistent gradients, and both gradients' peaks as the formulas say.
void expect_memory_as_the_formulas(const Plan& plan, const TrainingSetup& kept_setup, const Trained& kept,
                                   const TrainingSetup& freed_setup, const Trained& freed, const std::string& label) {
  const auto [world, rank] = world_and_rank();
  const GradientFigures kept_formula = formula(kept_setup), freed_formula = formula(freed_setup);
  EXPECT_EQ(freed_formula.between_steps, 0);
  for (std::size_t i = 0; i < freed.steps.size(); ++i) {
    EXPECT_EQ(kept.gradients_between_steps[i], kept_formula.between_steps) << "step " << i;
    EXPECT_EQ(freed.gradients_between_steps[i], 0) << "step " << i;
    EXPECT_EQ(freed.allocated_between_steps[i], kept.allocated_between_steps[i] - kept_formula.between_steps)
        << "step " << i;
  }
  EXPECT_EQ(kept.gradients_peak, kept_formula.peak);
  EXPECT_EQ(freed.gradients_peak, freed_formula.peak);
  EXPECT_LE(freed.gradients_peak, kept.gradients_peak);
  if (rank == 0)
    std::printf("  %s %s %s N=%d: gradients between steps %lld -> 0 B, gradients peak %lld -> %lld B\n",
                plan.name.c_str(), to_string(kept_setup.precision).c_str(), label.c_str(), world,
                static_cast<long long>(kept_formula.between_steps), static_cast<long long>(kept.gradients_peak),
                static_cast<long long>(freed.gradients_peak));
}

class OnDemandUnderSharding : public ::testing::TestWithParam<Plan> {};

TEST_P(OnDemandUnderSharding, TrainsBitForBitAsPersistentWithTheFormulasMemory) {
  const Plan plan = GetParam();
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16})
    for (std::size_t accum : {1u, 2u}) {
      SCOPED_TRACE(to_string(precision) + " accum=" + std::to_string(accum));
      const TrainingSetup persistent_setup = setup_of(run_flags(plan, "persistent", precision, accum));
      const TrainingSetup on_demand_setup = setup_of(run_flags(plan, "on-demand", precision, accum));
      const Trained persistent = train(persistent_setup);
      const Trained on_demand = train(on_demand_setup);

      ASSERT_EQ(persistent.steps.size(), on_demand.steps.size());
      for (std::size_t i = 0; i < persistent.steps.size(); ++i) {
        EXPECT_TRUE(same_bits(persistent.steps[i].loss, on_demand.steps[i].loss)) << "step " << i;
        EXPECT_TRUE(same_bits(persistent.steps[i].grad_norm, on_demand.steps[i].grad_norm)) << "step " << i;
        EXPECT_EQ(persistent.steps[i].skipped, on_demand.steps[i].skipped) << "step " << i;
      }
      if (precision == Precision::fp16) {
        EXPECT_TRUE(on_demand.steps[0].skipped) << "the fp16 run should overflow at first";
      }
      ASSERT_FALSE(persistent.masters.empty());
      ASSERT_EQ(persistent.masters.size(), on_demand.masters.size());
      EXPECT_EQ(0, std::memcmp(persistent.masters.data(), on_demand.masters.data(), persistent.masters.size() * sizeof(float)));

      expect_memory_as_the_formulas(plan, persistent_setup, persistent, on_demand_setup, on_demand,
                                    "accum=" + std::to_string(accum));
    }
}

TEST_P(OnDemandUnderSharding, OptimizerInBackwardTrainsAsPersistentWithoutClipping) {
  const Plan plan = GetParam();
  if (plan.refuses_update_in_backward) {
    auto device = testing_support::cpu_device();
    auto comm = make_communicator(*device);
    try {
      TrainingRun run(setup_of(run_flags(plan, "persistent", Precision::fp32, 1, true)), registered_techniques(), *device,
                      comm.get(), HostTokens(synthetic_corpus(100000, 5)));
      FAIL() << "ZeRO-0 with the optimizer in the backward was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--optimizer-in-backward needs --zero 1, 2 or 3"), std::string::npos)
          << e.what();
    }
    return;
  }
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(to_string(precision));
    const TrainingSetup persistent_setup = setup_of(run_flags(plan, "persistent", precision, 1, false, false));
    const TrainingSetup fused_setup = setup_of(run_flags(plan, "persistent", precision, 1, true));
    const Trained persistent = train(persistent_setup);
    const Trained fused = train(fused_setup);
    ASSERT_EQ(persistent.steps.size(), fused.steps.size());
    for (std::size_t i = 0; i < persistent.steps.size(); ++i)
      EXPECT_TRUE(same_bits(persistent.steps[i].loss, fused.steps[i].loss)) << "step " << i;
    ASSERT_EQ(persistent.masters.size(), fused.masters.size());
    EXPECT_EQ(0, std::memcmp(persistent.masters.data(), fused.masters.data(), persistent.masters.size() * sizeof(float)));

    expect_memory_as_the_formulas(plan, persistent_setup, persistent, fused_setup, fused, "in backward");
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, OnDemandUnderSharding, ::testing::ValuesIn(plans()),
                         [](const ::testing::TestParamInfo<Plan>& i) { return i.param.name; });

}  // namespace
}  // namespace trainmem
