// bench_zero: per-rank memory by category and step time for each ZeRO stage and offload, at the
// world size it is launched with.
//
//   build/ci/suites/zero/bench_zero --benchmark_out=zero_n1.json --benchmark_out_format=json
//   mpirun -np 2 --oversubscribe build/ci/suites/zero/bench_zero --benchmark_out=zero_n2.json --benchmark_out_format=json
//   mpirun -np 4 --oversubscribe build/ci/suites/zero/bench_zero --benchmark_out=zero_n4.json --benchmark_out_format=json
//   (as root, OpenMPI also wants --allow-run-as-root)
//
// Every rank runs every benchmark in lockstep (a fixed number of iterations: the collectives need
// every rank); only rank 0 prints and writes the JSON (its figures: every rank holds the same
// bytes). Models: `small` in bf16 at B = 4 per rank on the CPU (gpt2-124m at B = 4, T = 1024 on
// a GPU), and llama-small (the Llama family) beside it. Counters:
//   <category>_bytes            measured, allocator, after the timed steps (at rest, between steps)
//   <category>_peak_bytes       every category's peak in the timed steps (set_memory_counters):
//                               parameters and gradients include the units gathered and the
//                               gradient buckets open (common/sharding/sharding_engine.h)
//   predicted_<...>_bytes       zero_memory.h's exact formula (equal, or the tests would fail)
//   paper_<category>_bytes      the paper's formula: 2Ψ/2Ψ/12Ψ divided as the stage says
//   communication_peak_bytes    buffers that only move bytes: none (predicted_ alongside)
//   host_bytes                  offloaded state in host memory
//   comm_volume_bytes_per_step  the communicator's volume (2Ψ·e / 3Ψ·e, exact formula alongside)
//   comm_s_per_step             wall time inside collectives
//   tokens_per_s                global tokens (N ranks * B * T) per second
#include <benchmark/benchmark.h>

#include <iostream>
#include <vector>

#include "common/comm/communicator.h"
#include "common/data/token_file.h"
#include "common/results/benchmark_context.h"
#include "common/results/ranked_benchmark_main.h"
#include "common/train/training_run.h"
#include "suites/zero/zero_memory.h"
#include "suites/zero/zero_strategy.h"
#include "suites/zero/zero_technique.h"

