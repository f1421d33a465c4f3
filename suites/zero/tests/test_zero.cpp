// The zero suite in one process (world size 1, LocalCommunicator): the formulas, ShardedAdamW
// against AdamWOptimizer, and every stage against the plain trainer. The multi-rank proofs are
// in test_zero_mpi.cpp.
//
// Tolerances: none. With one rank the collectives are copies, so every stage and offload must do
// the plain trainer's arithmetic operation for operation: the parameters are compared bit for bit.
// (Clipping is off where the shards are whole units: the global norm's sum of squares is then
// added up per unit instead of per tensor, which may change its last bit and so the clip factor's.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "common/comm/local_communicator.h"
#include "common/device/device_ops.h"
#include "common/model/gpt.h"
#include "suites/zero/tests/zero_test_support.h"
#include "suites/zero/zero_memory.h"

namespace trainmem::zero {
namespace {

using test_support::cpu_device;
using test_support::Settings;

// ---------------------------------------------------------------------------------------------
// the formulas
// ---------------------------------------------------------------------------------------------

TEST(ZeroFormulas, ReproduceThePapersFigure1) {
  // 7.5B parameters, 64 ranks, 16-bit with Adam: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB (decimal, 1 digit).
  const double expected[] = {120.0, 31.4, 16.6, 1.9};
  std::printf("ZeRO Figure 1 (Psi = 7.5B, N = 64, K = 12), per rank:\n");
  for (int stage = 0; stage <= 3; ++stage) {
    const double gb = figure1_gb(stage);
    std::printf("  %-20s %7.3f GB\n", stage_name(stage).c_str(), gb);
    EXPECT_NEAR(gb, expected[stage], 0.05) << stage_name(stage);
  }
  // The exact values behind the rounding: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
  EXPECT_DOUBLE_EQ(figure1_gb(1) * 1e9, 4 * 7.5e9 + 12 * 7.5e9 / 64);
  EXPECT_DOUBLE_EQ(figure1_gb(2) * 1e9, 2 * 7.5e9 + 14 * 7.5e9 / 64);
  EXPECT_DOUBLE_EQ(figure1_gb(3) * 1e9, 16 * 7.5e9 / 64);
}

TEST(ZeroFormulas, CommunicationIs2PsiOr3Psi) {
  EXPECT_EQ(paper_communication_elements(1000, 0), 2000);
  EXPECT_EQ(paper_communication_elements(1000, 2), 2000);
  EXPECT_EQ(paper_communication_elements(1000, 3), 3000);
}

TEST(ZeroFormulas, OffloadMovesStatesToTheHost) {
  const auto m = paper_model_states(1000, 4, 3, Precision::bf16, Offload::params);
  EXPECT_EQ(m.parameters, 0);
  EXPECT_EQ(m.optimizer_state, 0);
  EXPECT_EQ(m.gradients, 2 * 1000 / 4.0);
  EXPECT_EQ(m.host, 12 * 1000 / 4.0 + 2 * 1000 / 4.0);
}

TEST(ZeroFormulas, UnitsFromTheConfigAreTheModelsTensors) {
  auto device = cpu_device();
  GPT model(*device, test_support::test_config(), 1);
  const ZeroUnits units = zero_units(model.config());
  EXPECT_EQ(sum(units.root) + units.layers * sum(units.layer), model.num_parameters());
  // The sharding engine's units (one layer each) hold the same elements.
  const std::vector<UnitLayout> layout = unit_layouts(model.config(), 4, 1);
  ASSERT_EQ(layout.size(), 1 + units.layers);
  EXPECT_EQ(layout[0].numel, sum(units.root));
  EXPECT_EQ(layout[0].padded_numel, padded_numel(sum(units.root), 4));
  std::size_t padded_total = 0, shard_total = 0;
  for (std::size_t u = 0; u < layout.size(); ++u) {
    if (u > 0) {
      EXPECT_EQ(layout[u].numel, sum(units.layer));
    }
    padded_total += layout[u].padded_numel;
    shard_total += layout[u].shard_numel;
  }
  // 8190 and 11190 elements: each padded by 2 for 4 ranks.
  EXPECT_EQ(padded_total, model.num_parameters() + 2 * 3);
  EXPECT_EQ(shard_total * 4, padded_total);
}

// ---------------------------------------------------------------------------------------------
// ShardedAdamW
// ---------------------------------------------------------------------------------------------

// The plain trainer's AdamW vs ShardedAdamW with one shard per parameter tensor, world size 1.
std::vector<float> train_with(bool sharded, Precision precision, Offload offload, float max_grad_norm) {
  Settings s;
  s.precision = precision;
  s.max_grad_norm = max_grad_norm;
  auto device = cpu_device();
  LocalCommunicator comm(*device);
  ModelOptions mo;
  mo.precision = precision;
  GPT model(*device, test_support::test_config(), test_support::kModelSeed, mo);
  SequentialBatches data(*device, test_support::corpus(s, 1), s.batch, test_support::test_config().seq);
  const TrainerOptions topt = test_support::trainer_options(s, s.batch);
  ShardedAdamW adamw(*device, comm, topt.adam, topt.max_grad_norm, offload);
  if (sharded)
    for (Parameter& p : model.parameters())
      adamw.add_shard(p.value.data(), p.grad.data(), static_cast<std::size_t>(p.value.numel()), p.value.dtype(), p.name);
  Trainer trainer(model, data, topt, {}, sharded ? &adamw : nullptr);
  for (int i = 0; i < s.steps; ++i) trainer.step();
  return model.parameter_values();
}

struct AdamWCase {
  Precision precision;
  Offload offload;
};

class ShardedAdamWEqualsAdamW : public ::testing::TestWithParam<AdamWCase> {};

TEST_P(ShardedAdamWEqualsAdamW, BitForBitWithClipping) {
  const AdamWCase c = GetParam();
  const auto plain = train_with(false, c.precision, Offload::none, 1.0f);
  const auto sharded = train_with(true, c.precision, c.offload, 1.0f);
  EXPECT_TRUE(test_support::equal_bit_for_bit(sharded, plain));
}

INSTANTIATE_TEST_SUITE_P(
    PrecisionAndOffload, ShardedAdamWEqualsAdamW,
    ::testing::Values(AdamWCase{Precision::fp32, Offload::none}, AdamWCase{Precision::bf16, Offload::none},
                      AdamWCase{Precision::fp32, Offload::optimizer}, AdamWCase{Precision::bf16, Offload::optimizer}),
    [](const ::testing::TestParamInfo<AdamWCase>& i) {
      return to_string(i.param.precision) + "_offload_" + to_string(i.param.offload);
    });

TEST(ShardedAdamW, SkipsTheStepWhenAGradientIsNotFinite) {
  auto device = cpu_device();
  LocalCommunicator comm(*device);
  Tensor param(device->allocator(), {4}, DType::f32, MemoryCategory::parameters, "p");
  Tensor grad(device->allocator(), {4}, DType::f32, MemoryCategory::gradients, "g");
  const float values[4] = {1, 2, 3, 4};
  const float grads[4] = {0.1f, std::numeric_limits<float>::infinity(), 0.1f, 0.1f};
  copy_host_to_device(*device, param.data(), values, sizeof values);
  copy_host_to_device(*device, grad.data(), grads, sizeof grads);
  ShardedAdamW adamw(*device, comm, {}, 1.0f);
  adamw.add_shard(param.data(), grad.data(), 4, DType::f32, "p");
  const auto outcome = adamw.step(1.0);
  EXPECT_TRUE(outcome.skipped);
  EXPECT_EQ(adamw.steps_taken(), 0);
  float after[4];
  copy_device_to_host(*device, after, param.data(), sizeof after);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], values[i]);
}

