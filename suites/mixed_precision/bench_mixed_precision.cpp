// bench_mixed_precision: memory by category and tokens/s per precision (fp32, bf16, fp16).
//
//   build/ci/suites/mixed_precision/bench_mixed_precision [--device=auto|cpu|cuda] --benchmark_out=mp.json --benchmark_out_format=json
//
// Models: `small` at B = 4 on the CPU, gpt2-124m at B = 8, T = 1024 on a GPU; and llama-small
// (the Llama family) beside it. Counters: the
// allocator's peaks per category, the weight-side formula (predicted_<category>_bytes), and
// tokens_per_s. On the CPU, 16-bit runs are slower than fp32: each op widens its 16-bit operands
// to fp32 and rounds its outputs (the workspace counter shows those copies); on a GPU the
// matmuls run on tensor cores.
#include <benchmark/benchmark.h>

#include <vector>

#include "common/results/benchmark_context.h"
#include "common/train/train_run.h"
#include "suites/mixed_precision/mixed_precision_technique.h"
#include "suites/mixed_precision/precision_memory.h"

namespace trainmem {
namespace {

void BM_Precision(benchmark::State& state, const std::string& device, const ModelConfig& config, std::size_t batch,
                  Precision precision) {
  static const Techniques mixed_precision{&mixed_precision_technique()};  // fp16: the loss scaler
  TrainingSetup setup = baseline_setup(config, batch);
  setup.precision = precision;
  TrainRun run = make_train_run(device, setup, mixed_precision);
  run.step();  // warm-up (optimizer state)
  run.device->allocator().reset_peak_stats();
  double loss_scale = 1;
  for (auto _ : state) {
    const StepResult r = run.step();
    benchmark::DoNotOptimize(r.loss);
    loss_scale = r.loss_scale;
  }
  set_memory_counters(state, run.stats());
  const WeightSideBytes w = category_bytes(run.model());
  state.counters["predicted_parameters_bytes"] = bytes_counter(static_cast<double>(w.parameters));
  state.counters["predicted_gradients_bytes"] = bytes_counter(static_cast<double>(w.gradients));
  state.counters["predicted_optimizer_state_bytes"] = bytes_counter(static_cast<double>(w.optimizer_state));
  state.counters["loss_scale"] = loss_scale;
  set_rate_counters(state, "tokens", static_cast<double>(batch * config.seq));
  state.SetLabel(config.name + " B=" + std::to_string(batch) + " " + to_string(precision));
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_mixed_precision", [](const std::string& device, bool gpu) {
    // Each family: GPT-2's and the Llama family's (SwiGLU, grouped-query attention, untied head).
    static const std::vector<trainmem::ModelConfig> configs = {trainmem::model_preset(gpu ? "gpt2-124m" : "small"),
                                                               trainmem::model_preset("llama-small")};
    const std::size_t batch = gpu ? 8 : 4;
    for (const trainmem::ModelConfig& config : configs)
      for (trainmem::Precision p : {trainmem::Precision::fp32, trainmem::Precision::bf16, trainmem::Precision::fp16})
        benchmark::RegisterBenchmark(("BM_Precision/" + config.name + "/" + trainmem::to_string(p)).c_str(),
                                     trainmem::BM_Precision, device, config, batch, p)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
  });
}
