// bench_estimator: how long an estimate takes, against model size (tiny to 70B) and world size.
//
//   build/cpu/suites/trainmem/estimator/bench_estimator --benchmark_out=estimator.json --benchmark_out_format=json
//
// 1. BM_MetaRun/<model>: the run on the meta device (meta_run.h): the model built, two optimizer
//    steps, bf16, flash attention, B=1 -- what every estimate does once per configuration.
// 2. BM_Estimate/<model>: `trainmem estimate --gpu h100-80gb`: the meta run, whether it fits and
//    the largest micro-batch that does (batch_search.h: a meta run per batch up to it, within a bound).
// 3. BM_MetaRunSharded/<technique>/<ranks>: the 7.5B model of the ZeRO paper's Figure 1, rank 0's
//    strategy over a meta communicator of N ranks for each sharding technique's first plan setting
//    that shards every model state (ZeRO-3, FSDP's FULL_SHARD; its flags in the label) (the setup as `trainmem
//    train` flags, read by train's parser through the registrations: tests/sample_setups.h);
//    BM_MetaRunSharded/llama3-70b_128k/<scheme>/<ranks>: Llama-3 70B at a 128k context the same way.
// Counters: the model's parameters, the run's peak allocated and reserved (bytes), and the
// allocations the run made (its work: nothing else runs on meta).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/results/benchmark_context.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "common/train/technique.h"
#include "suites/trainmem/planner/technique_settings.h"
#include "suites/trainmem/tests/sample_setups.h"

