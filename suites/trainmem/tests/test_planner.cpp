// `trainmem plan` (planner/): the kernels' declared costs, the time they predict against steps
// measured on this CPU, and the plan's answer checked by running it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/tests/command_runner.h"
#include "common/tests/sanitizers.h"
#include "suites/trainmem/estimator/meta_run.h"
#include "suites/trainmem/planner/calibration.h"
#include "suites/trainmem/planner/cpu_timing.h"
#include "suites/trainmem/planner/prediction_check.h"
#include "suites/trainmem/planner/step_time.h"
#include "suites/trainmem/tests/trainmem_program.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {
namespace {

// The second step's kernels, summed by name and storage type: calls, flops, bytes.
struct KernelTotals : CostLog {
  struct Sum {
    double calls = 0, flops = 0, bytes = 0;
    bool operator==(const Sum&) const = default;
  };
  std::map<std::string, Sum> by_kernel;
  long step = 0;
  void kernel(const kernels::KernelCall& c, double) override {
    if (step != 2) return;
    Sum& s = by_kernel[std::string(c.name) + "/" + kernels::to_string(c.dtype)];
    s.calls += 1, s.flops += c.flops, s.bytes += c.bytes;
  }
  void host_work(const kernels::KernelCall& c, double s) override { kernel(c, s); }
  void copy(CopyDirection, double, double) override {}
  void collective(Collective, const CommCounts&, int, bool, std::uint64_t) override {}
  void collective_wait(std::uint64_t, double) override {}
  void begin_micro_batch(long s, std::size_t) override { step = s; }
  void begin_optimizer(long s) override { step = s; }
  void end_step(long, double) override {}
};

// The meta run declares exactly the kernels the CPU run calls: the plan times what runs.
TEST(KernelCosts, TheMetaRunDeclaresTheKernelsTheCpuRunCalls) {
  for (const char* flags : {"--model tiny --batch 4 --accum 2 --recompute selective",
                            "--model llama-tiny --batch 2 --precision bf16 --attention flash --recompute full"}) {
    SCOPED_TRACE(flags);
    const TrainingSetup setup = cli::setup_from_train_flags(flags);
    KernelTotals cpu, meta;
    run_timed_on_cpu(setup, nullptr, 2, &cpu);
    estimator::run_on_meta(setup, 0, 0, estimator::PeakMoment::skip, &meta);
    ASSERT_FALSE(cpu.by_kernel.empty());
    EXPECT_TRUE(cpu.by_kernel == meta.by_kernel);
  }
}

// The GEMMs of a GPT step do 6 flops per parameter of a linear layer per token (2 forward, 4
// backward: dinp and dweight), the head included (the embedding's backward has no dinp: the
// tokens), as llm.c's MFU counts (ANCHORS.md: 6N per token).
TEST(KernelCosts, AStepsGemmFlopsAreSixPerLinearParameterPerToken) {
  const TrainingSetup setup = cli::setup_from_train_flags("--model small --batch 3");
  KernelTotals meta;
  estimator::run_on_meta(setup, 0, 0, estimator::PeakMoment::skip, &meta);
  const double C = static_cast<double>(setup.model.dim), L = static_cast<double>(setup.model.layers),
               Vp = static_cast<double>(padded_vocab(setup.model.vocab)), tokens = 3.0 * static_cast<double>(setup.seq());
  const double linear = L * (C * 3 * C + C * C + C * 4 * C + 4 * C * C) + Vp * C;
  // The embedding gradient needs no dinp, and neither does the first layer's... every matmul_backward
  // here has a dinp (the qkv layer's input is the LayerNorm output), so 2 + 4 per weight.
  const double gemm = meta.by_kernel["matmul_forward/f32"].flops + meta.by_kernel["matmul_backward/f32"].flops;
  EXPECT_DOUBLE_EQ(gemm, 6.0 * linear * tokens);
}

// The calibration's curve (time_curve.h), on calls worked by hand.
TEST(TimeCurve, KnotsAreEachSizeClasssMediansJoinedByLines) {
  // Three calls of one size, one slowed 3x by an interruption: the knot is the median, untouched.
  // Two classes (a factor of 4 apart or more): two knots; between them the line joining them.
  const TimeCurve c = fit_curve({{"k", 1e3, 1e-5}, {"k", 1e3, 3e-5}, {"k", 1e3, 1e-5},  // class 4^4 <= u < 4^5
                                 {"k", 1e6, 2e-3}, {"k", 1e6, 2e-3}});                  // class 4^9 <= u < 4^10
  ASSERT_EQ(c.knots.size(), 2u);
  EXPECT_EQ(c.calls, 5u);
  EXPECT_DOUBLE_EQ(c.seconds(1e3), 1e-5);
  EXPECT_DOUBLE_EQ(c.seconds(1e6), 2e-3);
  EXPECT_DOUBLE_EQ(c.seconds(500500.0), 1e-5 + (2e-3 - 1e-5) * (500500.0 - 1e3) / (1e6 - 1e3));
  // Beyond the widest knot, its rate: 4e6 units take 4x its time.
  EXPECT_DOUBLE_EQ(c.seconds(4e6), 8e-3);
  // Below the narrowest, the first segment, clamped between the first knot's rate and its time:
  // here the segment at 500 units (9.004e-6 s) lies between 5e-6 and 1e-5; a steeper one, from
  // (1e3, 1e-5) to (4e3, 1e-4), would reach 500 units at -5e-6 s, so the rate holds: 5e-6.
  EXPECT_DOUBLE_EQ(c.seconds(500.0), 1e-5 + (2e-3 - 1e-5) * (500.0 - 1e3) / (1e6 - 1e3));
  EXPECT_DOUBLE_EQ(fit_curve({{"k", 1e3, 1e-5}, {"k", 4e3, 1e-4}}).seconds(500.0), 5e-6);
  // Calls whose rate changes with size (wide ones twice as fast per unit) are followed exactly,
  // however many narrow calls there are: 100 at each of two small sizes, 2 wide ones.
  std::vector<TimedCall> mixed;
  for (int i = 0; i < 100; ++i) mixed.push_back({"k", 1e3, 1.2e-5}), mixed.push_back({"k", 1e4, 3e-5});
  mixed.push_back({"k", 1e7, 1e-2});
  mixed.push_back({"k", 1e7, 1e-2});
  EXPECT_DOUBLE_EQ(fit_curve(mixed).seconds(1e7), 1e-2);
  EXPECT_DOUBLE_EQ(fit_curve(mixed).seconds(1e4), 3e-5);
  // No calls: nothing known, no time.
  EXPECT_EQ(fit_curve({}).seconds(1e6), 0.0);
}

// Predicted against measured on this machine, calibrated on other shapes (calibration.cpp's
// workloads; the configurations: prediction_check.h). The benchmark records the agreement against
// the target (kTarget: 15%, 0.9); this test, on a shared 2-core CI machine, allows for its noise:
// every step timed is the median of four, the margin is kCiMargin (25%, 0.8), and a round that
// misses is measured once more (agreement_on_this_machine). A mistake across the step fails both
// rounds (mutation-checked: the memory-bound kernels left out, 25% and 29%); a small or local one
// does not move the median (attention left out: 16.6%, passed), so the kernels' declared costs and
// accumulation's micro-batch count have exact tests (KernelCosts.*, StepTime.AMicroBatchBeyond...).
TEST(StepTime, PredictedFromTheMetaRunAgainstMeasuredOnThisCpu) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("the same test in ci/test's first ctest: it times steps, and here it would time the sanitizer");
  const Agreement a = agreement_on_this_machine(nullptr, kCiMargin);
  ASSERT_GE(a.configurations, 12u);
  EXPECT_LE(a.median_abs_error, kCiMargin.median_abs_error);
  EXPECT_GE(a.spearman, kCiMargin.spearman);
}

