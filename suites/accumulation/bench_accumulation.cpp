// bench_accumulation: peak memory by category and time per optimizer step for (micro-batch, K)
// pairs with the same effective batch of 32 sequences: 32x1, 16x2, 8x4, 4x8, 2x16, 1x32.
//
//   build/ci/suites/accumulation/bench_accumulation [--device=auto|cpu|cuda] --benchmark_out=acc.json --benchmark_out_format=json
//
// Model: tiny (T=64) on the CPU; gpt2-124m at T=1024 on a GPU (effective batch 32 as well).
#include <benchmark/benchmark.h>

#include "common/results/benchmark_context.h"
#include "common/train/train_run.h"
#include "suites/accumulation/accumulation_technique.h"

namespace trainmem {
namespace {

void BM_Accumulate(benchmark::State& state, const std::string& device, const ModelConfig& config) {
  const auto micro = static_cast<std::size_t>(state.range(0));
  const auto K = static_cast<std::size_t>(state.range(1));
  static const Techniques accumulation{&accumulation_technique()};
  TrainRun run = make_train_run(device, baseline_setup(config, micro, K), accumulation);
  run.step();
  run.device->allocator().reset_peak_stats();
  for (auto _ : state) benchmark::DoNotOptimize(run.step().loss);
  set_memory_counters(state, run.stats());
  set_rate_counters(state, "tokens", static_cast<double>(micro * K * config.seq));
  state.SetLabel(config.name + " " + std::to_string(micro) + "x" + std::to_string(K));
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_accumulation", [](const std::string& device, bool gpu) {
    static const trainmem::ModelConfig config = trainmem::model_preset(gpu ? "gpt2-124m" : "tiny");
    auto* b = benchmark::RegisterBenchmark(("BM_Accumulate/" + config.name).c_str(), trainmem::BM_Accumulate, device, config);
    b->ArgNames({"micro", "K"})->Unit(benchmark::kMillisecond)->UseRealTime();
    for (long micro = 32; micro >= 1; micro /= 2) b->Args({micro, 32 / micro});
  });
}
