// The single-device techniques compose: `--precision bf16 --recompute selective --accum 8` is
// checked against what each technique promises on its own, within the same combined run.
//
//   recompute:     bit-identical gradients to the same run without recompute (bf16, accum 8)
//                  and the activation peak the checkpointing formula predicts for one
//                  micro-batch in bf16
//   precision:     parameters, gradients and optimizer state equal the 2 + 2 + 12 bytes per
//                  parameter formula, tensor by tensor
//   accumulation:  gradients of 8 micro-batches of 1 equal those of one batch of 8 (same tokens)
//                  to bf16 accuracy (each micro-batch's sum is rounded to bf16: relative
//                  difference of the whole gradient vector below 1e-2; measured 3.6e-3)
#include <gtest/gtest.h>

#include <cmath>

#include "common/data/token_file.h"
#include "common/train/trainer.h"
#include "suites/checkpointing/recompute.h"
#include "suites/mixed_precision/precision_memory.h"
#include "common/tests/cpu_device.h"

namespace trainmem {
namespace {

struct Outcome {
  std::vector<float> gradients;  // of the first step, before the optimizer clears them
  std::int64_t activation_peak = 0;
  WeightSideBytes measured, predicted;
};

Outcome train_one_step(Precision precision, const std::string& recompute, std::size_t B, std::size_t accum) {
  auto device = testing_support::cpu_device();
  const GPTConfig config = gpt_preset("tiny");
  ModelOptions mo;
  mo.precision = precision;
  GPT model(*device, config, 11, mo);
  SequentialBatches data(*device, synthetic_corpus(100000, 2), B, config.seq);
  TrainerOptions topt;
  topt.batch = B;
  topt.seq = config.seq;
  topt.accumulation_steps = accum;
  RecomputeStrategy recompute_strategy(RecomputePolicy::parse(recompute));
  struct Capture : Strategy {
    Outcome* out;
    std::string name() const override { return "capture"; }
    void before_optimizer_step(StepContext& ctx) override { out->gradients = ctx.model.gradient_values(); }
  } capture;
  Outcome o;
  capture.out = &o;
  Trainer trainer(model, data, topt, {&recompute_strategy, &capture});
  trainer.step();
  const MemoryStats s = device->allocator().stats();
  o.activation_peak = s.by_category[index_of(MemoryCategory::activations)].peak;
  o.measured.parameters = static_cast<std::size_t>(s.by_category[index_of(MemoryCategory::parameters)].current);
  o.measured.gradients = static_cast<std::size_t>(s.by_category[index_of(MemoryCategory::gradients)].current);
  o.measured.optimizer_state = static_cast<std::size_t>(s.by_category[index_of(MemoryCategory::optimizer_state)].current);
  o.predicted = category_bytes(model);
  return o;
}

TEST(Composition, Bf16WithSelectiveRecomputeAndEightfoldAccumulation) {
  const GPTConfig config = gpt_preset("tiny");
  const Outcome all = train_one_step(Precision::bf16, "selective", 1, 8);

  // recompute's promise
  const Outcome no_recompute = train_one_step(Precision::bf16, "none", 1, 8);
  EXPECT_EQ(all.gradients, no_recompute.gradients) << "recompute changes no bit, in bf16 too";
  EXPECT_EQ(static_cast<std::size_t>(all.activation_peak),
            predicted_activation_peak(config, 1, config.seq, RecomputePolicy::parse("selective"), DType::bf16));
  EXPECT_LT(all.activation_peak, no_recompute.activation_peak);

  // precision's promise
  EXPECT_EQ(all.measured.parameters, all.predicted.parameters);
  EXPECT_EQ(all.measured.gradients, all.predicted.gradients);
  EXPECT_EQ(all.measured.optimizer_state, all.predicted.optimizer_state);

  // accumulation's promise
  const Outcome one_batch = train_one_step(Precision::bf16, "none", 8, 1);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < all.gradients.size(); ++i) {
    diff += std::pow(double(all.gradients[i]) - one_batch.gradients[i], 2);
    norm += std::pow(double(one_batch.gradients[i]), 2);
  }
  const double relative = std::sqrt(diff / norm);
  std::printf("8 x 1 accumulated vs one batch of 8, bf16: relative gradient difference %.2e\n", relative);
  EXPECT_LT(relative, 1e-2);
  EXPECT_GT(relative, 0.0) << "bf16 rounding per micro-batch should leave some trace";
}

}  // namespace
}  // namespace trainmem