// A device on which every kernel, copy and collective takes 1 us: the step's time counts calls.
class CallCountingDevice : public DeviceModel {
 public:
  std::string describe() const override { return "1 us a call"; }
  double kernel_seconds(const kernels::KernelCall&) const override { return 1e-6; }
  double host_seconds(const kernels::KernelCall&) const override { return 1e-6; }
  double copy_seconds(CopyDirection, double) const override { return 1e-6; }
  double collective_seconds(Collective, const CommCounts&, int) const override { return 1e-6; }
  bool overlaps_collectives() const override { return false; }
};

// The meta run makes three micro-batches; beyond three, each more costs the middle one
// (step_time.h: t = t(first) + (K-2) t(middle) + t(last) + t(optimizer)), so the predicted step
// grows by the same amount from K = 3 on. Exact: a mistake here moves one configuration of the
// timing test above, not its median (mutation-checked: every micro-batch counted once fails here).
TEST(StepTime, AMicroBatchBeyondTheThirdCostsTheMiddleOnes) {
  CallCountingDevice device;
  auto seconds = [&](int accum) {
    return predict(cli::setup_from_train_flags("--model tiny --batch 1 --accum " + std::to_string(accum)), device, 0).time.seconds;
  };
  const double t3 = seconds(3), t4 = seconds(4), t5 = seconds(5), t8 = seconds(8);
  EXPECT_GT(t4 - t3, 0.0);
  EXPECT_NEAR(t5 - t4, t4 - t3, 1e-12);
  EXPECT_NEAR(t8 - t5, 3 * (t4 - t3), 1e-12);
}

