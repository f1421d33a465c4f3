// Gradients on demand and the optimizer in the backward under every sharding mode (ctest runs
// this under mpirun with 2 CPU ranks; alone it is a world of one). For each plan -- ZeRO 0-3 (with
// optimizer and parameter offload) and FSDP full, grad_op and none -- each rank trains the same
// steps with persistent gradients and with the technique, and checks:
//
//   1. The same training, bit for bit: every step's loss and gradient norm, and the fp32 master
//      weights after the steps. On demand changes when a gradient's storage exists, not one
//      operation on its numbers (a fresh gradient is zeroed before the backward adds into it; a
//      shard is written whole by the reduce-scatter). fp32, bf16 and fp16 (whose first steps
//      overflow and are skipped: the gradients are freed after a skipped step too), accumulation
//      1 and 2, clipping on.
//   2. Memory, to the byte, against the sharding suites' formulas with --grads on-demand
//      (zero_memory.h, fsdp_memory.h, common/sharding/gradient_peaks.h): no gradient
//      byte held between steps, allocated bytes between steps = persistent - the persistent
//      gradients, and the peak of the gradients category.
//   3. The optimizer in the backward (each unit's shard updated right after its reduction): the
//      same losses and master weights, bit for bit, as persistent gradients without clipping
//      (fp32, bf16; the update is the same kernel on the same reduced numbers, only earlier), no
//      gradient between steps, the gradients' peak as the formulas say; ZeRO-0 refuses it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/comm/communicator.h"
#include "common/data/token_file.h"
#include "common/tests/cpu_device.h"
#include "common/train/training_run.h"
#include "suites/fsdp/fsdp_memory.h"
#include "suites/fsdp/fsdp_strategy.h"
#include "suites/fsdp/fsdp_technique.h"
#include "suites/gradient_memory/gradient_memory_technique.h"
#include "suites/mixed_precision/mixed_precision_technique.h"
#include "suites/zero/zero_memory.h"
#include "suites/zero/zero_strategy.h"
#include "suites/zero/zero_technique.h"

