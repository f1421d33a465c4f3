// FSDP under mpirun (1, 2 and 4 CPU ranks; without MPI one process is a world of one):
//   - after 3 steps every rank's fp32 master weights (an fp32 model's parameters) equal, bit for
//     bit, one process that adds what the N ranks add in the order they add it
//     (common/tests/data_parallel_reference.h, which each rank runs itself), for every mode, unit
//     size and prefetch, with gradient accumulation too, in fp32, bf16 and fp16: whatever BLAS
//     kernel runs, both sides make the same products of the same shapes;
//   - at world size 1, --fsdp full equals the plain run bit for bit;
//   - the measured peaks of the parameters, gradients and optimizer_state categories (with and
//     without gradient accumulation) equal fsdp_memory() to the byte, and the number of layer
//     units gathered at once is the one the formula assumes (1 without prefetch, 2 with, all for
//     SHARD_GRAD_OP);
//   - the bytes communicated per step equal fsdp_comm_volume_per_step().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/comm/communicator.h"
#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/tests/cpu_device.h"
#include "common/tests/data_parallel_reference.h"
#include "common/tests/enum_table_checks.h"
#include "common/train/trainer.h"
#include "suites/fsdp/fsdp_memory.h"
#include "suites/fsdp/fsdp_strategy.h"