TEST(ShardedAdamW, CountsItsStateWhereItLives) {
  auto device = cpu_device();
  LocalCommunicator comm(*device);
  Tensor param(device->allocator(), {1000}, DType::bf16, MemoryCategory::parameters, "p");
  Tensor grad(device->allocator(), {1000}, DType::bf16, MemoryCategory::gradients, "g");
  zero_device_memory(*device, param.data(), param.nbytes());
  ShardedAdamW on_device(*device, comm, {}, 1.0f);
  on_device.add_shard(param.data(), grad.data(), 1000, DType::bf16, "p");
  EXPECT_EQ(on_device.device_state_bytes(), 3 * round_size(4000));  // master, m, v
  EXPECT_EQ(on_device.host_state_bytes(), 0u);
  ShardedAdamW on_host(*device, comm, {}, 1.0f, Offload::optimizer);
  on_host.add_shard(param.data(), grad.data(), 1000, DType::bf16, "p");
  EXPECT_EQ(on_host.device_state_bytes(), 0u);
  EXPECT_EQ(on_host.host_state_bytes(), 16u * 1000);  // master, m, v, fp32 gradient
}

// ---------------------------------------------------------------------------------------------
// every stage at world size 1
// ---------------------------------------------------------------------------------------------

struct StageCase {
  int stage;
  Offload offload;
  Precision precision;
};