namespace trainmem::gradient_memory {
namespace {

const Techniques& techniques() {
  static const Techniques list{&mixed_precision_technique(), &gradient_memory_technique(), &zero::zero_technique(),
                               &fsdp::fsdp_technique()};
  return list;
}

struct Plan {
  std::string name;
  int zero_stage = -1;  // -1: FSDP
  Offload offload = Offload::none;
  fsdp::ShardingMode fsdp_mode = fsdp::ShardingMode::full;
};

const std::vector<Plan>& plans() {
  static const std::vector<Plan> list{
      {"zero0", 0},
      {"zero1", 1},
      {"zero2", 2},
      {"zero3", 3},
      {"zero2_offload_optimizer", 2, Offload::optimizer},
      {"zero3_offload_params", 3, Offload::params},
      {"fsdp_full", -1, Offload::none, fsdp::ShardingMode::full},
      {"fsdp_grad_op", -1, Offload::none, fsdp::ShardingMode::grad_op},
      {"fsdp_none", -1, Offload::none, fsdp::ShardingMode::none},
  };
  return list;
}

TrainingSetup setup_of(const Plan& plan, GradientMode grads, Precision precision, std::size_t accum,
                       bool in_backward = false) {
  TrainingSetup s;
  s.model = gpt_preset("tiny");
  s.batch = 2;
  s.accum = accum;
  s.precision = precision;
  s.max_grad_norm = in_backward ? 0.0f : 1.0f;
  s.option<GradientMode>() = grads;
  s.option<OptimizerInBackwardChoice>().on = in_backward;
  // fp16: a loss scale that overflows at first, so that skipped steps are part of the run
  if (precision == Precision::fp16) s.option<LossScaling>().scaler.init_scale = 0x1p18;
  if (plan.zero_stage >= 0) {
    s.option<zero::ZeroChoice>().stage = plan.zero_stage;
    s.option<zero::ZeroChoice>().offload = plan.offload;
  } else {
    s.option<fsdp::FsdpChoice>().enabled = true;
    s.option<fsdp::FsdpChoice>().options.mode = plan.fsdp_mode;
  }
  return s;
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
  TrainingRun run(s, techniques(), *device, world.get(), HostTokens(synthetic_corpus(100000, 5)));
  device->allocator().reset_peak_stats();  // training's peaks (the model was built whole, with its gradients)
  Trained t;
  for (int i = 0; i < steps; ++i) {
    t.steps.push_back(run.step());
    const MemoryStats stats = device->allocator().stats();
    t.allocated_between_steps.push_back(t.steps.back().allocated_bytes);
    t.gradients_between_steps.push_back(stats.by_category[index_of(MemoryCategory::gradients)].current);
  }
  t.gradients_peak = device->allocator().stats().by_category[index_of(MemoryCategory::gradients)].peak;
  if (auto* zero = dynamic_cast<zero::ZeroStrategy*>(run.strategy_of(zero::zero_technique()))) {
    t.masters = zero->master_values();
  } else if (auto* fsdp = dynamic_cast<fsdp::FsdpStrategy*>(run.strategy_of(fsdp::fsdp_technique()))) {
    t.masters = fsdp->master_values();
  }
  return t;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The formulas' gradient bytes held between steps and their peak, per rank.
struct GradientFigures {
  std::int64_t between_steps = 0, peak = 0;
};
GradientFigures formula(const Plan& plan, const TrainingSetup& s, int world) {
  if (plan.zero_stage >= 0) {
    const zero::ZeroExactBytes x = zero::exact_model_states(zero::zero_units(s.model), world, plan.zero_stage, s.precision,
                                                            plan.offload, s.accum, gradient_lifetime(s));
    return {static_cast<std::int64_t>(x.gradients), static_cast<std::int64_t>(x.gradients_peak)};
  }
  const fsdp::FsdpMemory m = fsdp::fsdp_memory(s.model, static_cast<std::size_t>(world), s.option<fsdp::FsdpChoice>().options,
                                               s.precision, gradient_lifetime(s), s.accum);
  return {static_cast<std::int64_t>(m.gradients_between_steps_bytes), static_cast<std::int64_t>(m.gradients_peak_bytes)};
}

// The world this process is part of: {size, rank}.
std::pair<int, int> world_and_rank() {
  auto device = testing_support::cpu_device();
  auto comm = make_communicator(*device);
  return {comm->world_size(), comm->rank()};
}

// A run whose gradients are not kept between steps (`freed`) against persistent gradients
// (`kept`): no gradient byte between steps, allocated bytes between steps lower by exactly the
// persistent gradients, and both gradients' peaks as the formulas say.
void expect_memory_as_the_formulas(const Plan& plan, const TrainingSetup& kept_setup, const Trained& kept,
                                   const TrainingSetup& freed_setup, const Trained& freed, const std::string& label) {
  const auto [world, rank] = world_and_rank();
  const GradientFigures kept_formula = formula(plan, kept_setup, world), freed_formula = formula(plan, freed_setup, world);
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
      const TrainingSetup persistent_setup = setup_of(plan, GradientMode::persistent, precision, accum);
      const TrainingSetup on_demand_setup = setup_of(plan, GradientMode::on_demand, precision, accum);
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
  if (plan.zero_stage == 0) {
    auto device = testing_support::cpu_device();
    auto comm = make_communicator(*device);
    try {
      TrainingRun run(setup_of(plan, GradientMode::persistent, Precision::fp32, 1, true), techniques(), *device,
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
    TrainingSetup persistent_setup = setup_of(plan, GradientMode::persistent, precision, 1);
    persistent_setup.max_grad_norm = 0;
    const TrainingSetup fused_setup = setup_of(plan, GradientMode::persistent, precision, 1, true);
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
}  // namespace trainmem::gradient_memory
