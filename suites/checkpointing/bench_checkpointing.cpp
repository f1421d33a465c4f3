// bench_checkpointing: activation peak and step time per recompute policy and depth — the
// memory-versus-time trade-off.
//
//   build/ci/suites/checkpointing/bench_checkpointing [--device=auto|cpu|cuda] --benchmark_out=ckpt.json --benchmark_out_format=json
//
// Model: the `small` preset's width (C=128, H=4, T=128, V=256) at L = 4 and 8 layers, and the
// Llama family's llama-small (L = 4, Hkv = 2, F = 352), B = 4 on the CPU; gpt2-124m at B = 8 on
// a GPU besides. Counters: activations_peak_bytes (measured),
// predicted_activations_peak_bytes (the suite's exact formula), peak_allocated_bytes, tokens_per_s.
#include <benchmark/benchmark.h>

#include "common/results/benchmark_context.h"
#include "common/train/train_run.h"
#include "suites/checkpointing/checkpointing_technique.h"
#include "suites/checkpointing/recompute.h"

namespace trainmem {
namespace {

void BM_Recompute(benchmark::State& state, const std::string& device, ModelConfig config, std::size_t batch,
                  const std::string& policy_text) {
  const RecomputePolicy policy = RecomputePolicy::parse(policy_text);
  static const Techniques checkpointing{&checkpointing_technique()};
  TrainingSetup setup = baseline_setup(config, batch);
  setup.option<RecomputePolicy>() = policy;
  TrainRun run = make_train_run(device, setup, checkpointing);
  run.step();  // warm-up (optimizer state)
  run.device->allocator().reset_peak_stats();
  for (auto _ : state) benchmark::DoNotOptimize(run.step().loss);
  const MemoryStats s = run.stats();
  set_memory_counters(state, s);
  state.counters["predicted_activations_peak_bytes"] =
      bytes_counter(static_cast<double>(predicted_activation_peak(config, batch, config.seq, policy)));
  set_rate_counters(state, "tokens", static_cast<double>(batch * config.seq));
  state.counters["layers"] = static_cast<double>(config.layers);
  state.SetLabel(config.name + " L=" + std::to_string(config.layers) + " recompute=" + policy.to_string());
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_checkpointing", [](const std::string& device, bool gpu) {
    std::vector<std::pair<trainmem::ModelConfig, std::size_t>> models;
    for (std::size_t layers : {4u, 8u}) {
      trainmem::ModelConfig c = trainmem::model_preset("small");
      c.layers = layers;
      models.emplace_back(c, 4);
    }
    models.emplace_back(trainmem::model_preset("llama-small"), 4);  // L = 4: SwiGLU, grouped-query attention
    if (gpu) models.emplace_back(trainmem::model_preset("gpt2-124m"), 8);
    for (const auto& [config, batch] : models)
      for (const char* policy : {"none", "selective", "every:2", "full", "sqrt"})
        benchmark::RegisterBenchmark(("BM_Recompute/" + config.name + "/L" + std::to_string(config.layers) + "/" + policy).c_str(),
                                     trainmem::BM_Recompute, device, config, batch, policy)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
  });
}
