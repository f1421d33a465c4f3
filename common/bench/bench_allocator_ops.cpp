// bench_allocator_ops: what one allocation costs with the caching allocator vs asking the device
// every time (raw mode: cudaMalloc/cudaFree on a GPU, mmap/munmap on the CPU).
//
//   build/ci/common/bench_allocator_ops [--device=auto|cpu|cuda] --benchmark_out=ops.json --benchmark_out_format=json
//
// Counters: ns per alloc+free pair (the time itself), device_allocs_per_iter (how often the
// device was asked), peak_reserved_bytes.
#include <benchmark/benchmark.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/device/device.h"
#include "common/results/benchmark_context.h"

namespace trainmem {
namespace {

std::string g_device_choice = "auto";

// A device per backend, opened once (opening a GPU is slow) and kept for all runs.
Device& device_for(AllocatorConfig::Backend backend) {
  static std::unique_ptr<Device> devices[2];
  auto& d = devices[backend == AllocatorConfig::Backend::raw];
  if (!d) {
    DeviceOptions options;
    options.choice = g_device_choice;
    options.allocator.backend = backend;
    d = Device::open(options);
  }
  return *d;
}

// One tensor-sized request, allocated and freed again: the steady state of a training loop.
void BM_AllocFree(benchmark::State& state, AllocatorConfig::Backend backend) {
  CachingAllocator& a = device_for(backend).allocator();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  a.empty_cache();
  const auto before = a.stats();
  for (auto _ : state) {
    void* p = a.allocate(bytes, MemoryCategory::workspace);
    benchmark::DoNotOptimize(p);
    a.free(p);
  }
  const auto after = a.stats();
  state.counters["device_allocs_per_iter"] = benchmark::Counter(
      static_cast<double>(after.num_device_alloc - before.num_device_alloc), benchmark::Counter::kAvgIterations);
  state.SetLabel(backend == AllocatorConfig::Backend::raw ? "raw" : "caching");
}

// A forward/backward-like pattern: 64 tensors of mixed sizes allocated in order, freed in reverse.
void BM_LayerPattern(benchmark::State& state, AllocatorConfig::Backend backend) {
  CachingAllocator& a = device_for(backend).allocator();
  a.empty_cache();
  a.reset_peak_stats();
  const std::size_t sizes[] = {3 * KiB, 768 * KiB, 2304 * KiB, 12 * MiB, 256, 3 * MiB, 48 * MiB, 9 * MiB};
  std::vector<void*> live;
  const auto before = a.stats();
  for (auto _ : state) {
    for (int i = 0; i < 64; ++i) live.push_back(a.allocate(sizes[i % 8], MemoryCategory::activations));
    while (!live.empty()) {
      a.free(live.back());
      live.pop_back();
    }
  }
  const auto after = a.stats();
  state.SetItemsProcessed(state.iterations() * 64);
  state.counters["device_allocs_per_iter"] = benchmark::Counter(
      static_cast<double>(after.num_device_alloc - before.num_device_alloc), benchmark::Counter::kAvgIterations);
  set_memory_counters(state, after);
  state.SetLabel(backend == AllocatorConfig::Backend::raw ? "raw" : "caching");
}

void register_benchmarks() {
  for (auto backend : {AllocatorConfig::Backend::caching, AllocatorConfig::Backend::raw}) {
    const std::string name = backend == AllocatorConfig::Backend::raw ? "raw" : "caching";
    benchmark::RegisterBenchmark(("BM_AllocFree/" + name).c_str(), BM_AllocFree, backend)
        ->Arg(4 * KiB)->Arg(1 * MiB)->Arg(16 * MiB)->Arg(256 * MiB);
    benchmark::RegisterBenchmark(("BM_LayerPattern/" + name).c_str(), BM_LayerPattern, backend);
  }
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_allocator_ops", [](const std::string& device, bool) {
    trainmem::g_device_choice = device;
    trainmem::register_benchmarks();
  });
}
