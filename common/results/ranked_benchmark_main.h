// The main of every benchmark that runs under mpirun (bench_collectives, bench_zero, bench_fsdp,
// bench_planner), as nccl-tests has one driver: the same flags, the same context, the same
// rank-0 output for each of them.
//
//   mpirun -np N <benchmark> [--device=auto|cpu|cuda] [--comm=auto|local|mpi|nccl]
//          [Google Benchmark's flags]     (without mpirun: a world of one rank)
//
// Every rank runs every case (a collective needs all of them); rank 0 alone prints and writes
// --benchmark_out. The world is named once, in the JSON's context: "trainmem.world_size" and
// "trainmem.comm_backend" (the report reads the world size of a file from there).
#pragma once
#include <benchmark/benchmark.h>

#include <cstddef>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "common/comm/communicator.h"
#include "common/results/benchmark_context.h"

namespace trainmem {

// What a ranked benchmark's cases run on: the device and the world of ranks, opened once by the
// main and alive until every case has run.
struct BenchmarkWorld {
  std::string device_choice;  // --device as given ("auto" when absent): cases that open their own device
  Device& device;
  Communicator& world;
};

// What differs between the ranked benchmarks' mains (the defaults: bench_zero's and bench_fsdp's).
struct RankedBenchmarkSettings {
  const char* fixed_device = nullptr;   // always this device (--device is then only recorded)
  std::size_t device_memory = 0;        // the device's capacity; 0: the device's own
  bool comm_flag = false;               // takes --comm=auto|local|mpi|nccl (bench_collectives measures it)
};

// Opens the device and the world, then runs Google Benchmark with the cases `register_cases`
// registers. The exit code: 0; 2 for a bad flag, an unusable device or a --benchmark_out that
// cannot be written (under mpirun every rank ends with it); 1 when the file could not be committed.
// `name` is the binary's, in its error lines.
inline int ranked_benchmark_main(int argc, char** argv, const char* name, const RankedBenchmarkSettings& settings,
                                 const std::function<void(BenchmarkWorld&)>& register_cases) {
  init_mpi_if_launched();
  // An error before the cases run: one line, exit code 2 (under mpirun on every rank).
  const auto refuse = [name](const std::exception& e) {
    const std::string message = std::string(name) + ": " + e.what();
    if (launched_by_mpirun()) abort_world(message, 2);
    std::cerr << message << '\n';
    return 2;
  };
  const std::string device_choice = take_device_flag(argc, argv);
  const std::string comm_choice = settings.comm_flag ? take_flag_value(argc, argv, "--comm=", "auto") : "auto";
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> world;
  try {
    DeviceOptions options;
    options.choice = settings.fixed_device ? settings.fixed_device : device_choice;
    if (settings.device_memory) options.device_memory = settings.device_memory;
    // Under mpirun every rank would print the same choice: one process prints it.
    device = Device::open(options, launched_by_mpirun() ? nullptr : &std::cerr);
    world = make_communicator(*device, comm_choice);
  } catch (const std::exception& e) {
    return refuse(e);
  }
  const auto out = take_benchmark_out(argc, argv, name, world->rank());  // only rank 0 writes it
  if (!out) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  add_benchmark_context(device->info(), device->allocator().config());
  benchmark::AddCustomContext("trainmem.world_size", std::to_string(world->world_size()));
  benchmark::AddCustomContext("trainmem.comm_backend", world->backend());
  if (settings.fixed_device)
    benchmark::AddCustomContext("trainmem.requested_device",
                                device_choice + " (the cases run on " + settings.fixed_device + ")");

  BenchmarkWorld cases_run_on{device_choice, *device, *world};
  try {
    register_cases(cases_run_on);
  } catch (const std::exception& e) {
    return refuse(e);
  }
  run_benchmarks_reporting_on_rank0(world->rank());
  benchmark::Shutdown();
  world.reset();  // the communicator's buffers live on the device: released before it closes
  device.reset();
  return commit_benchmark_out(*out, name);
}

}  // namespace trainmem
