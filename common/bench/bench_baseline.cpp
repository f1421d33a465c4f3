// bench_baseline: one full training step (forward, backward, AdamW) of the baseline — no memory
// technique — with where its memory goes.
//
//   build/ci/common/bench_baseline [--device=auto|cpu|cuda] --benchmark_out=baseline.json --benchmark_out_format=json
//
// CPU: tiny (B=4) and small (B=4); GPU: also gpt2-124m at B=8, T=1024, fp32.
// Counters: tokens_per_s; achieved TFLOP/s counting 6N + 6*L*C*T FLOPs per token (llm.c's MFU
// convention: N parameters, forward + backward); peak_allocated_bytes, peak_reserved_bytes and
// <category>_peak_bytes measured over the benchmarked steps (after a first warm-up step, which
// also allocates the optimizer state).
#include <benchmark/benchmark.h>

#include <iostream>
#include <memory>

#include "common/results/benchmark_context.h"
#include "common/train/train_run.h"

namespace trainmem {
namespace {

std::string g_device = "auto";

void BM_TrainStep(benchmark::State& state, const std::string& preset, std::size_t batch) {
  const ModelConfig config = model_preset(preset);
  static const Techniques none{};  // the baseline: no technique
  TrainRun run = make_train_run(g_device, baseline_setup(config, batch), none);
  run.step();  // warm-up: optimizer state, cuBLAS handles, the allocator's cache
  run.device->allocator().reset_peak_stats();
  for (auto _ : state) benchmark::DoNotOptimize(run.step().loss);

  const double tokens = static_cast<double>(batch * config.seq);
  const double flops_per_token = 6.0 * static_cast<double>(config.num_parameters()) +
                                 6.0 * static_cast<double>(config.layers * config.dim * config.seq);
  set_rate_counters(state, "tokens", tokens);
  set_rate_counters(state, "TFLOP", tokens * flops_per_token / 1e12);
  state.counters["parameters"] = static_cast<double>(config.num_parameters());
  set_memory_counters(state, run.stats());
  state.SetLabel(preset + " B=" + std::to_string(batch) + " T=" + std::to_string(config.seq) + " fp32 on " +
                 run.device->info().label());
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_baseline", [](const std::string& device, bool gpu) {
    trainmem::g_device = device;
    using benchmark::RegisterBenchmark;
    RegisterBenchmark("BM_TrainStep/tiny", trainmem::BM_TrainStep, "tiny", 4)->Unit(benchmark::kMillisecond)->UseRealTime();
    RegisterBenchmark("BM_TrainStep/small", trainmem::BM_TrainStep, "small", 4)->Unit(benchmark::kMillisecond)->UseRealTime();
    if (gpu)
      RegisterBenchmark("BM_TrainStep/gpt2-124m", trainmem::BM_TrainStep, "gpt2-124m", 8)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  });
}
