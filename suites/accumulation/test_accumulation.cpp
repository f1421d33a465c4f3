// Gradient accumulation: K micro-batches of B, each loss scaled by 1/K and the gradients summed,
// give the gradients of one batch of K*B on the same tokens — up to fp32 summation order.
// Tolerance: max |g_accum - g_full| <= 1e-5 * max |g_full| for gradients, and parameters after
// 3 AdamW steps equal to 1e-5 absolute (weights are ~0.02-1, updates ~lr = 1e-3).
#include <gtest/gtest.h>

#include <cmath>

#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/train/trainer.h"
#include "common/tests/cpu_device.h"

namespace trainmem {
namespace {

struct Outcome {
  std::vector<float> gradients, parameters;
  std::vector<double> losses;
  std::int64_t activation_peak = 0;
};

Outcome train(std::size_t B, std::size_t K, int steps) {
  auto device = testing_support::cpu_device();
  GPT model(*device, model_preset("tiny"), 11);
  const std::size_t T = 32;
  // Same tokens either way: micro-batch k of a step takes rows k*B .. (k+1)*B-1 of the big batch.
  SequentialBatches data(*device, synthetic_corpus(200000, 2), B, T);
  TrainerOptions topt;
  topt.batch = B;
  topt.seq = T;
  topt.accumulation_steps = K;
  struct Capture : Strategy {
    Outcome* out;
    std::string name() const override { return "capture"; }
    void before_optimizer_step(StepContext& ctx) override {
      if (out->gradients.empty()) out->gradients = ctx.model.gradient_values();
    }
  };
  Outcome o;
  Capture capture;
  capture.out = &o;
  Trainer trainer(model, data, topt, {&capture});
  for (int i = 0; i < steps; ++i) o.losses.push_back(trainer.step().loss);
  o.parameters = model.parameter_values();
  o.activation_peak = device->allocator().stats().by_category[index_of(MemoryCategory::activations)].peak;
  return o;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

TEST(Accumulation, KMicroBatchesGiveTheGradientsOfOneBigBatch) {
  const Outcome full = train(8, 1, 3);
  for (std::size_t K : {2u, 4u, 8u}) {
    const Outcome acc = train(8 / K, K, 3);
    ASSERT_EQ(acc.gradients.size(), full.gradients.size());
    EXPECT_LE(max_diff(acc.gradients, full.gradients), 1e-5 * max_abs(full.gradients)) << "K = " << K;
    EXPECT_LE(max_diff(acc.parameters, full.parameters), 1e-5) << "K = " << K;
    for (std::size_t s = 0; s < full.losses.size(); ++s) EXPECT_NEAR(acc.losses[s], full.losses[s], 1e-5) << "K = " << K;
    EXPECT_LT(acc.activation_peak, full.activation_peak) << "smaller micro-batches keep fewer activations";
  }
}

}  // namespace
}  // namespace trainmem
