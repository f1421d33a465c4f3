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

#include "common/data/token_file.h"
#include "common/results/benchmark_context.h"
#include "common/train/trainer.h"

namespace trainmem {
namespace {

std::string g_device = "auto";

void BM_TrainStep(benchmark::State& state, const std::string& preset, std::size_t batch) {
  DeviceOptions options;
  options.choice = g_device;
  auto device = Device::open(options);
  const GPTConfig config = gpt_preset(preset);
  GPT model(*device, config, 1);
  SequentialBatches data(*device, synthetic_corpus(batch * config.seq * 8 + 1, 1), batch, config.seq);
  TrainerOptions topt;
  topt.batch = batch;
  topt.seq = config.seq;
  Trainer trainer(model, data, topt);
  trainer.step();  // warm-up: optimizer state, cuBLAS handles, the allocator's cache
  device->allocator().reset_peak_stats();
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step().loss);

  const double tokens = static_cast<double>(batch * config.seq);
  const double flops_per_token = 6.0 * static_cast<double>(config.num_parameters()) +
                                 6.0 * static_cast<double>(config.layers * config.dim * config.seq);
  state.counters["tokens_per_s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP_per_s"] =
      benchmark::Counter(tokens * flops_per_token / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["parameters"] = static_cast<double>(config.num_parameters());
  set_memory_counters(state, device->allocator().stats());
  state.SetLabel(preset + " B=" + std::to_string(batch) + " T=" + std::to_string(config.seq) + " fp32 on " +
                 device->info().label());
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  trainmem::g_device = trainmem::take_device_flag(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  bool gpu = false;
  try {
    trainmem::DeviceOptions options;
    options.choice = trainmem::g_device;
    auto device = trainmem::Device::open(options, &std::cerr);
    gpu = device->kind() == trainmem::DeviceKind::cuda;
    trainmem::add_benchmark_context(device->info(), device->allocator().config());
  } catch (const std::exception& e) {
    std::cerr << "bench_baseline: " << e.what() << '\n';
    return 2;
  }
  using benchmark::RegisterBenchmark;
  RegisterBenchmark("BM_TrainStep/tiny", trainmem::BM_TrainStep, "tiny", 4)->Unit(benchmark::kMillisecond);
  RegisterBenchmark("BM_TrainStep/small", trainmem::BM_TrainStep, "small", 4)->Unit(benchmark::kMillisecond);
  if (gpu) RegisterBenchmark("BM_TrainStep/gpt2-124m", trainmem::BM_TrainStep, "gpt2-124m", 8)->Unit(benchmark::kMillisecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
