// bench_lazy_loading: device memory (category data) and training throughput with the dataset on
// the device (eager) or on the host with batches prefetched (lazy), and loader-only throughput.
//
//   build/ci/suites/lazy_loading/bench_lazy_loading [--device=auto|cpu|cuda] --benchmark_out=lazy.json --benchmark_out_format=json
//
// Variants: eager | lazy (prefetch 2, pinned) | lazy_sync (prefetch 0) | lazy_unpinned (prefetch 2)
// | lazy_mmap (prefetch 2, the dataset a memory-mapped .tok file; loader benchmark only).
// CPU: tiny model, B=8, T=64, an 8M-token synthetic dataset (16 MiB as uint16, 32 MiB as int32
// on the device), 8M / 512 = 16384 batches an epoch. GPU: gpt2-124m, B=8, T=1024,
// 64M tokens.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <filesystem>
#include <memory>

#include "common/data/token_file.h"
#include "common/results/benchmark_context.h"
#include "common/train/training_run.h"
#include "suites/lazy_loading/lazy_loading_technique.h"

namespace trainmem::lazy_loading {
namespace {

enum Variant : long { eager = 0, lazy = 1, lazy_sync = 2, lazy_unpinned = 3, lazy_mmap = 4 };
const char* kVariantNames[] = {"eager", "lazy", "lazy_sync", "lazy_unpinned", "lazy_mmap"};

struct Setup {
  std::string device;
  ModelConfig config;
  std::size_t batch = 8;
  std::size_t dataset_tokens = 0;
};

const std::vector<std::uint16_t>& dataset(std::size_t n) {
  static const std::vector<std::uint16_t> tokens = synthetic_corpus(n, 1);
  return tokens;
}

// The token file for lazy_mmap, written once into the temp directory (removed at exit).
const std::string& dataset_file(std::size_t n) {
  struct File {
    std::string path;
    ~File() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };
  static File file{[n] {
    const auto path = (std::filesystem::temp_directory_path() /
                       ("trainmem-bench-lazy-" + std::to_string(::getpid()) + ".tok")).string();
    write_token_file(path, dataset(n));
    return path;
  }()};
  return file.path;
}

// The run of a variant, as `trainmem train --loader ... --prefetch ... --pinned ...` describes it.
TrainingSetup training_setup(const Setup& s, Variant v) {
  TrainingSetup setup;
  setup.model = s.config;
  setup.batch = s.batch;
  setup.dataset_tokens = s.dataset_tokens;
  LoaderChoice& choice = setup.option<LoaderChoice>();
  choice.loader = v == eager ? Loader::eager : Loader::lazy;
  choice.prefetch = v == lazy_sync ? 0 : 2;
  choice.pinned = v != lazy_unpinned;
  return setup;
}

HostTokens host_tokens(const Setup& s, Variant v) {
  return v == lazy_mmap ? HostTokens::map_file(dataset_file(s.dataset_tokens)) : HostTokens(dataset(s.dataset_tokens));
}

std::unique_ptr<Device> open_device(const std::string& choice) {
  DeviceOptions options;
  options.choice = choice;
  return Device::open(options);
}

// The loader's device bytes by the suite's formula (its registration): the data category's formula
// beyond the sequential reader's (the trainer's own batch tensors).
void add_formula_counters(benchmark::State& state, const TrainingSetup& setup) {
  TrainingSetup sequential = setup;
  sequential.option<LoaderChoice>().loader = Loader::sequential;
  FormulaBytes with_loader, without;
  lazy_loading_technique().add_formulas(setup, with_loader);
  lazy_loading_technique().add_formulas(sequential, without);
  state.counters["loader_formula_bytes"] = bytes_counter(static_cast<double>(with_loader.data - without.data));
  state.counters["dataset_tokens"] = static_cast<double>(setup.dataset_tokens);
}

void BM_Train(benchmark::State& state, const Setup& s) {
  static const Techniques lazy_loading{&lazy_loading_technique()};
  const auto v = static_cast<Variant>(state.range(0));
  auto device = open_device(s.device);
  const TrainingSetup setup = training_setup(s, v);
  TrainingRun run(setup, lazy_loading, *device, nullptr, host_tokens(s, v));
  run.step();
  device->allocator().reset_peak_stats();
  for (auto _ : state) benchmark::DoNotOptimize(run.step().loss);
  set_memory_counters(state, device->allocator().stats());
  add_formula_counters(state, setup);
  set_rate_counters(state, "tokens", static_cast<double>(s.batch * s.config.seq));
  state.SetLabel(s.config.name + " " + kVariantNames[v]);
}

void BM_Loader(benchmark::State& state, const Setup& s) {
  const auto v = static_cast<Variant>(state.range(0));
  auto device = open_device(s.device);
  const TrainingSetup setup = training_setup(s, v);
  HostTokens tokens = host_tokens(s, v);
  auto loader = lazy_loading_technique().make_loader(setup, *device, tokens, 0, 1);
  const auto b = static_cast<std::int64_t>(s.batch), t = static_cast<std::int64_t>(s.config.seq);
  Tensor x(device->allocator(), {b, t}, DType::i32, MemoryCategory::data, "batch.tokens");
  Tensor y(device->allocator(), {b, t}, DType::i32, MemoryCategory::data, "batch.targets");
  loader->next(x, y);
  device->allocator().reset_peak_stats();
  for (auto _ : state) {
    loader->next(x, y);
    benchmark::ClobberMemory();
  }
  if (device->kind() == DeviceKind::cuda) device->synchronize();
  set_memory_counters(state, device->allocator().stats());
  add_formula_counters(state, setup);
  set_rate_counters(state, "batches", 1.0);
  set_rate_counters(state, "tokens", static_cast<double>(s.batch * s.config.seq));
  state.SetLabel(kVariantNames[v]);
}

}  // namespace
}  // namespace trainmem::lazy_loading

int main(int argc, char** argv) {
  using namespace trainmem::lazy_loading;
  return trainmem::benchmark_main(argc, argv, "bench_lazy_loading", [](const std::string& device, bool gpu) {
    static Setup s;
    s.device = device;
    s.config = trainmem::model_preset(gpu ? "gpt2-124m" : "tiny");
    s.batch = 8;
    s.dataset_tokens = gpu ? (std::size_t{64} << 20) : (std::size_t{8} << 20);
    auto* t = benchmark::RegisterBenchmark(("BM_Train/" + s.config.name).c_str(), BM_Train, s);
    t->ArgName("loader")->Unit(benchmark::kMillisecond)->UseRealTime();  // the worker thread works too
    for (long v : {eager, lazy, lazy_sync, lazy_unpinned}) t->Arg(v);
    auto* l = benchmark::RegisterBenchmark("BM_Loader", BM_Loader, s);
    l->ArgName("loader")->Unit(benchmark::kMicrosecond)->UseRealTime();
    for (long v : {eager, lazy, lazy_sync, lazy_unpinned, lazy_mmap}) l->Arg(v);
  });
}
