// bench_fsdp: per-rank peak memory and step time of FSDP versus unit size and prefetch, and the
// three sharding modes.
//
//   build/ci/suites/fsdp/bench_fsdp --benchmark_out=fsdp.json --benchmark_out_format=json
//       one process: a world of one (every unit is whole after its gather; the unit size still
//       sets how much is gathered at once)
//   mpirun -np 2 --oversubscribe build/ci/suites/fsdp/bench_fsdp --benchmark_out=fsdp_np2.json --benchmark_out_format=json
//       N ranks, each with B rows; only rank 0 prints and writes the JSON (its own figures: the
//       ranks are symmetric). As root, OpenMPI also needs OMPI_ALLOW_RUN_AS_ROOT=1
//       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.
//
// Every benchmark runs a fixed number of iterations (the ranks must make the same collectives),
// after one warm-up step that allocates the optimizer state.
//
// Models: the `small` preset (C=128, H=4, L=4, T=128, V=256), B = 4 rows per rank, fp32, on the
// CPU (gpt2-124m with B = 8 in bf16 on a GPU), and llama-small (the Llama family) beside it. Counters: <category>_peak_bytes (measured),
// predicted_parameters_peak_bytes / predicted_gradients_peak_bytes (fsdp_memory.h),
// gathered_units_at_peak, comm_volume_bytes_per_step, tokens_per_s (all ranks); the world size is the
// context's trainmem.world_size (common/results/ranked_benchmark_main.h).
#include <benchmark/benchmark.h>

#include <iostream>

#include "common/comm/communicator.h"
#include "common/data/token_file.h"
#include "common/results/benchmark_context.h"
#include "common/results/ranked_benchmark_main.h"
#include "common/train/training_run.h"
#include "suites/fsdp/fsdp_memory.h"
#include "suites/fsdp/fsdp_strategy.h"
#include "suites/fsdp/fsdp_technique.h"

namespace trainmem::fsdp {
namespace {

constexpr int kIterations = 5;

void BM_Fsdp(benchmark::State& state, const std::string& device_choice, ModelConfig config, std::size_t batch,
             Precision precision, FsdpOptions options) {
  DeviceOptions device_options;
  device_options.choice = device_choice;
  auto device = Device::open(device_options);
  auto comm = make_communicator(*device);
  const auto world = static_cast<std::size_t>(comm->world_size());
  // The run as `mpirun -np N trainmem train --precision P --fsdp MODE --fsdp-unit ... --fsdp-prefetch ...` builds it.
  static const Techniques fsdp_alone{&fsdp_technique()};
  TrainingSetup setup;
  setup.model = config;
  setup.batch = batch;
  setup.precision = precision;
  setup.option<FsdpChoice>() = {true, options};
  TrainingRun run(setup, fsdp_alone, *device, comm.get(),
                  HostTokens(synthetic_corpus(world * batch * config.seq * (kIterations + 2) + 1, 1)));
  const auto& fsdp = dynamic_cast<const FsdpStrategy&>(*run.strategy_of(fsdp_technique()));
  run.step();  // warm-up: the optimizer state is allocated at the first step
  device->allocator().reset_peak_stats();
  comm->reset_stats();
  for (auto _ : state) benchmark::DoNotOptimize(run.step().loss);

  set_memory_counters(state, device->allocator().stats());
  const FsdpMemory predicted = fsdp_memory(config, world, options, precision);
  state.counters["predicted_parameters_peak_bytes"] = bytes_counter(static_cast<double>(predicted.parameters_peak_bytes));
  state.counters["predicted_gradients_peak_bytes"] = bytes_counter(static_cast<double>(predicted.gradients_peak_bytes));
  state.counters["gathered_units_at_peak"] = static_cast<double>(
      options.mode == ShardingMode::none ? predicted.layer_units_gathered_at_peak : fsdp.peak_gathered_layer_units());
  state.counters["comm_volume_bytes_per_step"] =
      bytes_counter(static_cast<double>(comm->stats().total.volume_bytes) / static_cast<double>(state.iterations()));
  state.counters["comm_seconds_per_step"] = comm->stats().total.seconds / static_cast<double>(state.iterations());
  set_rate_counters(state, "tokens", static_cast<double>(world * batch * config.seq));
  state.SetLabel(config.name + " N=" + std::to_string(world) + " fsdp=" + to_string(options.mode) +
                 " unit=" + unit_to_string(options.layers_per_unit) + (options.prefetch ? " prefetch=on" : " prefetch=off"));
}


}  // namespace
}  // namespace trainmem::fsdp

int main(int argc, char** argv) {
  using namespace trainmem;
  using namespace trainmem::fsdp;
  return ranked_benchmark_main(argc, argv, "bench_fsdp", {}, [](BenchmarkWorld& w) {
    const bool gpu = w.device.kind() == DeviceKind::cuda;
    const std::size_t batch = gpu ? 8 : 4;
    const Precision precision = gpu ? Precision::bf16 : Precision::fp32;
    // Each family: GPT-2's and the Llama family's (SwiGLU, grouped-query attention, untied head).
    for (const ModelConfig& config : {model_preset(gpu ? "gpt2-124m" : "small"), model_preset("llama-small")}) {
      std::vector<FsdpOptions> cases;
      for (std::size_t k : {std::size_t{1}, std::size_t{2}, config.layers})
        for (bool prefetch : {false, true}) cases.push_back({ShardingMode::full, k, prefetch});
      cases.push_back({ShardingMode::grad_op, 1, false});
      cases.push_back({ShardingMode::none, 1, false});
      for (const FsdpOptions& o : cases) {
        std::string name = "BM_Fsdp/";
        name += config.name;
        name += "/";
        name += to_string(o.mode);
        name += "/";
        name += unit_to_string(o.layers_per_unit);
        name += o.prefetch ? "/prefetch" : "/no_prefetch";
        benchmark::RegisterBenchmark(name.c_str(), BM_Fsdp, w.device_choice, config, batch, precision, o)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->Iterations(kIterations);
      }
    }
  });
}
