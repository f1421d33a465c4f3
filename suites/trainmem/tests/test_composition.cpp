// The single-device techniques compose, in both model families: `--precision bf16 --recompute
// selective --accum 8` is checked against what each technique promises on its own, within the
// same combined run (every two techniques' samples together are estimated to the byte in
// test_technique_pairs.cpp).
//
//   recompute:     bit-identical gradients to the same run without recompute (bf16, accum 8)
//                  and the activation peak the checkpointing formula predicts for one
//                  micro-batch in bf16
//   precision:     parameters, gradients and optimizer state equal the 2 + 2 + 12 bytes per
//                  parameter formula, tensor by tensor
//   accumulation:  gradients of 8 micro-batches of 1 equal those of one batch of 8 (same tokens)
//                  to bf16 accuracy (each micro-batch's sum is rounded to bf16: relative
//                  difference of the whole gradient vector below 1e-2; measured 3.6e-3)
//
// And gradients on demand (suites/gradient_memory) under fp16's dynamic loss scaling (mixed
// precision's): the same training as persistent gradients, bit for bit, through steps skipped on
// overflow (the gradient memory suite checks fp32 and bf16 alone; every sharding plan:
// test_gradient_memory_sharded.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/tests/same_training.h"
#include "suites/trainmem/tests/flag_runs.h"

namespace trainmem {
namespace {

using testing_support::Outcome;
using testing_support::run_steps;
using testing_support::StepsRun;
using testing_support::train_one_step;

// For both families: tiny (GPT-2) and llama-tiny (SwiGLU, grouped-query attention, untied head).
TEST(Composition, Bf16WithSelectiveRecomputeAndEightfoldAccumulation) {
  for (const std::string model : {"--model tiny ", "--model llama-tiny "}) {
    SCOPED_TRACE(model);
    const Outcome all = train_one_step(model + "--precision bf16 --recompute selective --batch 1 --accum 8");

    // recompute's promise
    const Outcome no_recompute = train_one_step(model + "--precision bf16 --batch 1 --accum 8");
    EXPECT_EQ(all.gradients, no_recompute.gradients) << "recompute changes no bit, in bf16 too";
    EXPECT_EQ(static_cast<std::size_t>(all.activation_peak), all.formulas.activations);
    EXPECT_LT(all.activation_peak, no_recompute.activation_peak);

    // precision's promise
    EXPECT_EQ(all.parameters, all.formulas.parameters);
    EXPECT_EQ(all.gradient_bytes, all.formulas.gradients);
    EXPECT_EQ(all.optimizer_state, all.formulas.optimizer_state);

    // accumulation's promise
    const Outcome one_batch = train_one_step(model + "--precision bf16 --batch 8");
    ASSERT_EQ(all.gradients.size(), one_batch.gradients.size());
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < all.gradients.size(); ++i) {
      diff += std::pow(double(all.gradients[i]) - one_batch.gradients[i], 2);
      norm += std::pow(double(one_batch.gradients[i]), 2);
    }
    const double relative = std::sqrt(diff / norm);
    std::printf("%s8 x 1 accumulated vs one batch of 8, bf16: relative gradient difference %.2e\n", model.c_str(),
                relative);
    EXPECT_LT(relative, 1e-2);
    EXPECT_GT(relative, 0.0) << "bf16 rounding per micro-batch should leave some trace";
  }
}

// Gradients on demand change when a gradient's storage exists, not one operation on its numbers:
// under fp16's loss scaler, with accumulation and clipping, the same steps bit for bit (a skipped
// step's gradients are freed too). The initial scale, 2^18, overflows for the first two steps
// (tiny: 2^18, 2^17 overflow; 2^16 does not), so the skip-and-back-off path runs, and then updates.
TEST(Composition, GradientsOnDemandUnderFp16LossScaling) {
  for (const char* accum : {"1", "3"})
    for (const char* clip : {"1", "0"}) {
      // the gradient memory suite's setup: tiny, B = 4, TrainingSetup's learning rate (3e-4)
      const std::string flags = std::string("--model tiny --batch 4 --lr 0.0003 --precision fp16 --loss-scale 262144") +
                                " --accum " + accum + " --grad-clip " + clip;
      SCOPED_TRACE(flags);
      const StepsRun persistent = run_steps(flags + " --grads persistent");
      const StepsRun on_demand = run_steps(flags + " --grads on-demand");
      testing_support::expect_same_training(persistent, on_demand);
      EXPECT_TRUE(on_demand.steps.front().skipped) << "the overflow path ran";
      EXPECT_FALSE(on_demand.steps.back().skipped) << "and updates followed";
    }
}

}  // namespace
}  // namespace trainmem
