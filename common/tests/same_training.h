// Two runs that must train to the same bits: a technique that changes only where bytes live and
// when they are freed (on-demand gradients, say) beside the run without it.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

namespace trainmem::testing_support {

// The same 8 bytes: NaN equals NaN, and +0 differs from -0.
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The same parameters and, step by step, the same loss, the same gradient norm's bits (a skipped
// step's norm is NaN or inf on both sides) and the same skips. `Run` is any record of a run with
// `parameters` (compared with ==) and `steps` (StepResult, common/train/trainer.h).
template <class Run>
void expect_same_training(const Run& a, const Run& b) {
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  EXPECT_TRUE(a.parameters == b.parameters) << "the parameters differ";
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i + 1;
    EXPECT_TRUE(same_bits(a.steps[i].grad_norm, b.steps[i].grad_norm))
        << "step " << i + 1 << ": " << a.steps[i].grad_norm << " vs " << b.steps[i].grad_norm;
    EXPECT_EQ(a.steps[i].skipped, b.steps[i].skipped) << "step " << i + 1;
  }
}

}  // namespace trainmem::testing_support
