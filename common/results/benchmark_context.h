// Google Benchmark glue: every benchmark's JSON carries the device and allocator it ran on
// (as custom context), and memory figures as byte counters (Counter::kIs1024), so results from
// different machines can be put side by side.
#pragma once
#include <benchmark/benchmark.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/results/benchmark_out_file.h"
#include "common/results/result_json.h"
#include "generated/result_schema.h"

namespace trainmem {

// Call once in a benchmark's main, before RunSpecifiedBenchmarks(). Context keys are flat strings:
// "trainmem.device.name", "trainmem.device.device_memory_bytes", "trainmem.allocator.config", ...
inline void add_benchmark_context(const DeviceInfo& device, const AllocatorConfig& allocator) {
  const nlohmann::json context = run_context_json(device, allocator);
  for (const auto& [key, value] : context["device"].items())
    benchmark::AddCustomContext("trainmem.device." + key, value.is_string() ? value.get<std::string>() : value.dump());
  benchmark::AddCustomContext("trainmem.allocator.config", allocator.to_string());
  benchmark::AddCustomContext("trainmem.version", trainmem_version());
  benchmark::AddCustomContext("trainmem.cuda_compiled", context["cuda_compiled"].dump());
}

// Takes one of trainmem's own benchmark flags, `<prefix><value>` (e.g. "--device=cuda"), out of
// argv before Google Benchmark reads the rest, and returns its value (`absent` when not given).
inline std::string take_flag_value(int& argc, char** argv, const char* prefix, const char* absent) {
  std::string value = absent;
  const std::size_t length = std::strlen(prefix);
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix, length) == 0) value = argv[i] + length;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  return value;
}

// --device=auto|cpu|cuda, every benchmark's flag ("auto" when absent).
inline std::string take_device_flag(int& argc, char** argv) { return take_flag_value(argc, argv, "--device=", "auto"); }

// Bytes are reported as counters in bytes; Google Benchmark prints them with binary prefixes.
inline benchmark::Counter bytes_counter(double bytes) {
  return benchmark::Counter(bytes, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

// A rate per second of wall-clock time, `<what>_per_s`, and the amount it counts in one iteration,
// `<what>_per_iteration`, so that rate x time = amount can be checked on every result
// (reports/tests/test_rates.py). Google Benchmark divides a rate counter (kIsRate) by the main
// thread's CPU time unless the benchmark is registered with UseRealTime() (or UseManualTime()):
// every trainmem benchmark is, so its rates agree with its time column, which is wall time.
inline void set_rate_counters(benchmark::State& state, const std::string& what, double per_iteration) {
  std::string rate = what, amount = what;
  rate += result_schema::rates_rate_suffix;        // "tokens_per_s"
  amount += result_schema::rates_amount_suffix;    // "tokens_per_iteration"
  state.counters[rate] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
  state.counters[amount] = per_iteration;
}

// peak_allocated_bytes, peak_reserved_bytes and <category>_peak_bytes for non-empty categories.
inline void set_memory_counters(benchmark::State& state, const MemoryStats& stats) {
  namespace key = result_schema;  // the keys, declared once (common/results/result_schema.json)
  state.counters[std::string(key::memory_peak_allocated)] = bytes_counter(static_cast<double>(stats.allocated_bytes[0].peak));
  state.counters[std::string(key::memory_peak_reserved)] = bytes_counter(static_cast<double>(stats.reserved_bytes[0].peak));
  for (MemoryCategory c : kAllMemoryCategories) {
    const auto peak = stats.by_category[index_of(c)].peak;
    if (peak == 0) continue;
    std::string name(to_string(c));
    name += key::memory_category_peak_counter_suffix;  // "activations_peak_bytes"
    state.counters[name] = bytes_counter(static_cast<double>(peak));
  }
}

// --benchmark_out, taken before benchmark::Initialize reads argv (results/benchmark_out_file.h):
// written whole or not at all, its path checked now. Under mpirun only rank 0 writes it (else
// every rank would write the same file). A path that cannot be written: one line and nullptr
// (return 2); under mpirun every rank ends with exit code 2.
inline std::unique_ptr<BenchmarkOutFile> take_benchmark_out(int& argc, char**& argv, const char* name, int rank = 0) {
  try {
    return std::make_unique<BenchmarkOutFile>(argc, argv, rank == 0);
  } catch (const std::exception& e) {
    const std::string message = std::string(name) + ": error: " + e.what();
    if (launched_by_mpirun()) abort_world(message, 2);
    std::cerr << message << '\n';
    return nullptr;
  }
}

// After RunSpecifiedBenchmarks: the exit code, 0, or 1 after a one-line error when the file could
// not be written (the earlier one is kept).
inline int commit_benchmark_out(BenchmarkOutFile& out, const char* name) {
  try {
    out.commit();
    return 0;
  } catch (const OutputFileError& e) {
    std::cerr << name << ": error: " << e.what() << '\n';
    return 1;
  }
}

// Benchmarks under mpirun: every rank runs every benchmark (a collective needs all of them), and
// only rank 0 reports; the other ranks run with a reporter that prints nothing.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

inline void run_benchmarks_reporting_on_rank0(int rank) {
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
}

// Whether Google Benchmark will only list the cases (--benchmark_list_tests[=true|1|yes]): read
// before benchmark::Initialize, which keeps its flags to itself.
inline bool only_listing_cases(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true" ||
        arg == "--benchmark_list_tests=1" || arg == "--benchmark_list_tests=yes")
      return true;
  }
  return false;
}

// The main of every trainmem benchmark binary: takes --device=auto|cpu|cuda, opens that device
// once to record its description as context (and print the choice), lets `register_benchmarks`
// register what suits it (device choice, whether it is a GPU), and runs Google Benchmark.
// The same flags for every binary, as nccl-tests does. `--device=cuda --benchmark_list_tests`
// lists the GPU cases even where no GPU answers (registering runs nothing): so a machine without
// one checks the case names a GPU call will select (ci/gpu-check --dry-run).
inline int benchmark_main(int argc, char** argv, const char* name,
                          const std::function<void(const std::string& device, bool gpu)>& register_benchmarks) {
  const std::string device_choice = take_device_flag(argc, argv);
  const bool listing = only_listing_cases(argc, argv);
  const auto out = take_benchmark_out(argc, argv, name);
  if (!out) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  try {
    DeviceOptions options;
    options.choice = device_choice;
    std::unique_ptr<Device> device;
    try {
      device = Device::open(options, &std::cerr);
    } catch (const DeviceError& e) {
      if (!listing || device_choice != "cuda") throw;
      std::cerr << name << ": " << e.what() << "; listing the GPU cases only\n";
    }
    if (device) add_benchmark_context(device->info(), device->allocator().config());
    register_benchmarks(device_choice, device == nullptr || device->kind() == DeviceKind::cuda);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << '\n';
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return commit_benchmark_out(*out, name);
}

}  // namespace trainmem