namespace trainmem::estimator {
namespace {

struct ModelCase {
  const char* name;
  ModelConfig config;
};

// A 7B GPT given by flags: L=32, C=4096, H=32, T=2048, V=50257 (6.9B parameters).
ModelConfig gpt_7b() {
  ModelConfig c = model_preset("gpt2-1.5b");
  c.name = "7b";
  c.layers = 32;
  c.dim = 4096;
  c.heads = 32;
  c.seq = 2048;
  return c;
}

const std::vector<ModelCase>& models() {
  static const std::vector<ModelCase> list = {{"tiny", model_preset("tiny")},           {"small", model_preset("small")},
                                              {"gpt2-124m", model_preset("gpt2-124m")}, {"gpt2-350m", model_preset("gpt2-350m")},
                                              {"gpt2-1.5b", model_preset("gpt2-1.5b")}, {"7b", gpt_7b()},
                                              {"llama3-8b", model_preset("llama3-8b")}, {"llama3-70b", model_preset("llama3-70b")}};
  return list;
}

TrainingSetup bf16_flash(const ModelConfig& config) {
  TrainingSetup s;
  s.model = config;
  s.batch = 1;
  s.precision = Precision::bf16;
  s.attention = AttentionKind::flash;
  return s;
}

void set_counters(benchmark::State& state, const TrainingSetup& s, const MetaRun& r) {
  state.counters["parameters"] = static_cast<double>(s.model.num_parameters());
  state.counters["peak_allocated"] = benchmark::Counter(static_cast<double>(r.peak_allocated), benchmark::Counter::kDefaults,
                                                        benchmark::Counter::kIs1024);
  state.counters["peak_reserved"] = benchmark::Counter(static_cast<double>(r.peak_reserved), benchmark::Counter::kDefaults,
                                                       benchmark::Counter::kIs1024);
  state.counters["allocations"] = static_cast<double>(r.stats.allocation[0].allocated);
}

void BM_MetaRun(benchmark::State& state, const ModelConfig& config) {
  const TrainingSetup s = bf16_flash(config);
  MetaRun r;
  for (auto _ : state) {
    r = run_on_meta(s);
    benchmark::DoNotOptimize(r.peak_reserved);
  }
  set_counters(state, s, r);
}

void BM_Estimate(benchmark::State& state, const ModelConfig& config) {
  const TrainingSetup s = bf16_flash(config);
  const std::size_t capacity = find_gpu("h100-80gb").total_bytes - kCudaContextBytes;
  MemoryEstimate e;
  for (auto _ : state) {
    e = estimate_memory(s, capacity);
    benchmark::DoNotOptimize(e.batches.largest);
  }
  set_counters(state, s, e.run);
  state.counters["max_batch"] = static_cast<double>(e.batches.largest);
}

// The ZeRO paper's 7.5B (gpt_7b with L=36, T=4096, V=57019 padded to 57024: 7,500,029,952
// parameters), bf16, flash attention, B=1, full recompute, sharded by `scheme` over `ranks`.
const planner::Shape kZeroPaper7_5b{"--model gpt2-1.5b --layers 36 --dim 4096 --heads 32 --seq 4096 --vocab 57019 "
                                    "--precision bf16 --attention flash --recompute full",
                                    1};
TrainingSetup zero_paper_7_5b(const std::string& scheme, std::size_t ranks) {
  return testing_support::setup_from_flags(planner::workload_flags(kZeroPaper7_5b, scheme), DeviceKind::cpu, ranks);
}

// Llama-3 70B at a 128k context (T = 131072), bf16, flash attention, B=1, full recompute, sharded
// by `scheme` over `ranks`: the largest question the estimator is asked to answer in seconds.
TrainingSetup llama3_70b_128k(const std::string& scheme, std::size_t ranks) {
  return testing_support::setup_from_flags("--model llama3-70b --seq 131072 --batch 1 --precision bf16 "
                                           "--attention flash --recompute full " + scheme,
                                           DeviceKind::cpu, ranks);
}

// The schemes: each registered technique's first plan setting that shards every model state
// (Techniques::sharding_stage 3) over `ranks`: ZeRO-3, FSDP's FULL_SHARD; as flags, and named by
// the technique.
struct ShardingScheme {
  std::string technique;
  std::string flags;
};
std::vector<ShardingScheme> full_sharding_schemes(std::size_t ranks) {
  std::vector<ShardingScheme> schemes;
  for (const planner::TechniqueSetting& setting : planner::technique_settings(kZeroPaper7_5b, ranks))
    if (setting.sharding_stage == 3 &&
        std::none_of(schemes.begin(), schemes.end(), [&](const ShardingScheme& s) { return s.technique == setting.technique->name(); }))
      schemes.push_back({setting.technique->name(), setting.flags});
  return schemes;
}

void BM_MetaRunSharded(benchmark::State& state, TrainingSetup (*setup)(const std::string&, std::size_t), std::string flags) {
  const TrainingSetup s = setup(flags, static_cast<std::size_t>(state.range(0)));
  MetaRun r;
  for (auto _ : state) {
    r = run_on_meta(s);
    benchmark::DoNotOptimize(r.peak_reserved);
  }
  set_counters(state, s, r);
  state.SetLabel(flags);
  state.counters["comm_volume_per_step"] =
      benchmark::Counter(static_cast<double>(r.comm.total.volume_bytes) / kMetaSteps, benchmark::Counter::kDefaults,
                         benchmark::Counter::kIs1024);
}

void register_benchmarks() {
  for (const ModelCase& m : models()) {
    benchmark::RegisterBenchmark((std::string("BM_MetaRun/") + m.name).c_str(), BM_MetaRun, m.config)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_Estimate/") + m.name).c_str(), BM_Estimate, m.config)
        ->Unit(benchmark::kMillisecond);
  }
  for (const ShardingScheme& scheme : full_sharding_schemes(8)) {
    benchmark::RegisterBenchmark(("BM_MetaRunSharded/" + scheme.technique).c_str(), BM_MetaRunSharded, zero_paper_7_5b,
                                 scheme.flags)
        ->Arg(8)
        ->Arg(64)
        ->Arg(1024)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_MetaRunSharded/llama3-70b_128k/" + scheme.technique).c_str(), BM_MetaRunSharded,
                                 llama3_70b_128k, scheme.flags)
        ->Arg(8)
        ->Arg(64)
        ->Arg(1024)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace trainmem::estimator

// An estimate computes nothing: it always runs on the meta device. --device=auto|cpu|cuda is taken
// as by every benchmark (the uniform flags of ci/suite) and recorded, not used.
int main(int argc, char** argv) {
  using namespace trainmem;
  const std::string requested_device = take_device_flag(argc, argv);
  const auto out = take_benchmark_out(argc, argv, "bench_estimator");
  if (!out) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  DeviceOptions options;
  options.choice = "meta";
  const auto device = Device::open(options);
  add_benchmark_context(device->info(), device->allocator().config());
  benchmark::AddCustomContext("trainmem.requested_device", requested_device + " (the estimates run on meta)");
  estimator::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return commit_benchmark_out(*out, "bench_estimator");
}
