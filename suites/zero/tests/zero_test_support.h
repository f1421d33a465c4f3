// What the zero suite's tests share: a small model whose units do not divide evenly by 4 ranks
// (so the padding is exercised), a ZeRO run on this rank's slice of the data, and the references:
// the ranks' additions made in one process, and the plain Trainer at world size 1.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/sharding/unit_layout.h"
#include "common/tests/cpu_device.h"
#include "common/tests/data_parallel_reference.h"
#include "common/train/trainer.h"
#include "suites/zero/zero_strategy.h"

namespace trainmem::zero::test_support {

// Root unit 256*30 + 15*30 + 2*30 = 8190 elements, a layer 12*30^2 + 13*30 = 11190: both padded
// by 2 for N = 4, by 0 for N = 2.
inline ModelConfig test_config() {
  ModelConfig c;
  c.name = "zero-test";
  c.vocab = 256;
  c.seq = 15;
  c.layers = 2;
  c.heads = 2;
  c.dim = 30;
  return c;
}

constexpr std::uint64_t kModelSeed = 7;
constexpr std::uint64_t kDataSeed = 3;

using testing_support::cpu_device;

struct Settings {
  int stage = 0;
  Offload offload = Offload::none;
  Precision precision = Precision::fp32;
  double loss_scale = 1;          // a static loss scale (fp16 needs one, as with GradScaler)
  std::size_t batch = 2;          // B per rank
  std::size_t accumulation = 1;   // K
  float max_grad_norm = 1.0f;
  int steps = 3;
};

inline TrainerOptions trainer_options(const Settings& s, std::size_t batch) {
  TrainerOptions t;
  t.batch = batch;
  t.seq = test_config().seq;
  t.accumulation_steps = s.accumulation;
  t.adam.lr = 1e-3f;
  t.adam.weight_decay = 0.1f;
  t.max_grad_norm = s.max_grad_norm;
  return t;
}

// Enough tokens for every step of the global batch, without wrapping.
inline std::vector<std::uint16_t> corpus(const Settings& s, int world_size) {
  return synthetic_corpus(static_cast<std::size_t>(world_size) * s.batch * s.accumulation * test_config().seq *
                                  static_cast<std::size_t>(s.steps) + 1,
                          kDataSeed);
}

// A fixed factor on the loss that the optimizer divides out again: static loss scaling, so that
// fp16 gradients stay above the smallest normal number (6.1e-5) where the unscaled ones would not.
struct StaticLossScale : Strategy {
  double scale = 1;
  std::string name() const override { return "static_loss_scale"; }
  double loss_scale() const override { return scale; }
};

// This rank's part of a ZeRO run over `comm`'s world.
struct ZeroRun {
  StaticLossScale scale;
  std::unique_ptr<Device> device;
  std::unique_ptr<GPT> model;
  std::unique_ptr<SequentialBatches> data;
  std::unique_ptr<ZeroStrategy> zero;
  std::unique_ptr<Trainer> trainer;
};

// `device` must be the one `comm` was made for.
inline ZeroRun make_zero_run(std::unique_ptr<Device> device, Communicator& comm, const Settings& s) {
  ZeroRun r;
  r.device = std::move(device);
  ModelOptions mo;
  mo.precision = s.precision;
  r.model = std::make_unique<GPT>(*r.device, test_config(), kModelSeed, mo);
  r.data = std::make_unique<SequentialBatches>(*r.device, corpus(s, comm.world_size()), s.batch, test_config().seq,
                                               static_cast<std::size_t>(comm.rank()),
                                               static_cast<std::size_t>(comm.world_size()));
  const TrainerOptions topt = trainer_options(s, s.batch);
  r.zero = std::make_unique<ZeroStrategy>(*r.model, comm, ZeroOptions{s.stage, s.offload}, topt.adam, topt.max_grad_norm);
  r.scale.scale = s.loss_scale;
  r.trainer = std::make_unique<Trainer>(*r.model, *r.data, topt, std::vector<Strategy*>{r.zero.get(), &r.scale},
                                        &r.zero->optimizer());
  return r;
}

// One rank, the plain trainer, B rows per micro-batch: what every stage must reproduce at world
// size 1 (the parameters as stored).
inline std::vector<float> plain_run_parameters(const Settings& s) {
  auto device = cpu_device();
  ModelOptions mo;
  mo.precision = s.precision;
  GPT model(*device, test_config(), kModelSeed, mo);
  SequentialBatches data(*device, corpus(s, 1), s.batch, test_config().seq);
  StaticLossScale scale;
  scale.scale = s.loss_scale;
  Trainer trainer(model, data, trainer_options(s, s.batch), {&scale});
  for (int i = 0; i < s.steps; ++i) trainer.step();
  return model.parameter_values();
}

// What every stage on `world_size` ranks must equal bit for bit: one process that adds what the
// ranks add, in their order (common/tests/data_parallel_reference.h). Stages 0 and 1 keep whole
// gradients between micro-batches, stages 2 and 3 a shard of each layer unit. Its fp32 master
// weights (for an fp32 model, its parameters).
inline std::vector<float> data_parallel_reference(const Settings& s, int world_size) {
  using testing_support::GradientHome;
  auto device = cpu_device();
  ModelOptions mo;
  mo.precision = s.precision;
  GPT model(*device, test_config(), kModelSeed, mo);
  const auto N = static_cast<std::size_t>(world_size);
  return testing_support::data_parallel_masters(model, corpus(s, world_size), N,
                                                s.stage >= 2 ? GradientHome::shard : GradientHome::whole,
                                                unit_layouts(test_config(), N, 1), trainer_options(s, s.batch),
                                                s.loss_scale, s.steps);
}

inline double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Whether `got` equals `want` bit for bit (as floats: no value may differ at all); the failure says
// how many differ and by how much at most.
inline ::testing::AssertionResult equal_bit_for_bit(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values, not " << want.size();
  std::size_t differing = 0;
  for (std::size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i];
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differing << " of " << got.size() << " differ, the largest by "
                                       << max_abs_difference(got, want);
}

inline std::int64_t category_bytes(Device& device, MemoryCategory c) {
  return device.allocator().stats().by_category[index_of(c)].current;
}
inline std::int64_t category_peak(Device& device, MemoryCategory c) {
  return device.allocator().stats().by_category[index_of(c)].peak;
}

}  // namespace trainmem::zero::test_support