namespace trainmem::zero {
namespace {

constexpr int kIterations = 5;

struct BenchCase {
  int stage;
  Offload offload;
};

void BM_Zero(benchmark::State& state, const std::string& device_choice, const ModelConfig& config, std::size_t batch,
             BenchCase c) {
  DeviceOptions options;
  options.choice = device_choice;
  auto device = Device::open(options);
  auto comm = make_communicator(*device);
  const int N = comm->world_size();
  // The run as `mpirun -np N trainmem train --precision bf16 --zero S --offload O` builds it.
  static const Techniques zero_alone{&zero_technique()};
  TrainingSetup setup;
  setup.model = config;
  setup.batch = batch;
  setup.precision = Precision::bf16;
  setup.option<ZeroOptions>() = {c.stage, c.offload};
  const std::size_t steps = kIterations + 1;
  TrainingRun run(setup, zero_alone, *device, comm.get(),
                  HostTokens(synthetic_corpus(static_cast<std::size_t>(N) * batch * config.seq * steps + 1, 1)));
  const auto& zero = dynamic_cast<const ZeroStrategy&>(*run.strategy_of(zero_technique()));
  run.step();  // warm-up: stage 0's Adam moments are allocated at the first step
  device->allocator().reset_peak_stats();
  comm->reset_stats();
  for (auto _ : state) benchmark::DoNotOptimize(run.step().loss);

  const MemoryStats stats = device->allocator().stats();
  set_memory_counters(state, stats);
  const ZeroExactBytes x = exact_model_states(zero_units(config), N, c.stage, Precision::bf16, c.offload);
  const ModelStateBytes paper =
      paper_model_states(static_cast<double>(config.num_parameters()), N, c.stage, Precision::bf16, c.offload);
  auto current = [&](MemoryCategory m) { return static_cast<double>(stats.by_category[index_of(m)].current); };
  state.counters["stage"] = c.stage;
  state.counters["parameters_bytes"] = bytes_counter(current(MemoryCategory::parameters));
  state.counters["gradients_bytes"] = bytes_counter(current(MemoryCategory::gradients));
  state.counters["optimizer_state_bytes"] = bytes_counter(current(MemoryCategory::optimizer_state));
  state.counters["communication_peak_bytes"] =
      bytes_counter(static_cast<double>(stats.by_category[index_of(MemoryCategory::communication)].peak));
  state.counters["host_bytes"] = bytes_counter(static_cast<double>(zero.host_bytes()));
  state.counters["predicted_parameters_bytes"] = bytes_counter(static_cast<double>(x.parameters));
  state.counters["predicted_gradients_bytes"] = bytes_counter(static_cast<double>(x.gradients));
  state.counters["predicted_optimizer_state_bytes"] = bytes_counter(static_cast<double>(x.optimizer_state));
  state.counters["predicted_parameters_peak_bytes"] = bytes_counter(static_cast<double>(x.parameters_peak));
  state.counters["predicted_gradients_peak_bytes"] = bytes_counter(static_cast<double>(x.gradients_peak));
  state.counters["predicted_communication_peak_bytes"] = bytes_counter(static_cast<double>(x.communication_peak));
  state.counters["predicted_host_bytes"] = bytes_counter(static_cast<double>(x.host));
  state.counters["paper_parameters_bytes"] = bytes_counter(paper.parameters);
  state.counters["paper_gradients_bytes"] = bytes_counter(paper.gradients);
  state.counters["paper_optimizer_state_bytes"] = bytes_counter(paper.optimizer_state);
  const double iterations = static_cast<double>(state.iterations());
  state.counters["comm_volume_bytes_per_step"] = bytes_counter(static_cast<double>(comm->stats().total.volume_bytes) / iterations);
  state.counters["predicted_comm_volume_bytes_per_step"] =
      bytes_counter(static_cast<double>(x.volume_gradients + x.volume_parameters));
  state.counters["comm_s_per_step"] = comm->stats().total.seconds / iterations;
  set_rate_counters(state, "tokens", static_cast<double>(static_cast<std::size_t>(N) * batch * config.seq));
  std::string label = config.name;
  label += " bf16 B=";
  label += std::to_string(batch);
  label += " N=";
  label += std::to_string(N);
  label += " ";
  label += comm->backend();
  state.SetLabel(label);
}


}  // namespace
}  // namespace trainmem::zero

int main(int argc, char** argv) {
  using namespace trainmem;
  return ranked_benchmark_main(argc, argv, "bench_zero", {}, [](BenchmarkWorld& w) {
    const bool gpu = w.device.kind() == DeviceKind::cuda;
    // Each family: GPT-2's and the Llama family's (SwiGLU, grouped-query attention, untied head).
    static const std::vector<ModelConfig> configs = {model_preset(gpu ? "gpt2-124m" : "small"), model_preset("llama-small")};
    const std::size_t batch = 4;
    const std::vector<zero::BenchCase> cases = {{0, Offload::none},      {1, Offload::none},      {2, Offload::none},
                                                {3, Offload::none},      {1, Offload::optimizer}, {2, Offload::optimizer},
                                                {3, Offload::optimizer}, {3, Offload::params}};
    for (const ModelConfig& config : configs) {
      for (const zero::BenchCase& c : cases) {
        std::string name = "BM_Zero/";
        name += config.name;
        name += "/N";
        name += std::to_string(w.world.world_size());
        name += "/zero";
        name += std::to_string(c.stage);
        name += "/offload_";
        name += to_string(c.offload);
        benchmark::RegisterBenchmark(name.c_str(), zero::BM_Zero, w.device_choice, config, batch, c)
            ->Iterations(zero::kIterations)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  });
}
