// bench_planner: how right `trainmem plan`'s step times are on this CPU, and how long a plan takes.
//
//   build/ci/suites/trainmem/planner/bench_planner --benchmark_out=planner.json --benchmark_out_format=json
//   mpirun -np 2 --oversubscribe build/ci/suites/trainmem/planner/bench_planner --benchmark_out=planner-n2.json ...
//
// 1. BM_PredictedStep/ranks:<N>/config:<flags>: one configuration of prediction_check.h, predicted
//    from its meta run with this machine's calibration (measured first, among the N ranks) and
//    timed for real on the CPU backend. The benchmark's time is the measured step (the median of
//    four after the first); counters: predicted_step_ms, measured_step_ms, error_pct (signed).
// 2. BM_PredictionAgreement/ranks:<N>: over the configurations that ran before it,
//    median_abs_error_pct and spearman (prediction_check.h), against the target (kTarget: 15%, 0.9).
// 3. BM_Plan/<question> (one process only): a whole `trainmem plan` for a GPU cluster, timed (the
//    target: llama3-70b over 64 GPUs within 10 s on 2 cores); counters: mixes, meta_runs, fitting,
//    best_predicted_step_ms.
// Every rank runs every benchmark in lockstep (one iteration each: the collectives need every
// rank); rank 0 reports. --device=auto|cpu|cuda is taken as by every benchmark and recorded: the
// steps checked here run on the CPU backend, whose calibration is what `plan --device cpu` uses.
#include <benchmark/benchmark.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/results/benchmark_context.h"
#include "common/results/ranked_benchmark_main.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/planner/calibration.h"
#include "suites/trainmem/planner/plan_search.h"
#include "suites/trainmem/planner/prediction_check.h"

namespace trainmem::planner {
namespace {

constexpr int kCheckedSteps = 5;  // as the tests: the first not timed, the median of four

Communicator* g_world = nullptr;
std::vector<CheckedStep> g_checked;  // what BM_PredictedStep measured, for BM_PredictionAgreement

// The calibration, measured once, when the first benchmark that needs it runs (every rank at once).
const DeviceModel& calibrated_cpu() {
  static const std::unique_ptr<DeviceModel> model =
      cpu_model(calibrate_this_machine(g_world->world_size() > 1 ? g_world : nullptr));
  return *model;
}

// "--model small --batch 2 --zero 1" -> "small,batch=2,zero=1": a name part without spaces.
std::string name_of(const std::string& flags) {
  std::string name = flags.rfind("--model ", 0) == 0 ? flags.substr(8) : flags;
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 3, " --") == 0) out += ',', i += 2;
    else if (name[i] == ' ') out += '=';
    else out += name[i];
  }
  return out;
}

void BM_PredictedStep(benchmark::State& state, const std::string& flags) {
  Communicator* world = g_world->world_size() > 1 ? g_world : nullptr;
  const DeviceModel& model = calibrated_cpu();
  CheckedStep c;
  for (auto _ : state) {
    c = check_step(flags, model, world, kCheckedSteps);
    state.SetIterationTime(c.measured_s);
  }
  g_checked.push_back(c);
  state.counters["predicted_step_ms"] = c.predicted_s * 1e3;
  state.counters["measured_step_ms"] = c.measured_s * 1e3;
  state.counters["error_pct"] = 100.0 * c.error();
  state.SetLabel(flags);
}

void BM_PredictionAgreement(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(g_checked.size());
  if (g_checked.size() < 3) {
    state.SkipWithError("fewer than 3 BM_PredictedStep ran before it (a filter left them out): no agreement to measure");
    return;
  }
  const Agreement a = agreement(g_checked);
  state.counters["median_abs_error_pct"] = 100.0 * a.median_abs_error;
  state.counters["spearman"] = a.spearman;
  state.counters["configurations"] = static_cast<double>(a.configurations);
  state.counters["target_median_abs_error_pct"] = 100.0 * kTarget.median_abs_error;
  state.counters["target_spearman"] = kTarget.spearman;
  state.SetLabel(calibrated_cpu().describe());
}

struct PlanCase {
  const char* name;
  std::vector<std::string> run_args;  // the model, as train's arguments
  const char* gpu;
  std::size_t world_size;
  std::size_t global_batch;
};

void BM_Plan(benchmark::State& state, PlanCase c) {
  const estimator::GpuSpec& gpu = estimator::find_gpu(c.gpu);
  const auto model = gpu_model(gpu, 8);
  PlanQuestion q;
  q.run_args = c.run_args;
  q.global_batch = c.global_batch;
  q.world_size = c.world_size;
  q.backend = DeviceKind::cuda;
  q.capacity = gpu.usable_bytes();
  Plan plan;
  for (auto _ : state) {
    plan = make_plan(q, *model);
    benchmark::DoNotOptimize(plan.fitting.size());
  }
  state.counters["mixes"] = static_cast<double>(plan.mixes);
  state.counters["meta_runs"] = static_cast<double>(plan.meta_runs);
  state.counters["fitting"] = static_cast<double>(plan.fitting.size());
  if (!plan.fitting.empty()) {
    state.counters["best_predicted_step_ms"] = plan.fitting.front().time.seconds * 1e3;
    state.SetLabel(plan.fitting.front().flags);
  }
}

void register_benchmarks(int ranks) {
  for (const std::string& flags : checked_configurations(ranks)) {
    const std::string name = "BM_PredictedStep/ranks:" + std::to_string(ranks) + "/config:" + name_of(flags);
    benchmark::RegisterBenchmark(name.c_str(), BM_PredictedStep, flags)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark(("BM_PredictionAgreement/ranks:" + std::to_string(ranks)).c_str(), BM_PredictionAgreement)
      ->Iterations(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  if (ranks > 1) return;  // a plan is a meta computation: the same on every rank
  static const PlanCase plans[] = {
      {"gpt2-1.5b/h100-80gb/N8", {"--model", "gpt2-1.5b"}, "h100-80gb", 8, 64},
      {"llama3-70b/h100-80gb/N64", {"--model", "llama3-70b", "--seq", "4096"}, "h100-80gb", 64, 64},
      // A user's own config.json (issue 44: an answer in under 10 s at 8B and at 8x7B).
      {"hf-config-llama3.1-8b/h100-80gb/N8", {"--hf-config", TRAINMEM_HF_CONFIGS_DIR "/Llama-3.1-8B", "--seq", "4096"},
       "h100-80gb", 8, 64},
      {"hf-config-mixtral-8x7b/h100-80gb/N64", {"--hf-config", TRAINMEM_HF_CONFIGS_DIR "/Mixtral-8x7B", "--seq", "4096"},
       "h100-80gb", 64, 64},
  };
  for (const PlanCase& c : plans)
    benchmark::RegisterBenchmark((std::string("BM_Plan/") + c.name).c_str(), BM_Plan, c)
        ->Iterations(1)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace trainmem::planner

int main(int argc, char** argv) {
  using namespace trainmem;
  RankedBenchmarkSettings settings;
  settings.fixed_device = "cpu";  // the checked steps run on the CPU backend, whose calibration `plan --device cpu` uses
  return ranked_benchmark_main(argc, argv, "bench_planner", settings, [](BenchmarkWorld& w) {
    planner::g_world = &w.world;
    planner::register_benchmarks(w.world.world_size());
  });
}