namespace trainmem::fsdp {
namespace {

constexpr std::uint64_t kSeed = 7;

// Small and odd-sized on purpose: C = 33 makes a layer 13497 elements and the root 9570, so the
// flat vectors need padding for N = 2 and 4; 5 layers in units of 2 leave a last unit of 1.
ModelConfig test_config() {
  ModelConfig c;
  c.vocab = 256;
  c.seq = 32;
  c.layers = 5;
  c.heads = 3;
  c.dim = 33;
  return c;
}

struct RunSetup {
  ModelConfig config = test_config();
  std::size_t batch = 2;  // rows per rank
  std::size_t accum = 1;
  long steps = 3;
  Precision precision = Precision::fp32;
  double loss_scale = 1;  // static loss scaling (fp16: as GradScaler, so the gradients do not underflow)
};

// A fixed factor on the loss that the optimizer divides out again.
struct StaticLossScale : Strategy {
  double scale = 1;
  std::string name() const override { return "static_loss_scale"; }
  double loss_scale() const override { return scale; }
};

std::unique_ptr<Device> cpu_device() { return testing_support::cpu_device(std::size_t{256} << 20); }

TrainerOptions trainer_options(const RunSetup& s, std::size_t batch) {
  TrainerOptions t;
  t.batch = batch;
  t.seq = s.config.seq;
  t.accumulation_steps = s.accum;
  t.adam.lr = 1e-3f;
  t.adam.weight_decay = 0.1f;  // decay on every element, padding included (it stays zero)
  t.max_grad_norm = 1.0f;
  return t;
}

std::vector<std::uint16_t> corpus(const RunSetup& s, int world) {
  return synthetic_corpus(world * s.batch * s.accum * s.config.seq * s.steps + 1, 11);
}

// One process that adds what FSDP on `world` ranks adds, in the ranks' order: what FSDP must equal
// bit for bit (common/tests/data_parallel_reference.h). NO_SHARD keeps whole gradients between
// micro-batches, the other modes a shard of each unit. Its fp32 master weights (an fp32 model's
// parameters).
std::vector<float> reference_parameters(const RunSetup& s, int world, const FsdpOptions& options) {
  using testing_support::GradientHome;
  auto device = cpu_device();
  GPT model(*device, s.config, kSeed, ModelOptions{s.precision});
  const auto N = static_cast<std::size_t>(world);
  return testing_support::data_parallel_masters(
      model, corpus(s, world), N, options.mode == ShardingMode::none ? GradientHome::whole : GradientHome::shard,
      fsdp_units(s.config, N, options), trainer_options(s, s.batch), s.loss_scale, s.steps);
}

// The plain Trainer on one rank: what --fsdp full must equal at world size 1.
std::vector<float> plain_run_parameters(const RunSetup& s) {
  auto device = cpu_device();
  GPT model(*device, s.config, kSeed, ModelOptions{s.precision});
  SequentialBatches data(*device, corpus(s, 1), s.batch, s.config.seq);
  Trainer trainer(model, data, trainer_options(s, s.batch));
  for (long i = 0; i < s.steps; ++i) trainer.step();
  return model.parameter_values();
}

// The parameters category at every layer hook, after FSDP's (it is listed after FSDP): the largest
// value seen in forward and in backward. Gathering happens only in these hooks (and the root's in
// on_data_fetch, before them), so these are the two phases' peaks.
struct PhasePeaks : Strategy {
  std::int64_t forward = 0, backward = 0;
  std::string name() const override { return "phase_peaks"; }
  static std::int64_t parameters_now(StepContext& ctx) {
    return ctx.model.device().allocator().stats().by_category[index_of(MemoryCategory::parameters)].current;
  }
  void before_layer_forward(StepContext& ctx, std::size_t) override { forward = std::max(forward, parameters_now(ctx)); }
  void before_layer_backward(StepContext& ctx, std::size_t) override { backward = std::max(backward, parameters_now(ctx)); }
};

struct FsdpOutcome {
  std::vector<float> parameters;  // the fp32 master weights (an fp32 model's parameters)
  std::int64_t parameters_peak = 0, gradients_peak = 0, optimizer_state_peak = 0;
  std::int64_t forward_parameters_peak = 0, backward_parameters_peak = 0;
  std::size_t peak_gathered_units = 0;
  std::uint64_t volume_bytes = 0;  // communicated per rank over the whole run
};

// FSDP on this process's world ("auto": mpirun's, else one rank), or a world of one ("local").
FsdpOutcome fsdp_run(const RunSetup& s, const FsdpOptions& options, const std::string& backend = "auto") {
  auto device = cpu_device();
  auto comm = make_communicator(*device, backend);
  const int world = comm->world_size();
  GPT model(*device, s.config, kSeed, ModelOptions{s.precision});
  SequentialBatches data(*device, corpus(s, world), s.batch, s.config.seq, static_cast<std::size_t>(comm->rank()),
                         static_cast<std::size_t>(world));
  const TrainerOptions topt = trainer_options(s, s.batch);
  FsdpStrategy fsdp(model, *comm, options, topt.adam, topt.max_grad_norm);
  // The whole model existed once before it was sharded (as in PyTorch without meta-device
  // initialization): the peaks measured are those of training, from here on.
  device->allocator().reset_peak_stats();
  PhasePeaks phases;
  StaticLossScale scale;
  scale.scale = s.loss_scale;
  Trainer trainer(model, data, topt, {&fsdp, &phases, &scale}, &fsdp.optimizer());
  for (long i = 0; i < s.steps; ++i) trainer.step();

  FsdpOutcome r;
  r.forward_parameters_peak = phases.forward;
  r.backward_parameters_peak = phases.backward;
  const MemoryStats stats = device->allocator().stats();
  r.parameters_peak = stats.by_category[index_of(MemoryCategory::parameters)].peak;
  r.gradients_peak = stats.by_category[index_of(MemoryCategory::gradients)].peak;
  r.optimizer_state_peak = stats.by_category[index_of(MemoryCategory::optimizer_state)].peak;
  r.peak_gathered_units = fsdp.peak_gathered_layer_units();
  r.volume_bytes = comm->stats().total.volume_bytes;
  r.parameters = fsdp.master_values();
  return r;
}

int world_size() {
  auto device = cpu_device();
  return make_communicator(*device)->world_size();
}

// Bit for bit; else how many elements differ and by how much at most.
void expect_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t differing = 0;
  double largest = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      ++differing;
      largest = std::max(largest, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    }
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " of " << got.size() << " differ, the largest by "
                           << largest;
}

std::vector<FsdpOptions> every_configuration() {
  std::vector<FsdpOptions> all;
  for (ShardingMode mode : {ShardingMode::full, ShardingMode::grad_op, ShardingMode::none})
    for (std::size_t k : {1, 2})
      for (bool prefetch : {false, true}) all.push_back({mode, k, prefetch});
  return all;
}

std::string describe(const FsdpOptions& o) {
  std::string s = to_string(o.mode);
  s += " unit=";
  s += unit_to_string(o.layers_per_unit);
  s += o.prefetch ? " prefetch=on" : " prefetch=off";
  return s;
}

TEST(Fsdp, OptionsParseAndBadOnesSayWhatIsAccepted) {
  EXPECT_EQ(kShardingModes.parse("full"), ShardingMode::full);
  EXPECT_EQ(kShardingModes.parse("grad_op"), ShardingMode::grad_op);
  EXPECT_EQ(kShardingModes.parse("none"), ShardingMode::none);
  EXPECT_EQ(parse_layers_per_unit("layer"), 1u);
  EXPECT_EQ(parse_layers_per_unit("3-layers"), 3u);
  EXPECT_TRUE(kFsdpPrefetch.parse("on"));
  EXPECT_FALSE(kFsdpPrefetch.parse("off"));
  for (const char* bad : {"FULL", "zero3", ""}) EXPECT_THROW(kShardingModes.parse(bad), std::invalid_argument) << bad;
  for (const char* bad : {"layers", "0-layers", "-layers", "x-layers", "2-layer", "2"})
    EXPECT_THROW(parse_layers_per_unit(bad), std::invalid_argument) << bad;
  try {
    parse_layers_per_unit("two-layers");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'layer' or 'K-layers'"), std::string::npos) << e.what();
  }
  testing_support::expect_whole_table(kShardingModes);
  testing_support::expect_whole_table(kFsdpPrefetch);
}

TEST(Fsdp, UnitsCoverTheModelAndShardsArePadded) {
  const ModelConfig c = test_config();
  for (std::size_t world : {1, 2, 3, 4}) {
    const auto units = fsdp_units(c, world, {ShardingMode::full, 2, false});
    ASSERT_EQ(units.size(), 4u);  // root, layers 0-1, 2-3, 4
    std::size_t total = 0;
    for (const UnitLayout& u : units) {
      total += u.numel;
      EXPECT_EQ(u.padded_numel, world * u.shard_numel);
      EXPECT_GE(u.padded_numel, u.numel);
      EXPECT_LT(u.padded_numel - u.numel, world);  // at most N-1 padding elements
    }
    EXPECT_EQ(total, c.num_parameters());  // the model's own count (model_config.cpp)
    EXPECT_EQ(units[3].layers, 1u);
  }
  // NO_SHARD never pads.
  for (const UnitLayout& u : fsdp_units(c, 4, {ShardingMode::none, 1, false})) EXPECT_EQ(u.padded_numel, u.numel);
}

TEST(Fsdp, MastersAfterThreeStepsEqualTheRanksAdditionsMadeInOneProcess) {
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    RunSetup s;
    s.precision = precision;
    s.loss_scale = precision == Precision::fp16 ? 4096 : 1;  // as GradScaler: no fp16 gradient underflows
    for (const FsdpOptions& options : every_configuration())
      expect_equal(fsdp_run(s, options).parameters, reference_parameters(s, world_size(), options),
                   describe(options) + " " + to_string(precision));
  }
}

