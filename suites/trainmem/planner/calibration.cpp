#include "suites/trainmem/planner/calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/comm/communicator.h"
#include "common/device/cost_log.h"
#include "common/device/device.h"
#include "common/util/output_file.h"
#include "suites/trainmem/planner/cpu_timing.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {

namespace {

constexpr int kFormat = 4;  // the cache file's format (4: time curves); a file of another is measured again

// The workloads: both families, every precision and attention kernel, at three widths (up to
// GPT-2 124M's, whose products are the ones OpenBLAS threads), so that each kernel's curve is
// fitted over calls of several sizes. Under mpirun every rank runs them at once, in lockstep as a
// data-parallel run keeps its ranks (each step ends in an all-reduce: --zero 0 is added where the
// workload names no sharding), then the sharded workloads below (ZeRO-2's reduce-scatter and
// all-gather, FSDP's). Ranks that run unaligned share the cores differently: tiny's steps were
// predicted 10-15 points slower that way.
const std::vector<std::string>& workloads() {
  static const std::vector<std::string> list = {
      "--model tiny --batch 8",
      "--model tiny --batch 8 --precision bf16 --attention flash",
      "--model tiny --batch 8 --precision fp16 --attention flash",
      "--model small --batch 4 --dim 192 --heads 6",
      "--model small --batch 4 --precision bf16",
      "--model small --batch 4 --precision fp16 --attention flash --dim 192 --heads 6",
      "--model llama-tiny --batch 8",
      "--model llama-tiny --batch 8 --precision bf16 --attention flash",
      "--model llama-small --batch 2 --precision fp16",
      "--model llama-small --batch 2 --attention flash",
      "--model small --batch 2 --zero 3 --offload params --precision bf16",
      "--model gpt2-124m --layers 1 --seq 64 --vocab 4096 --batch 2",
      "--model gpt2-124m --layers 1 --seq 64 --vocab 4096 --batch 2 --precision bf16 --attention flash",
      "--model gpt2-124m --layers 1 --seq 64 --vocab 4096 --batch 2 --precision fp16",
      "--model tiny --batch 8 --zero 2 --offload optimizer",
  };
  return list;
}
const std::vector<std::string>& sharded_workloads() {
  static const std::vector<std::string> list = {
      "--model small --batch 4 --zero 2",
      "--model small --batch 4 --zero 0 --precision bf16",
      "--model tiny --batch 8 --fsdp full",
  };
  return list;
}
constexpr int kSteps = 3;  // the first is left out (warm-up: first touches, Adam's state)

// Keeps every entry of the steps after the first with its measured time.
class RecordingLog : public CostLog {
 public:
  std::vector<TimedCall> calls;
  std::vector<TimedCall> kinds;          // the device's kernels again, by kind of work: "gemm/f32"
  std::vector<TimedCall> micro_batches;  // per step: its time beyond the timed parts

  void kernel(const kernels::KernelCall& c, double s) override {
    add(key_of("", c), units_of(c), s);
    if (step_ >= 2) kinds.push_back({std::string(kernels::to_string(c.kind)) + "/" + kernels::to_string(c.dtype), units_of(c), s});
  }
  void host_work(const kernels::KernelCall& c, double s) override { add(key_of("host:", c), units_of(c), s); }
  void copy(CopyDirection, double bytes, double s) override { add("copy", bytes, s); }
  void collective(Collective c, const CommCounts& call, int, bool, std::uint64_t) override {
    add("collective:" + to_string(c), static_cast<double>(call.sent_bytes), call.seconds);
  }
  void collective_wait(std::uint64_t, double s) override { timed_ += s; }
  void begin_micro_batch(long step, std::size_t micro) override {
    if (micro == 0) timed_ = 0, micro_count_ = 0;
    ++micro_count_;
    step_ = step;
  }
  void begin_optimizer(long) override {}
  void end_step(long step, double seconds) override {
    if (step < 2 || micro_count_ == 0) return;
    const double per_micro = std::max(0.0, seconds - timed_) / static_cast<double>(micro_count_);
    micro_batches.push_back({"micro", 1.0, per_micro});
  }

 private:
  static std::string key_of(const char* prefix, const kernels::KernelCall& c) {
    return std::string(prefix) + c.name + "/" + kernels::to_string(c.dtype);
  }
  static double units_of(const kernels::KernelCall& c) {
    return c.kind == kernels::KernelClass::memory ? c.bytes : c.flops;
  }
  void add(const std::string& key, double units, double seconds) {
    if (step_ < 2) return;
    calls.push_back({key, units, seconds});
    timed_ += seconds;
  }
  long step_ = 0;
  double timed_ = 0;
  std::size_t micro_count_ = 0;
};

std::string machine_description(int ranks) {
  const DeviceInfo cpu = query_cpu_device_info();
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  const char* threads = std::getenv("TRAINMEM_CPU_THREADS");
  std::ostringstream text;
  text << cpu.name << ", " << std::thread::hardware_concurrency() << " hardware threads, OPENBLAS_NUM_THREADS="
       << (blas ? blas : "-") << " TRAINMEM_CPU_THREADS=" << (threads ? threads : "-") << ", " << ranks
       << (ranks == 1 ? " rank" : " ranks");
  return text.str();
}

}  // namespace