class ZeroAtWorldSizeOne : public ::testing::TestWithParam<StageCase> {};

TEST_P(ZeroAtWorldSizeOne, EqualsThePlainTrainerBitForBit) {
  const StageCase c = GetParam();
  Settings s;
  s.stage = c.stage;
  s.offload = c.offload;
  s.precision = c.precision;
  s.accumulation = 2;  // the stage 2/3 buckets carry the accumulated shard between micro-batches
  s.max_grad_norm = 0;
  auto device = cpu_device();
  LocalCommunicator comm(*device);
  test_support::ZeroRun run = test_support::make_zero_run(std::move(device), comm, s);
  for (int i = 0; i < s.steps; ++i) run.trainer->step();
  const auto zero = run.zero->parameter_values();
  const auto reference = test_support::plain_run_parameters(s);
  EXPECT_TRUE(test_support::equal_bit_for_bit(zero, reference));
}

INSTANTIATE_TEST_SUITE_P(
    Stages, ZeroAtWorldSizeOne,
    ::testing::Values(StageCase{0, Offload::none, Precision::fp32}, StageCase{1, Offload::none, Precision::fp32},
                      StageCase{2, Offload::none, Precision::fp32}, StageCase{3, Offload::none, Precision::fp32},
                      StageCase{1, Offload::optimizer, Precision::fp32}, StageCase{3, Offload::params, Precision::fp32},
                      StageCase{2, Offload::none, Precision::bf16}, StageCase{3, Offload::params, Precision::bf16},
                      StageCase{1, Offload::none, Precision::fp16}, StageCase{3, Offload::none, Precision::fp16}),
    [](const ::testing::TestParamInfo<StageCase>& i) {
      std::string name = "zero";
      name += std::to_string(i.param.stage);
      name += "_offload_";
      name += to_string(i.param.offload);
      name += "_";
      name += to_string(i.param.precision);
      return name;
    });

TEST(ZeroOptions, RefuseOffloadWithoutAShard) {
  ZeroOptions o;
  EXPECT_NO_THROW(validate(o));  // no ZeRO
  o.offload = Offload::optimizer;
  EXPECT_THROW(validate(o), std::invalid_argument);  // no stage given
  o.stage = 0;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.stage = 2;
  o.offload = Offload::params;
  try {
    validate(o);
    FAIL() << "--offload params with --zero 2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--zero 3"), std::string::npos) << e.what();
  }
  o.stage = 4;
  o.offload = Offload::none;
  EXPECT_THROW(validate(o), std::invalid_argument);
  EXPECT_THROW(kOffloads.parse("disk"), std::invalid_argument);
  // The update in the backward needs the engine's units (stages 1-3).
  EXPECT_THROW(validate({0, Offload::none}, {true}), std::invalid_argument);
  EXPECT_NO_THROW(validate({2, Offload::none}, {true}));
}

}  // namespace
}  // namespace trainmem::zero