// With accumulation the modes differ in what they add when: NO_SHARD reduces once per step,
// FULL_SHARD and SHARD_GRAD_OP after every micro-batch into the shards.
TEST(Fsdp, GradientAccumulationEqualsTheRanksAdditionsMadeInOneProcess) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    RunSetup s;
    s.accum = 2;
    s.precision = precision;
    for (ShardingMode mode : {ShardingMode::full, ShardingMode::grad_op, ShardingMode::none}) {
      const FsdpOptions options{mode, 2, true};
      expect_equal(fsdp_run(s, options).parameters, reference_parameters(s, world_size(), options),
                   describe(options) + " accum=2 " + to_string(precision));
    }
  }
}

// World size 1: the gradients are the model's own (the reduce-scatter is a copy) and the optimizer
// is the same AdamW kernel on the same numbers, so the parameters are the same bits. (Only the
// global norm's sum of squares is grouped differently, by flat unit instead of by tensor; it is
// summed in double and rounded to one float clip factor, which came out the same.)
TEST(Fsdp, FullShardOnOneRankEqualsThePlainRun) {
  const RunSetup s;
  const std::vector<float> reference = plain_run_parameters(s);
  for (bool prefetch : {false, true}) {
    const FsdpOptions options{ShardingMode::full, 1, prefetch};
    const FsdpOutcome r = fsdp_run(s, options, "local");
    EXPECT_EQ(r.parameters, reference) << describe(options) << " world 1";
  }
}