Calibration calibrate_this_machine(Communicator* world) {
  const int ranks = world ? world->world_size() : 1;
  RecordingLog log;
  for (const std::string& flags : workloads()) {
    const TrainingSetup alone = cli::setup_from_train_flags(flags);
    if (world && ranks > 1 && registered_techniques().sharding(alone) == nullptr)
      run_timed_on_cpu(cli::setup_from_train_flags(flags + " --zero 0", DeviceKind::cpu, static_cast<std::size_t>(ranks)),
                       world, kSteps, &log);
    else
      run_timed_on_cpu(alone, nullptr, kSteps, &log);
  }
  if (world && ranks > 1)
    for (const std::string& flags : sharded_workloads())
      run_timed_on_cpu(cli::setup_from_train_flags(flags, DeviceKind::cpu, static_cast<std::size_t>(ranks)), world,
                       kSteps, &log);

  std::map<std::string, std::vector<TimedCall>> by_key, by_kind;
  for (const TimedCall& c : log.calls) by_key[c.key].push_back(c);
  for (const TimedCall& c : log.kinds) by_kind[c.key].push_back(c);
  Calibration cal;
  cal.ranks = ranks;
  cal.machine = machine_description(ranks);
  for (const auto& [key, calls] : by_key) {
    if (key == "copy") cal.copy = fit_curve(calls);
    else if (key.rfind("collective:", 0) == 0) cal.collectives[key.substr(11)] = fit_curve(calls);
    else cal.kernels[key] = fit_curve(calls);
  }
  for (const auto& [kind, calls] : by_kind) cal.classes[kind] = fit_curve(calls);
  // The per-micro-batch residual: the median (a step's overhead, robust to a stray slow step).
  std::vector<double> residuals;
  for (const TimedCall& m : log.micro_batches) residuals.push_back(m.seconds);
  cal.micro_batch_seconds = median(residuals);
  return cal;
}

// ---- the cache -------------------------------------------------------------------------------

namespace {
nlohmann::json to_json(const TimeCurve& c) {
  nlohmann::json knots = nlohmann::json::array();
  for (const TimeCurve::Knot& k : c.knots) knots.push_back({k.units, k.seconds});
  return {{"knots", knots}, {"calls", c.calls}};
}
TimeCurve curve_of(const nlohmann::json& j) {
  TimeCurve c;
  c.calls = j.at("calls").get<std::size_t>();
  for (const nlohmann::json& k : j.at("knots")) {
    const TimeCurve::Knot knot{k.at(0).get<double>(), k.at(1).get<double>()};
    if (!(knot.units >= 0) || !(knot.seconds >= 0) || (!c.knots.empty() && !(knot.units > c.knots.back().units)))
      throw std::invalid_argument("a knot out of order or negative");
    c.knots.push_back(knot);
  }
  return c;
}
nlohmann::json curves_to_json(const std::map<std::string, TimeCurve>& curves) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, c] : curves) j[k] = to_json(c);
  return j;
}
std::map<std::string, TimeCurve> curves_of(const nlohmann::json& j) {
  std::map<std::string, TimeCurve> curves;
  for (const auto& [k, v] : j.items()) curves[k] = curve_of(v);
  return curves;
}
}  // namespace

std::string calibration_cache_path(int ranks) {
  std::string dir;
  if (const char* d = std::getenv("TRAINMEM_CACHE_DIR"); d && *d) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/trainmem";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/trainmem";
  else dir = "/tmp/trainmem-cache";
  // The machine and thread settings are in the name: another setting is another calibration.
  const std::size_t key = std::hash<std::string>{}(machine_description(ranks));
  std::ostringstream name;
  name << dir << "/cpu-calibration-" << std::hex << key << ".json";
  return name.str();
}

std::optional<Calibration> read_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("format").get<int>() != kFormat) return std::nullopt;
    Calibration c;
    c.machine = j.at("machine").get<std::string>();
    c.ranks = j.at("ranks").get<int>();
    c.kernels = curves_of(j.at("kernels"));
    c.classes = curves_of(j.at("classes"));
    c.collectives = curves_of(j.at("collectives"));
    c.copy = curve_of(j.at("copy"));
    c.micro_batch_seconds = j.at("micro_batch_s").get<double>();
    if (!(c.micro_batch_seconds >= 0)) return std::nullopt;
    if (c.machine != machine_description(c.ranks)) return std::nullopt;  // another machine's file
    return c;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged or partial file: measured again
  }
}

void write_calibration(const Calibration& c, const std::string& path) {
  const nlohmann::json j = {{"format", kFormat},
                            {"machine", c.machine},
                            {"ranks", c.ranks},
                            {"kernels", curves_to_json(c.kernels)},
                            {"classes", curves_to_json(c.classes)},
                            {"collectives", curves_to_json(c.collectives)},
                            {"copy", to_json(c.copy)},
                            {"micro_batch_s", c.micro_batch_seconds}};
  std::error_code ignored;  // a folder that cannot be made: the write below says so
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  write_output_file(path, j.dump(1) + "\n", "calibration");
}

}  // namespace trainmem::planner
