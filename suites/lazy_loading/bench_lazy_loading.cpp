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
#include "common/train/trainer.h"
#include "suites/lazy_loading/eager_loader.h"
#include "suites/lazy_loading/lazy_loader.h"

namespace trainmem::lazy_loading {
namespace {

enum Variant : long { eager = 0, lazy = 1, lazy_sync = 2, lazy_unpinned = 3, lazy_mmap = 4 };
const char* kVariantNames[] = {"eager", "lazy", "lazy_sync", "lazy_unpinned", "lazy_mmap"};

struct Setup {
  std::string device;
  GPTConfig config;
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

std::unique_ptr<BatchSource> make_loader(Device& device, const Setup& s, Variant v) {
  const std::size_t B = s.batch, T = s.config.seq;
  if (v == eager) return std::make_unique<EagerLoader>(device, HostTokens(dataset(s.dataset_tokens)), B, T);
  LazyLoaderOptions o;
  o.prefetch = v == lazy_sync ? 0 : 2;
  o.pinned = v != lazy_unpinned;
  HostTokens host = v == lazy_mmap ? HostTokens::map_file(dataset_file(s.dataset_tokens))
                                   : HostTokens(dataset(s.dataset_tokens));
  return std::make_unique<LazyLoader>(device, std::move(host), B, T, o);
}

std::unique_ptr<Device> open_device(const std::string& choice) {
  DeviceOptions options;
  options.choice = choice;
  return Device::open(options);
}

void add_formula_counters(benchmark::State& state, const Setup& s, Variant v) {
  const std::size_t batch_bytes = round_size(s.batch * s.config.seq * 4);
  const double loader_bytes = v == eager       ? static_cast<double>(round_size(s.dataset_tokens * 4))
                              : v == lazy_sync ? 0.0
                                               : 2.0 * 2.0 * static_cast<double>(batch_bytes);
  state.counters["loader_formula_bytes"] = bytes_counter(loader_bytes);
  state.counters["dataset_tokens"] = static_cast<double>(s.dataset_tokens);
}

void BM_Train(benchmark::State& state, const Setup& s) {
  const auto v = static_cast<Variant>(state.range(0));
  auto device = open_device(s.device);
  GPT model(*device, s.config, 1);
  auto loader = make_loader(*device, s, v);
  TrainerOptions topt;
  topt.batch = s.batch;
  topt.seq = s.config.seq;
  Trainer trainer(model, *loader, topt);
  trainer.step();
  device->allocator().reset_peak_stats();
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step().loss);
  set_memory_counters(state, device->allocator().stats());
  add_formula_counters(state, s, v);
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(s.batch * s.config.seq),
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(s.config.name + " " + kVariantNames[v]);
}

void BM_Loader(benchmark::State& state, const Setup& s) {
  const auto v = static_cast<Variant>(state.range(0));
  auto device = open_device(s.device);
  auto loader = make_loader(*device, s, v);
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
  add_formula_counters(state, s, v);
  state.counters["batches_per_s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(s.batch * s.config.seq),
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kVariantNames[v]);
}

}  // namespace
}  // namespace trainmem::lazy_loading

int main(int argc, char** argv) {
  using namespace trainmem::lazy_loading;
  return trainmem::benchmark_main(argc, argv, "bench_lazy_loading", [](const std::string& device, bool gpu) {
    static Setup s;
    s.device = device;
    s.config = trainmem::gpt_preset(gpu ? "gpt2-124m" : "tiny");
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
