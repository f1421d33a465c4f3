// This machine's speed, measured: the CPU device model's figures (device_model.h).
//
// A calibration runs a few short training runs on the CPU backend with a cost log that keeps every
// call with its measured wall time (common/device/cost_log.h), then reads, for each kernel and
// storage type, a curve of time against size off its calls (time_curve.h), which come in several
// sizes (the workloads mix model widths). Copies, the host's work and each collective get the same
// kind of curve. Under mpirun every rank runs the workloads at once, so the rates are those of
// ranks that share the machine, and the collectives are timed among them.
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

#include "suites/trainmem/planner/technique_settings.h"
#include "suites/trainmem/planner/time_curve.h"

namespace trainmem {
class Communicator;
}

namespace trainmem::planner {

struct Calibration {
  std::string machine;  // what it was measured on: "<cpu model>, <threads> threads, <ranks> ranks"
  int ranks = 1;
  std::map<std::string, TimeCurve> kernels;  // "matmul_forward/bf16"; host work: "host:host_adamw_update/f32"
  std::map<std::string, TimeCurve> classes;  // by kind of work, for a kernel the workloads did not run: "gemm/f32"
  TimeCurve copy;                            // against bytes
  std::map<std::string, TimeCurve> collectives;  // "all_reduce": against bytes sent
  double micro_batch_seconds = 0;            // what a micro-batch costs beyond its timed parts (the median)
};

// The calibration's model shapes (technique_settings.h), and the workloads calibrate_this_machine runs for `ranks` ranks, as train flags: the calibration's
// shapes with the registered techniques' settings (calibration.cpp says how they are spread).
const std::vector<Shape>& calibration_shapes();
std::vector<std::string> calibration_workloads(int ranks);

// Runs the workloads and reads the curves. `world`: the ranks under mpirun (nullptr: one process); every
// rank calls it. Throws std::runtime_error when a workload fails.
Calibration calibrate_this_machine(Communicator* world);

// What a calibration of this machine for `ranks` is keyed by and records in its `machine`: the CPU,
// its hardware threads, the thread settings (OPENBLAS_NUM_THREADS, TRAINMEM_CPU_THREADS) and the ranks.
std::string machine_description(int ranks);

// Every curve a calibration for `ranks` must hold, with no time in it: the workloads run on the
// meta device (nothing runs; each call is declared) into the log calibrate_this_machine reads, so
// the kernels, host work, copies and collectives are exactly those a measurement records.
Calibration expected_curves(int ranks);

// Why `c` cannot serve as this machine's calibration for `ranks` (nullopt: it can): another
// machine, thread setting or rank count; a curve of expected_curves(ranks) missing; a curve with no
// knots, a knot not finite, negative, without time or out of order; more knots than calls.
std::optional<std::string> calibration_problem(const Calibration& c, int ranks);

// Where the calibration of this machine, with these thread settings and `ranks`, is cached:
// $TRAINMEM_CACHE_DIR, else $XDG_CACHE_HOME/trainmem, else ~/.cache/trainmem.
std::string calibration_cache_path(int ranks);
// Reads the cached calibration for `ranks` ranks. nullopt when there is none or it cannot serve:
// another version of the format, a damaged or partial file, or calibration_problem; `problem`
// (if given) then says which ("" when there is no file).
std::optional<Calibration> read_calibration(const std::string& path, int ranks, std::string* problem = nullptr);
// Whole or not at all (common/util/output_file.h). Throws OutputFileError when it cannot be written.
void write_calibration(const Calibration& c, const std::string& path);

}  // namespace trainmem::planner