TEST(Fsdp, MeasuredPeaksEqualTheFormula) {
  const int world = world_size();
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    RunSetup s;
    s.precision = precision;
    s.steps = 2;  // the optimizer state exists from the first step on
    for (const FsdpOptions& options : every_configuration()) {
      SCOPED_TRACE(describe(options) + " " + to_string(precision) + " N=" + std::to_string(world));
      const FsdpMemory expected = fsdp_memory(s.config, static_cast<std::size_t>(world), options, precision);
      const FsdpOutcome r = fsdp_run(s, options);
      EXPECT_EQ(r.parameters_peak, static_cast<std::int64_t>(expected.parameters_peak_bytes));
      // Forward and backward each reach it: prefetch works in both directions.
      EXPECT_EQ(r.forward_parameters_peak, r.parameters_peak);
      EXPECT_EQ(r.backward_parameters_peak, r.parameters_peak);
      EXPECT_EQ(r.gradients_peak, static_cast<std::int64_t>(expected.gradients_peak_bytes));
      EXPECT_EQ(r.optimizer_state_peak, static_cast<std::int64_t>(expected.optimizer_state_peak_bytes));
      if (options.mode != ShardingMode::none) {
        EXPECT_EQ(r.peak_gathered_units, expected.layer_units_gathered_at_peak);
      }
    }
  }
}

// Gradient accumulation needs no extra buffer (common/sharding/flat_unit.h): the same peaks as one micro-batch.
TEST(Fsdp, GradientAccumulationAddsNoMemory) {
  RunSetup s;
  s.accum = 2;
  s.steps = 2;
  for (ShardingMode mode : {ShardingMode::full, ShardingMode::grad_op, ShardingMode::none}) {
    const FsdpOptions options{mode, 2, true};
    SCOPED_TRACE(describe(options));
    const FsdpMemory expected = fsdp_memory(s.config, static_cast<std::size_t>(world_size()), options, s.precision);
    const FsdpOutcome r = fsdp_run(s, options);
    EXPECT_EQ(r.parameters_peak, static_cast<std::int64_t>(expected.parameters_peak_bytes));
    EXPECT_EQ(r.gradients_peak, static_cast<std::int64_t>(expected.gradients_peak_bytes));
    EXPECT_EQ(r.optimizer_state_peak, static_cast<std::int64_t>(expected.optimizer_state_peak_bytes));
  }
}

