// Every single-process technique on the Llama family (llama-tiny: grouped-query attention with 4
// query heads on 2 K/V heads, SwiGLU, an untied head), each run as `trainmem train FLAGS`, proven
// as the GPT's suites prove it (the bounds are theirs, derived there):
//   recompute       every mode: the same gradients bit for bit as none, in fp32 and bf16, and the
//                   activation peak the checkpointing formula predicts (from the model's
//                   saved_activations.h), below none's
//   accumulation    K micro-batches of B/K equal one batch of B: the loss of every step within
//                   1e-5 (suites/accumulation/test_accumulation.cpp: a different summation order)
//   precision       bf16 and fp16 (with its loss scaler): parameters, gradients and optimizer
//                   state equal the 2 + 2 + 12 bytes a parameter formula
//   flash           flash attention (CPU) trains as naive does: the losses within 1e-4 of each
//                   other over 20 steps (suites/flash_attention/test_flash_attention.cpp), with the
//                   log-sum-exp saved instead of the probabilities: a lower activation peak
//   lazy loading    the lazy loader trains bit for bit as the eager one
//   gradients       on demand and the optimizer in the backward train bit for bit as persistent
// The sharded techniques over ranks: EstimateRanks.LlamaShardedTrainsAsOneProcessAndAsEstimated
// (test_estimate_ranks.cpp). Every technique's Llama samples are
// estimated to the byte against real runs by the driver's tests (sample_setups.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "suites/trainmem/tests/flag_runs.h"

namespace trainmem {
namespace {

using testing_support::Outcome;
using testing_support::run_steps;
using testing_support::StepsRun;
using testing_support::train_one_step;

const std::string kLlama = "--model llama-tiny ";

std::int64_t activation_peak(const StepsRun& r) {
  return r.stats.by_category[index_of(MemoryCategory::activations)].peak;
}

TEST(LlamaTechniques, EveryRecomputeModeGivesTheSameGradientsAndTheFormulasPeak) {
  for (const char* precision : {"fp32", "bf16"}) {
    const std::string base = kLlama + "--layers 4 --precision " + precision;
    const Outcome none = train_one_step(base);
    for (const char* mode : {"full", "selective", "sqrt", "every:2"}) {
      SCOPED_TRACE(std::string(precision) + " --recompute " + mode);
      const Outcome recomputed = train_one_step(base + " --recompute " + mode);
      EXPECT_TRUE(recomputed.gradients == none.gradients) << "recompute changes no bit";
      EXPECT_EQ(static_cast<std::size_t>(recomputed.activation_peak), recomputed.formulas.activations);
      EXPECT_LT(recomputed.activation_peak, none.activation_peak);
    }
  }
}

TEST(LlamaTechniques, AccumulatedMicroBatchesEqualTheWholeBatch) {
  const StepsRun whole = run_steps(kLlama + "--batch 4");
  for (const char* K : {"2", "4"}) {
    SCOPED_TRACE(std::string("--accum ") + K);
    const StepsRun accumulated = run_steps(kLlama + "--batch " + std::to_string(4 / std::stoi(K)) + " --accum " + K);
    ASSERT_EQ(accumulated.steps.size(), whole.steps.size());
    for (std::size_t i = 0; i < whole.steps.size(); ++i)
      EXPECT_NEAR(accumulated.steps[i].loss, whole.steps[i].loss, 1e-5) << "step " << i + 1;
    EXPECT_LT(activation_peak(accumulated), activation_peak(whole)) << "smaller micro-batches keep fewer activations";
  }
}

TEST(LlamaTechniques, SixteenBitModelStatesAreTheFormulas) {
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    const Outcome o = train_one_step(kLlama + "--precision " + precision);
    EXPECT_EQ(o.parameters, o.formulas.parameters);
    EXPECT_EQ(o.gradient_bytes, o.formulas.gradients);
    EXPECT_EQ(o.optimizer_state, o.formulas.optimizer_state);
  }
}

TEST(LlamaTechniques, FlashAttentionTrainsAsNaiveWithLessActivationMemory) {
  const StepsRun naive = run_steps(kLlama + "--attention naive", 20);
  const StepsRun flash = run_steps(kLlama + "--attention flash", 20);
  double worst = 0;
  for (std::size_t i = 0; i < naive.steps.size(); ++i)
    worst = std::max(worst, std::abs(flash.steps[i].loss - naive.steps[i].loss));
  EXPECT_LT(worst, 1e-4);
  EXPECT_LT(flash.steps.back().loss, flash.steps.front().loss) << "and it learns";
  EXPECT_LT(activation_peak(flash), activation_peak(naive));
}

TEST(LlamaTechniques, LazyLoadingAndGradientModesTrainBitForBit) {
  const StepsRun eager = run_steps(kLlama + "--loader eager");
  EXPECT_TRUE(run_steps(kLlama + "--loader lazy").parameters == eager.parameters) << "lazy loader";
  const StepsRun persistent = run_steps(kLlama + "--grad-clip 0 --grads persistent");
  EXPECT_TRUE(run_steps(kLlama + "--grad-clip 0 --grads on-demand").parameters == persistent.parameters)
      << "gradients on demand";
  EXPECT_TRUE(run_steps(kLlama + "--grad-clip 0 --optimizer-in-backward").parameters == persistent.parameters)
      << "the optimizer in the backward";
}

}  // namespace
}  // namespace trainmem