// The agreement's arithmetic on numbers worked by hand.
TEST(StepTime, AgreementIsTheMedianErrorAndSpearmansRho) {
  // errors +12.5%, -25%, +100%: median |error| 25%; ranks predicted (0 1 2) against measured
  // (0 2 1): sum d^2 = 2, rho = 1 - 6*2 / (3*8) = 0.5. (Binary fractions: exact in doubles.)
  const std::vector<CheckedStep> steps = {{"a", 1.125, 1.0}, {"b", 1.5, 2.0}, {"c", 3.0, 1.5}};
  const Agreement a = agreement(steps);
  EXPECT_DOUBLE_EQ(a.median_abs_error, 0.25);
  EXPECT_DOUBLE_EQ(a.spearman, 0.5);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

// The plan's answer, acted on: its figures are `estimate`'s for the same command, and the best
// candidate trains on the CPU within the planned --device-memory.
TEST(Plan, TheBestCandidateTrainsWithinThePlannedMemoryAndItsFiguresAreTheEstimates) {
  const std::string cache = "TRAINMEM_CACHE_DIR=" + testing_support::scratch_path("plan_cache") + " ";
  const std::string json = testing_support::scratch_path("plan.json");
  const cli_test::CliRun r = cli_test::trainmem(
      "plan --device cpu --model small --global-batch 8 --device-memory 48MiB --json " + json, cache);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json plan = nlohmann::json::parse(testing_support::read_text_file(json));
  ASSERT_FALSE(plan["candidates"].empty());
  const nlohmann::json& best = plan["candidates"][0];
  EXPECT_TRUE(best["chosen"].get<bool>());
  for (std::size_t i = 0; i + 1 < plan["candidates"].size(); ++i)
    EXPECT_LE(plan["candidates"][i]["predicted_step_ms"].get<double>(), plan["candidates"][i + 1]["predicted_step_ms"].get<double>());
  for (std::size_t i = 0; i < plan["candidates"].size(); ++i) {  // every listed command (8 here)
    const nlohmann::json& c = plan["candidates"][i];
    const std::string flags = "--model small " + c["flags"].get<std::string>() + " --device-memory 48MiB";
    const cli_test::CliRun e = cli_test::trainmem("estimate --device cpu " + flags + " --json");
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const nlohmann::json estimate = nlohmann::json::parse(e.out);
    EXPECT_EQ(estimate["peak_reserved_bytes"], c["peak_reserved_bytes"]) << flags;
    EXPECT_EQ(estimate["peak_allocated_bytes"], c["peak_allocated_bytes"]) << flags;
  }
  const std::string command = best["command"].get<std::string>();
  ASSERT_EQ(command.rfind("trainmem train ", 0), 0u) << command;
  const cli_test::CliRun t = cli_test::trainmem("train --steps 2 " + command.substr(15));
  EXPECT_EQ(t.exit_code, 0) << command << "\n" << t.err;
}

// A question plan cannot answer gets one line that says what to change (exit 2), before any
// calibration; a question nothing answers says what would help (exit 1).
TEST(Plan, BadQuestionsGetAnErrorThatSaysWhatToChange) {
  const std::string cache = "TRAINMEM_CACHE_DIR=" + testing_support::scratch_path("plan_cache_bad") + " ";
  struct Case {
    const char* args;
    int exit_code;
    const char* says;
  };
  const Case cases[] = {
      {"--device cpu --model tiny --global-batch 8 --batch 2", 2, "--batch: plan chooses the micro-batch; give --global-batch"},
      {"--device cpu --model tiny", 2, "plan needs --global-batch N"},
      {"--gpu h100-80gb --model tiny --global-batch 9 --world-size 2", 2, "--global-batch 9 must be a multiple of --world-size 2"},
      // Checked before the calibration a world of 3 would need.
      {"--device cpu --model tiny --global-batch 8 --world-size 3", 2, "--global-batch 8 must be a multiple of --world-size 3"},
      {"--gpu h100-80gb --device cpu --model tiny --global-batch 8", 2, "--gpu names a GPU: drop --device cpu"},
      {"--model tiny --global-batch 8", 2, "plan needs the device to plan for: --gpu NAME"},
      {"--gpu h999 --model tiny --global-batch 8", 2, "--gpu: must be one of h100-80gb"},
      {"--gpu h100-80gb --model gpt2-1.5b --global-batch 8 --device-memory 1GiB", 1,
       "nothing fits: more ranks (--world-size), a smaller --global-batch or --seq, or a larger device"},
  };
  for (const Case& c : cases) {
    const cli_test::CliRun r = cli_test::trainmem(std::string("plan ") + c.args, cache);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.err;
    EXPECT_NE((r.out + r.err).find(c.says), std::string::npos) << c.args << "\n" << r.out << r.err;
  }
}

// Candidates with the same figures share one row of the table, their differences named under it.
TEST(Plan, CandidatesWithTheSameFiguresShareARow) {
  const cli_test::CliRun r = cli_test::trainmem("plan --gpu h100-80gb --model tiny --global-batch 8 --top 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // On an H100 bf16 and fp16 run at one rate and flash and cuDNN share one efficiency: the row of
  // bf16 with flash names the three others.
  EXPECT_NE(r.out.find("the same figures with: --attention cudnn; --precision fp16; --precision fp16 --attention cudnn"),
            std::string::npos)
      << r.out;
  std::size_t rows = 0;
  for (std::size_t at = r.out.find("\n   "); at != std::string::npos; at = r.out.find("\n   ", at + 1))
    if (std::isdigit(static_cast<unsigned char>(r.out[at + 4]))) ++rows;
  EXPECT_EQ(rows, 3u) << r.out;
}

}  // namespace
}  // namespace trainmem::planner
