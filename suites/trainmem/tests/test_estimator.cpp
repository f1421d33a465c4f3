// The estimator against reality and against the suites' formulas.
//
//   Accuracy: for every sample setup (the core's and each registered technique's, sample_setups.h),
//   the estimate (the run on the meta device) equals the measured run (two real training steps on
//   the CPU device) to the byte: peak allocated, peak reserved and every category's peak. The
//   table is printed.
//   Formulas: the meta run's category peaks equal the suites' closed forms.
//   Published arithmetic: 16 bytes per parameter for mixed-precision Adam.
//   Max batch: the estimator's largest fitting micro-batch really fits, and one more really
//   does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/tests/sanitizers.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "suites/trainmem/estimator/oom_advice.h"
#include "suites/trainmem/estimator/trial_run.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/tests/sample_setups.h"

namespace trainmem::estimator {
namespace {

using testing_support::setup_from_flags;

struct Case {
  std::string label;
  TrainingSetup setup;
};

// Every sample setup (sample_setups.h: the core's and each registered technique's) as it is, and
// those that choose no batch or model also at B=20. Tiny at B=4 keeps every tensor in the small
// pool (<= 1 MiB); at B=20 the attention matrices (1.25 MiB) and MLP activations go to the large
// pool, and small at B=8 has 2 MiB tensors: both allocator pools and their segment rules are exercised.
std::vector<Case> accuracy_matrix() {
  std::vector<Case> cases;
  for (const testing_support::Sample& sample : testing_support::every_sample()) {
    cases.push_back({sample.technique + ": " + sample.flags, setup_from_flags(sample.flags)});
    const std::vector<std::string> named = testing_support::flag_names(sample.flags);
    auto names = [&](const char* flag) { return std::find(named.begin(), named.end(), flag) != named.end(); };
    if (names("--batch") || names("--model")) continue;
    const std::string large = "--batch 20 " + sample.flags;
    cases.push_back({sample.technique + ": " + large, setup_from_flags(large)});
  }
  return cases;
}

double relative_error(std::size_t predicted, std::int64_t measured) {
  return (static_cast<double>(predicted) - static_cast<double>(measured)) / static_cast<double>(measured);
}

TEST(Estimator, PredictsMeasuredPeaksOfRealTraining) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("MetaDevice's event-for-event comparison of every sample's meta and real runs");
  std::printf("%-76s %12s %12s %8s | %12s %12s %8s | %s\n", "configuration", "alloc pred", "measured", "error",
              "reserv pred", "measured", "error", "peak at");
  int exact = 0, total = 0;
  double worst_allocated = 0, worst_reserved = 0;
  for (const Case& c : accuracy_matrix()) {
    SCOPED_TRACE(c.label);
    const MemoryEstimate e = estimate_memory(c.setup);
    TrialOptions options;
    options.capacity = std::size_t{2} << 30;
    const TrialResult measured = run_trial(c.setup, options);
    ASSERT_FALSE(measured.oom.has_value());
    const std::int64_t alloc = measured.stats.allocated_bytes[0].peak, reserved = measured.stats.reserved_bytes[0].peak;
    const double ea = relative_error(e.peak_allocated(), alloc), er = relative_error(e.peak_reserved(), reserved);
    std::printf("%-76s %12zu %12lld %+7.2f%% | %12zu %12lld %+7.2f%% | %s\n", c.label.c_str(), e.peak_allocated(),
                static_cast<long long>(alloc), 100 * ea, e.peak_reserved(), static_cast<long long>(reserved), 100 * er,
                e.run.peak_phase.c_str());
    EXPECT_EQ(e.peak_allocated(), static_cast<std::size_t>(alloc));
    EXPECT_EQ(e.peak_reserved(), static_cast<std::size_t>(reserved));
    // Category by category, too (the table's other columns).
    for (MemoryCategory cat : kAllMemoryCategories)
      EXPECT_EQ(e.category_peak(cat), static_cast<std::size_t>(measured.stats.by_category[index_of(cat)].peak))
          << to_string(cat);
    exact += e.peak_allocated() == static_cast<std::size_t>(alloc);
    ++total;
    worst_allocated = std::max(worst_allocated, std::abs(ea));
    worst_reserved = std::max(worst_reserved, std::abs(er));
  }
  std::printf("peak allocated exact in %d of %d configurations; worst error allocated %.3f%%, reserved %.3f%%\n", exact,
              total, 100 * worst_allocated, 100 * worst_reserved);
}

// The meta run and the suites' closed forms agree: the model states and the data to the byte,
// and the activation peak (predicted_activation_peak, which the checkpointing suite verifies)
// where no activation block is handed out whole.
//   The model states: when a technique shards them (even over one rank), its per-rank figures
//   (formula_bytes.h ShardedFormulas: what a rank holds after a step, unless they are peaks
//   already, and each category's peak within a step); else the precision's, which are what is
//   held after a step (gradients made on demand: none) and, for what is held from step to step,
//   the peak too.
TEST(Estimator, SimulationAgreesWithTheSuitesFormulas) {
  using C = MemoryCategory;
  for (const Case& c : accuracy_matrix()) {
    SCOPED_TRACE(c.label);
    const MemoryEstimate e = estimate_memory(c.setup);
    auto held = [&](C category) { return e.run.after_steps[index_of(category)]; };
    if (const std::optional<ShardedFormulas>& f = e.formulas.sharded) {
      if (!f->peaks) {
        EXPECT_EQ(held(C::parameters), f->parameters);
        EXPECT_EQ(held(C::gradients), f->gradients);
        EXPECT_EQ(held(C::optimizer_state), f->optimizer_state);
      }
      EXPECT_EQ(e.category_peak(C::parameters), f->parameters_peak);
      EXPECT_EQ(e.category_peak(C::gradients), f->gradients_peak);
      EXPECT_EQ(e.category_peak(C::optimizer_state), f->optimizer_state_peak);
    } else {
      EXPECT_EQ(held(C::parameters), e.formulas.parameters);
      EXPECT_EQ(held(C::gradients), e.formulas.gradients);
      EXPECT_EQ(held(C::optimizer_state), e.formulas.optimizer_state);
      EXPECT_EQ(e.category_peak(C::parameters), e.formulas.parameters);
      if (e.formulas.gradients > 0) {
        EXPECT_EQ(e.category_peak(C::gradients), e.formulas.gradients);
      }
      EXPECT_EQ(e.category_peak(C::optimizer_state), e.formulas.optimizer_state);
    }
    EXPECT_EQ(e.category_peak(C::data), e.formulas.data);
    EXPECT_EQ(e.category_peak(C::activations), e.formulas.activations);
  }
}

// Mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes per parameter (the ZeRO paper's 16Ψ), fp32
// Adam 4 + 4 + 8 = 16 too: for gpt2-1.5b, far too large to train here.
TEST(Estimator, SixteenBytesPerParameterForAdam) {
  for (Precision p : {Precision::bf16, Precision::fp32}) {
    SCOPED_TRACE(to_string(p));
    // on a GPU, flash attention runs in 16 bits
    const TrainingSetup s = setup_from_flags("--model gpt2-1.5b --batch 1 --precision " + to_string(p) +
                                                 (p == Precision::fp32 ? "" : " --attention flash"),
                                             DeviceKind::cuda);
    const MemoryEstimate e = estimate_memory(s, 80 * GiB);
    const double n = static_cast<double>(e.num_parameters);
    EXPECT_EQ(e.num_parameters, 1557611200u + 47 * 1600);  // published, plus wte's padding: (50304 - 50257) C
    // The formula: 16 bytes per parameter, plus the 512-byte rounding of each of 580 tensors.
    EXPECT_GE(static_cast<double>(e.formulas.model_states()) / n, 16.0);
    EXPECT_LT(static_cast<double>(e.formulas.model_states()) / n, 16.01);
    // The allocator: blocks handed out whole (a remainder <= 1 MiB is not split) add a little.
    const std::size_t states = e.category_peak(MemoryCategory::parameters) + e.category_peak(MemoryCategory::gradients) +
                               e.category_peak(MemoryCategory::optimizer_state);
    std::printf("gpt2-1.5b %s: model states %.3f bytes/parameter (formula), %.3f (allocator); peak %s, %s\n",
                to_string(p).c_str(), static_cast<double>(e.formulas.model_states()) / n, static_cast<double>(states) / n,
                format_bytes(e.peak_allocated()).c_str(), e.fits ? "fits 80 GiB" : "does not fit 80 GiB");
    EXPECT_GE(static_cast<double>(states) / n, 16.0);
    EXPECT_LT(static_cast<double>(states) / n, 16.5);
  }
}

// The ZeRO paper's Figure 1: Ψ = 7.5B parameters, 64 GPUs, mixed-precision Adam: 120 GB per GPU
// for data parallelism, 31.4 GB with P_os (ZeRO-1), 16.6 GB with P_os+g (ZeRO-2), 1.9 GB with
// P_os+g+p (ZeRO-3). A 7.5B GPT given by flags: L=36, C=4096, T=4096, V=57019 (padded to
// Vp = 57024) has Ψ = 57024 C + T C + L (12 C^2 + 13 C) + 2 C = 7,500,029,952.
TEST(Estimator, ReproducesTheZeroPaperFigures) {
  const double paper_gb[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    const TrainingSetup s = setup_from_flags("--layers 36 --dim 4096 --heads 32 --seq 4096 --vocab 57019 --batch 1 "
                                             "--precision bf16 --attention flash --recompute full --zero " +
                                                 std::to_string(stage),
                                             DeviceKind::cuda, 64);
    EXPECT_EQ(s.model.num_parameters(), 7500029952u);
    const MemoryEstimate e = estimate_memory(s);
    ASSERT_TRUE(e.formulas.sharded.has_value());
    const double paper = e.formulas.sharded->paper.device_total() / 1e9, exact = static_cast<double>(e.formulas.sharded->model_states()) / 1e9;
    // Measured on meta: what rank 0 holds at the end of the second step, by category.
    auto held = [&](MemoryCategory c) { return static_cast<double>(e.run.after_steps[index_of(c)]); };
    const double measured =
        (held(MemoryCategory::parameters) + held(MemoryCategory::gradients) + held(MemoryCategory::optimizer_state)) / 1e9;
    std::printf("ZeRO stage %d, 7.5B, 64 ranks: paper formula %.2f GB (published %.1f), exact formula %.2f GB, "
                "measured on meta %.2f GB\n", stage, paper, paper_gb[stage], exact, measured);
    EXPECT_NEAR(paper, paper_gb[stage], 0.05);
    // This implementation's exact bytes (padding, 512-byte rounding) stay within 1% of the paper.
    // The meta run holds those bytes, plus what the allocator adds by handing out a large block
    // whole when the remainder would be 1 MiB or less (allocator_blocks.h): at most 1 MiB per
    // tensor, here under 0.01%.
    EXPECT_NEAR(exact, paper, 0.01 * paper);
    EXPECT_GE(measured, exact);
    EXPECT_NEAR(measured, exact, 1e-4 * exact);
  }
}

// The estimator's largest micro-batch really trains on a device of that size, and one more
// really runs out of memory (tiny on a 24 MiB budget, then bf16 + selective on 12 MiB).
TEST(Estimator, LargestFittingBatchIsTheRealOne) {
  struct Budget {
    TrainingSetup setup;
    std::size_t capacity;
  };
  for (const Budget& b : {Budget{setup_from_flags("--batch 1"), 24 * MiB},
                          Budget{setup_from_flags("--batch 1 --precision bf16 --recompute selective"), 12 * MiB}}) {
    SCOPED_TRACE(describe_setup(b.setup));
    const std::size_t predicted = search_batches_on_meta(b.setup, b.capacity, 256).largest;
    ASSERT_GT(predicted, 1u);
    TrialOptions options;
    options.capacity = b.capacity;
    TrainingSetup s = b.setup;
    s.batch = predicted;
    EXPECT_FALSE(run_trial(s, options).oom.has_value()) << "B=" << predicted << " should fit";
    s.batch = predicted + 1;
    EXPECT_TRUE(run_trial(s, options).oom.has_value()) << "B=" << predicted + 1 << " should not fit";
  }
}

// Out of memory, the advice names the cheapest technique that fits, with the peak before and after,
// and that configuration really trains.
TEST(Estimator, OomAdviceNamesATechniqueThatReallyFits) {
  const TrainingSetup failed = setup_from_flags("--batch 24");
  const std::size_t capacity = 24 * MiB;
  TrialOptions options;
  options.capacity = capacity;
  const TrialResult oom = run_trial(failed, options);
  ASSERT_TRUE(oom.oom.has_value());
  const std::vector<std::string> advice = estimator_oom_advice(failed, capacity, *oom.oom);
  ASSERT_FALSE(advice.empty());
  std::printf("advice: %s\n", advice.front().c_str());
  EXPECT_NE(advice.front().find("would bring the peak reserved from"), std::string::npos) << advice.front();
  const std::vector<FittingRemedy> fixes = remedies_that_fit(failed, capacity);
  ASSERT_FALSE(fixes.empty());
  EXPECT_EQ(advice.front().rfind(fixes.front().flags, 0), 0u);
  EXPECT_LT(fixes.front().peak_reserved, capacity);
  EXPECT_FALSE(run_trial(fixes.front().setup, options).oom.has_value()) << fixes.front().flags;
  // The order is the cost order: nothing cheaper than the named remedy was skipped if it fit.
  TrainingSetup flash = failed;
  flash.attention = AttentionKind::flash;
  if (fits_on(flash, capacity)) {
    EXPECT_EQ(fixes.front().flags, "--attention flash");
  }
}

}  // namespace
}  // namespace trainmem::estimator