// The formula's cases spelled out on the test model (5 layers, units of 2: sizes 2, 2, 1 layers):
// FULL_SHARD gathers 1 unit at the peak without prefetch and 2 with, SHARD_GRAD_OP all 3, and
// prefetch costs exactly one more unit.
TEST(Fsdp, PrefetchHoldsOneMoreUnitAndShardGradOpHoldsThemAll) {
  const ModelConfig c = test_config();
  const std::size_t N = 4;
  const auto units = fsdp_units(c, N, {ShardingMode::full, 2, false});
  const std::size_t two_layers = round_size(units[1].padded_numel * 4);
  const std::size_t one_layer = round_size(units[3].padded_numel * 4);
  const FsdpMemory off = fsdp_memory(c, N, {ShardingMode::full, 2, false}, Precision::fp32);
  const FsdpMemory on = fsdp_memory(c, N, {ShardingMode::full, 2, true}, Precision::fp32);
  const FsdpMemory grad_op = fsdp_memory(c, N, {ShardingMode::grad_op, 2, false}, Precision::fp32);
  EXPECT_EQ(on.parameters_peak_bytes - off.parameters_peak_bytes, two_layers);
  EXPECT_EQ(grad_op.parameters_peak_bytes - off.parameters_peak_bytes, two_layers + one_layer);
  EXPECT_EQ(off.gradients_peak_bytes, on.gradients_peak_bytes);  // prefetch gathers parameters only
  // Sharded states are about 1/N of NO_SHARD's (plus padding and rounding).
  const FsdpMemory none = fsdp_memory(c, N, {ShardingMode::none, 2, false}, Precision::fp32);
  EXPECT_LT(off.optimizer_state_bytes * N, none.optimizer_state_bytes + 8 * 512 * N * units.size());
  EXPECT_GT(off.optimizer_state_bytes * N, none.optimizer_state_bytes);
}

// Communication per step and rank, in the ZeRO paper's volume (the buffer's bytes): FULL_SHARD
// gathers every unit twice and reduce-scatters it once (3x the padded model, ZeRO-3's 3Psi), the
// root once and once (it stays gathered); SHARD_GRAD_OP gathers once (2x); NO_SHARD all-reduces (2x).
TEST(Fsdp, BytesCommunicatedPerStepAreTheUnitsVolumes) {
  const RunSetup s;
  const int world = world_size();
  const auto volume = [&](ShardingMode mode) {
    std::uint64_t root = 0, layers = 0;
    for (const UnitLayout& u : fsdp_units(s.config, static_cast<std::size_t>(world), {mode, 1, false}))
      (u.root ? root : layers) += u.padded_numel * 4;
    return std::pair{root, layers};
  };
  const auto [root, layers] = volume(ShardingMode::full);
  const auto steps = static_cast<std::uint64_t>(s.steps);
  EXPECT_EQ(fsdp_run(s, {ShardingMode::full, 1, false}).volume_bytes, steps * (2 * root + 3 * layers));
  EXPECT_EQ(fsdp_run(s, {ShardingMode::full, 1, true}).volume_bytes, steps * (2 * root + 3 * layers));
  EXPECT_EQ(fsdp_run(s, {ShardingMode::grad_op, 1, false}).volume_bytes, steps * (2 * root + 2 * layers));
  const auto [root_none, layers_none] = volume(ShardingMode::none);
  EXPECT_EQ(fsdp_run(s, {ShardingMode::none, 1, false}).volume_bytes, steps * 2 * (root_none + layers_none));
  // The formula function the CLI and the estimator report says the same.
  const auto N = static_cast<std::size_t>(world);
  EXPECT_EQ(fsdp_comm_volume_per_step(s.config, N, {ShardingMode::full, 1, true}, Precision::fp32), 2 * root + 3 * layers);
  EXPECT_EQ(fsdp_comm_volume_per_step(s.config, N, {ShardingMode::grad_op, 1, false}, Precision::fp32, 2),
            2 * 2 * (root + layers));
  EXPECT_EQ(fsdp_comm_volume_per_step(s.config, N, {ShardingMode::none, 1, false}, Precision::fp32, 2),
            2 * (root_none + layers_none));
  // With accumulation: every micro-batch gathers and reduce-scatters; NO_SHARD all-reduces once.
  RunSetup accum = s;
  accum.accum = 2;
  for (ShardingMode mode : {ShardingMode::full, ShardingMode::none}) {
    const FsdpOptions o{mode, 2, false};
    EXPECT_EQ(fsdp_run(accum, o).volume_bytes, steps * fsdp_comm_volume_per_step(s.config, N, o, Precision::fp32, 2))
        << describe(o);
  }
}

}  // namespace
}  // namespace trainmem::fsdp
