// bench_gradient_memory: peak memory and step time of the three ways to hold gradients, side by
// side: persistent, on-demand (--grads) and the optimizer in the backward (--optimizer-in-backward).
//
//   build/cpu/suites/gradient_memory/bench_gradient_memory [--device=auto|cpu|cuda] --benchmark_out=grads.json --benchmark_out_format=json
//
// CPU: `small` at B=4 (the shape of ANCHORS' PyTorch comparison); GPU: gpt2-124m at B=8, T=1024.
// Every mode runs without gradient clipping (--grad-clip 0), which the fused update cannot do
// (optimizer_in_backward.h), so that the three differ only in how long a gradient lives.
// Counters: every category's peak, peak allocated/reserved (set_memory_counters) and the bytes
// held between steps (test_gradient_memory checks both against on_demand_gradients.h's formula).
#include <benchmark/benchmark.h>

#include "common/results/benchmark_context.h"
#include "common/train/train_run.h"
#include "suites/gradient_memory/gradient_memory_technique.h"

namespace trainmem::gradient_memory {
namespace {

enum class Mode { persistent, on_demand, in_backward };

std::string mode_name(Mode mode) {
  switch (mode) {
    case Mode::persistent: return "persistent";
    case Mode::on_demand: return "on-demand";
    case Mode::in_backward: return "in-backward";
  }
  return "?";
}

void BM_Grads(benchmark::State& state, const std::string& device, const ModelConfig& config, std::size_t batch, Mode mode) {
  static const Techniques gradient_memory{&gradient_memory_technique()};
  TrainingSetup setup = baseline_setup(config, batch);
  setup.max_grad_norm = 0;
  setup.option<GradientMode>() = mode == Mode::on_demand ? GradientMode::on_demand : GradientMode::persistent;
  setup.option<OptimizerInBackwardChoice>().on = mode == Mode::in_backward;
  TrainRun run = make_train_run(device, setup, gradient_memory);
  run.step();  // warm-up: the optimizer state
  run.device->allocator().reset_peak_stats();
  std::int64_t held = 0;
  for (auto _ : state) held = run.step().allocated_bytes;
  set_memory_counters(state, run.stats());
  state.counters["held_between_steps_bytes"] = bytes_counter(static_cast<double>(held));
  set_rate_counters(state, "tokens", static_cast<double>(batch * config.seq));
  state.SetLabel(config.name + " B=" + std::to_string(batch) + " grads=" + mode_name(mode));
}

}  // namespace
}  // namespace trainmem::gradient_memory

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_gradient_memory", [](const std::string& device, bool gpu) {
    using namespace trainmem::gradient_memory;
    static const trainmem::ModelConfig config = trainmem::model_preset(gpu ? "gpt2-124m" : "small");
    const std::size_t batch = gpu ? 8 : 4;
    for (Mode mode : {Mode::persistent, Mode::on_demand, Mode::in_backward})
      benchmark::RegisterBenchmark(("BM_Grads/" + config.name + "/" + mode_name(mode)).c_str(), BM_Grads, device, config,
                                   batch, mode)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  });
}