namespace trainmem::estimator {
namespace {

// The advice leaves out what the run already does: a run with full recompute in bf16 is not told
// to recompute or to use 16 bits (the review found "--recompute full" proposed to a run using it),
// and is still told what is left (a smaller micro-batch). The same report for a run in fp32
// without recompute is told both.
TEST(Estimator, OomAdviceLeavesOutWhatTheRunAlreadyDoes) {
  const TrainingSetup failed = setup_from_flags("--batch 64 --precision bf16 --recompute full");
  const std::size_t capacity = 4 * MiB;
  TrialOptions options;
  options.capacity = capacity;
  const TrialResult oom = run_trial(failed, options);
  ASSERT_TRUE(oom.oom.has_value());
  std::string all;
  for (const std::string& line : estimator_oom_advice(failed, capacity, *oom.oom)) all += line + "\n";
  EXPECT_EQ(all.find("--recompute"), std::string::npos) << all;
  EXPECT_EQ(all.find("--precision bf16"), std::string::npos) << all;
  EXPECT_NE(all.find("--batch smaller"), std::string::npos) << all;

  std::string plain;
  for (const std::string& line : category_advice(setup_from_flags("--batch 64"), *oom.oom)) plain += line + "\n";
  EXPECT_NE(plain.find("--recompute selective|full"), std::string::npos) << plain;
  EXPECT_NE(plain.find("--precision bf16"), std::string::npos) << plain;
}

// What the run's sharding already shards is not proposed, whichever technique shards: FSDP's
// FULL_SHARD shards what ZeRO-3 does, SHARD_GRAD_OP what ZeRO-2 does. (A report whose model
// states hold a quarter of the memory each.)
TEST(Estimator, OomAdviceLeavesOutWhatTheRunShardsAlready) {
  OomReport report;
  report.category = MemoryCategory::activations;
  report.allocated_bytes = 4 * MiB;
  for (MemoryCategory c : {MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_state,
                           MemoryCategory::activations})
    report.category_bytes[index_of(c)] = MiB;
  auto advice_for = [&](const std::string& flags) {
    std::string all;
    for (const std::string& line : category_advice(setup_from_flags(flags), report)) all += line + "\n";
    return all;
  };
  const std::string plain = advice_for("--batch 4");
  EXPECT_NE(plain.find("shard it across ranks (--zero 1 or higher)"), std::string::npos) << plain;
  EXPECT_NE(plain.find("shard them (--zero 2)"), std::string::npos) << plain;
  EXPECT_NE(plain.find("shard them (--zero 3)"), std::string::npos) << plain;
  EXPECT_EQ(advice_for("--batch 4 --fsdp full").find("shard"), std::string::npos);
  const std::string grad_op = advice_for("--batch 4 --fsdp grad_op");
  EXPECT_EQ(grad_op.find("--zero 2"), std::string::npos) << grad_op;
  EXPECT_NE(grad_op.find("shard them (--zero 3)"), std::string::npos) << grad_op;
  const std::string zero2 = advice_for("--batch 4 --zero 2 --offload optimizer");
  EXPECT_EQ(zero2.find("--offload optimizer"), std::string::npos) << zero2;
  EXPECT_NE(zero2.find("shard them (--zero 3)"), std::string::npos) << zero2;
}

}  // namespace
}  // namespace trainmem::estimator
