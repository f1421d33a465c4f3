// This machine's speed, measured: the CPU device model's figures (device_model.h).
//
// A calibration runs a few short training runs on the CPU backend with a cost log that keeps every
// call with its measured wall time (common/device/cost_log.h), then fits, for each kernel and
// storage type, the line
//   seconds = overhead + units * seconds_per_unit      (units: flops for GEMMs and attention, bytes
//                                                      for the rest; both >= 0)
// over its calls, which come in several sizes (the workloads mix model widths), by least squares of
// the relative error, sum_i ((seconds_i - line(units_i)) / seconds_i)^2 / n(size class of i), so
// that short calls are fitted as well as long ones, and a size with few calls as well as one with
// many (fit_line). Copies, the host's
// work and each collective get the same kind of line. Under mpirun every rank runs the workloads at
// once, so the rates are those of ranks that share the machine, and the collectives are timed
// among them.
//
// The workloads are not the configurations a plan is checked on: the planner's proof
// (tests/test_planner.cpp) times other shapes than these.
//
// Cached per machine, thread settings and rank count (calibration_cache_path): a calibration takes
// a few seconds, and `trainmem plan --device cpu` reuses it.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainmem {
class Communicator;
}

namespace trainmem::planner {

struct LinearFit {
  double overhead = 0;          // seconds per call
  double seconds_per_unit = 0;  // seconds per flop (GEMM-like) or per byte
  std::size_t calls = 0;
  double seconds(double units) const { return overhead + units * seconds_per_unit; }
};

struct Calibration {
  std::string machine;  // what it was measured on: "<cpu model>, <threads> threads, <ranks> ranks"
  int ranks = 1;
  std::map<std::string, LinearFit> kernels;  // "matmul_forward/bf16"; host work: "host:host_adamw_update/f32"
  std::map<std::string, LinearFit> classes;  // by kind of work, for a kernel the workloads did not run: "gemm/f32"
  LinearFit copy;                            // per byte
  std::map<std::string, LinearFit> collectives;  // "all_reduce": per byte sent
  LinearFit micro_batch;                     // what a micro-batch costs beyond its timed parts
};

// One observation: a call's units and seconds under a key.
struct TimedCall {
  std::string key;
  double units;
  double seconds;
};
// The line through the calls of one key that minimizes their squared relative errors, each size
// class (a factor of 4 in units) weighing the same (overhead and slope clamped at >= 0).
LinearFit fit_line(const std::vector<TimedCall>& calls);

// Runs the workloads and fits. `world`: the ranks under mpirun (nullptr: one process); every
// rank calls it. Throws std::runtime_error when a workload fails.
Calibration calibrate_this_machine(Communicator* world);

// Where the calibration of this machine, with these thread settings and `ranks`, is cached:
// $TRAINMEM_CACHE_DIR, else $XDG_CACHE_HOME/trainmem, else ~/.cache/trainmem.
std::string calibration_cache_path(int ranks);
// Reads a cached calibration (nullopt: none, or one from another version of the format).
std::optional<Calibration> read_calibration(const std::string& path);
void write_calibration(const Calibration& c, const std::string& path);  // whole or not at all

}  // namespace trainmem::planner
