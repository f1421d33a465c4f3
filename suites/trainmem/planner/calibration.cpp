#include "suites/trainmem/planner/calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
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
#include "suites/trainmem/estimator/meta_run.h"
#include "suites/trainmem/planner/cpu_timing.h"
#include "suites/trainmem/planner/technique_settings.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {

namespace {

constexpr int kFormat = 4;  // the cache file's format (4: time curves); a file of another is measured again

}  // namespace

// The workloads' shapes: both families at several widths (up to GPT-2 124M's, whose products are
// the ones OpenBLAS threads), so that each kernel's curve is fitted over calls of several sizes.
// Ordered so that every other shape (the even ones, the odd ones) holds both families and two widths.
const std::vector<Shape>& calibration_shapes() {
  static const std::vector<Shape> list = {
      {"--model tiny", 8},
      {"--model small --dim 192 --heads 6", 4},
      {"--model llama-tiny", 8},
      {"--model gpt2-124m --layers 1 --seq 64 --vocab 4096", 2},
      {"--model small", 4},
      {"--model llama-small", 2},
  };
  return list;
}

// The technique settings they run, from the registrations (technique_settings.h):
//  - every mix of the settings that pick kernels (each precision with each attention kernel: each
//    kernel's curve in each storage type), mix c on every other shape from shape c on;
//  - then every other setting (recompute, accumulation, offload, sharding over the ranks: more or
//    fewer of the same calls, and the host's work, copies and collectives) on the first shape, the
//    narrowest: its kinds of call are what is new, and the wider shapes' steps cost the most time
//    (a calibration is measured under the sanitizers too, by the plan tests).
// Under mpirun every rank runs them at once, in lockstep as a data-parallel run keeps its ranks
// (each step ends in an all-reduce; a setup under mpirun is data parallel when no setting shards).
// Ranks that run unaligned share the cores differently: tiny's steps were predicted 10-15 points
// slower that way.
std::vector<std::string> calibration_workloads(int ranks) {
  const std::vector<TechniqueSetting> settings = technique_settings(calibration_shapes().front(), static_cast<std::size_t>(ranks));
  std::vector<std::string> mixes = {""};  // the kernel mixes: "" is every technique as the shape has it
  for (std::size_t i = 0; i < settings.size();) {
    if (!settings[i].picks_kernels) { ++i; continue; }
    std::vector<std::string> more;  // each mix so far, and each with one of this technique's settings
    std::size_t j = i;
    for (; j < settings.size() && settings[j].technique == settings[i].technique; ++j)
      for (const std::string& mix : mixes) more.push_back(mix.empty() ? settings[j].flags : mix + " " + settings[j].flags);
    mixes.insert(mixes.end(), more.begin(), more.end());
    i = j;
  }
  std::vector<std::string> list;
  const std::size_t n = calibration_shapes().size();
  for (std::size_t c = 0; c < mixes.size(); ++c)
    for (std::size_t s = c % 2; s < n; s += 2) list.push_back(workload_flags(calibration_shapes()[s], mixes[c]));
  for (const TechniqueSetting& setting : settings)
    if (!setting.picks_kernels) list.push_back(workload_flags(calibration_shapes().front(), setting.flags));
  return list;
}

namespace {

constexpr int kSteps = 3;  // the first is left out (warm-up: first touches, Adam's state)

// The workloads' setups among `ranks` ranks: under mpirun every rank runs each with the others (a
// data-parallel or sharded run over all of them).
std::vector<TrainingSetup> workload_setups(int ranks) {
  std::vector<TrainingSetup> list;
  for (const std::string& flags : calibration_workloads(ranks))
    list.push_back(cli::setup_from_train_flags(flags, DeviceKind::cpu, static_cast<std::size_t>(ranks)));
  return list;
}

// Keeps every entry of the steps after the first with its measured time.
class RecordingLog : public CostLog {
 public:
  std::vector<TimedCall> calls;
  std::vector<TimedCall> kinds;          // the device's kernels again, by kind of work: "gemm/f32"
  std::vector<TimedCall> micro_batches;  // per step: its time beyond the timed parts

  void kernel(const kernels::KernelCall& c, double s) override {
    add(key_of("", c), units_of(c), s);
    if (timing_) kinds.push_back({std::string(kernels::to_string(c.kind)) + "/" + kernels::to_string(c.dtype), units_of(c), s});
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
    timing_ = step >= 2;
  }
  void begin_optimizer(long) override {}
  void end_step(long step, double seconds) override {
    timing_ = false;  // what a run does after its steps (the meta run's own bookkeeping) is not a step's
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
    if (!timing_) return;
    calls.push_back({key, units, seconds});
    timed_ += seconds;
  }
  bool timing_ = false;  // within a step after the first, from its first micro-batch to its end
  double timed_ = 0;
  std::size_t micro_count_ = 0;
};

// The curves of every call the log kept (calibration.h): by kernel, by kind of work, copies,
// collectives; and the median residual of a micro-batch.
Calibration curves_of_log(const RecordingLog& log, int ranks) {
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

}  // namespace


std::string machine_description(int ranks) {
  const DeviceInfo cpu = query_cpu_device_info();
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  const char* threads = std::getenv("TRAINMEM_CPU_THREADS");
  std::ostringstream text;
  // The GEMM library and its kernels are part of the machine: another makes every product another speed.
  text << cpu.name << ", " << std::thread::hardware_concurrency() << " hardware threads, " << cpu.cpu_gemm << " ("
       << cpu.cpu_gemm_kernels << "), OPENBLAS_NUM_THREADS="
       << (blas ? blas : "-") << " TRAINMEM_CPU_THREADS=" << (threads ? threads : "-") << ", " << ranks
       << (ranks == 1 ? " rank" : " ranks");
  return text.str();
}

Calibration calibrate_this_machine(Communicator* world) {
  const int ranks = world ? world->world_size() : 1;
  RecordingLog log;
  for (const TrainingSetup& setup : workload_setups(ranks)) run_timed_on_cpu(setup, ranks > 1 ? world : nullptr, kSteps, &log);
  return curves_of_log(log, ranks);
}

Calibration expected_curves(int ranks) {
  RecordingLog log;
  for (const TrainingSetup& setup : workload_setups(ranks))
    estimator::run_on_meta(setup, 0, 0, estimator::PeakMoment::skip, &log);
  return curves_of_log(log, ranks);
}

namespace {

// Why a curve cannot give times ("" when it can): see calibration_problem.
std::string curve_problem(const TimeCurve& c) {
  if (c.knots.empty()) return "no knots";
  if (c.calls < c.knots.size()) return "more knots than calls";
  for (std::size_t i = 0; i < c.knots.size(); ++i) {
    const TimeCurve::Knot& k = c.knots[i];
    if (!std::isfinite(k.units) || k.units < 0) return "a knot's size is negative or not finite";
    if (!std::isfinite(k.seconds) || !(k.seconds > 0)) return "a knot takes no time, a negative one or one not finite";
    if (i > 0 && !(k.units > c.knots[i - 1].units)) return "knots out of order";
  }
  return "";
}

// The first curve of `expected` that `given` lacks or cannot use: "kernel matmul_forward/bf16: no knots".
std::optional<std::string> curves_problem(const char* what, const std::map<std::string, TimeCurve>& given,
                                          const std::map<std::string, TimeCurve>& expected) {
  for (const auto& [key, _] : expected) {
    const auto it = given.find(key);
    if (it == given.end()) return std::string(what) + " " + key + ": missing";
    if (const std::string why = curve_problem(it->second); !why.empty()) return std::string(what) + " " + key + ": " + why;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> calibration_problem(const Calibration& c, int ranks) {
  if (c.ranks != ranks) return "measured for " + std::to_string(c.ranks) + " rank(s), not " + std::to_string(ranks);
  if (c.machine != machine_description(ranks)) return "measured on " + c.machine + ", not " + machine_description(ranks);
  if (!std::isfinite(c.micro_batch_seconds) || c.micro_batch_seconds < 0) return "a micro-batch's residual is negative or not finite";
  const Calibration expected = expected_curves(ranks);
  if (auto why = curves_problem("kernel", c.kernels, expected.kernels)) return why;
  if (auto why = curves_problem("kind of work", c.classes, expected.classes)) return why;
  if (auto why = curves_problem("collective", c.collectives, expected.collectives)) return why;
  if (!expected.copy.knots.empty())
    if (const std::string why = curve_problem(c.copy); !why.empty()) return "copy: " + why;
  return std::nullopt;
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
  for (const nlohmann::json& k : j.at("knots")) c.knots.push_back({k.at(0).get<double>(), k.at(1).get<double>()});
  return c;  // its figures are checked by calibration_problem
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

std::optional<Calibration> read_calibration(const std::string& path, int ranks, std::string* problem) {
  auto unusable = [problem](const std::string& why) -> std::optional<Calibration> {
    if (problem) *problem = why;
    return std::nullopt;
  };
  std::ifstream in(path);
  if (!in) return unusable("");
  Calibration c;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (const int format = j.at("format").get<int>(); format != kFormat)
      return unusable("format " + std::to_string(format) + ", not " + std::to_string(kFormat));
    c.machine = j.at("machine").get<std::string>();
    c.ranks = j.at("ranks").get<int>();
    c.kernels = curves_of(j.at("kernels"));
    c.classes = curves_of(j.at("classes"));
    c.collectives = curves_of(j.at("collectives"));
    c.copy = curve_of(j.at("copy"));
    c.micro_batch_seconds = j.at("micro_batch_s").get<double>();
  } catch (const std::exception& e) {
    return unusable(std::string("damaged: ") + e.what());  // a partial or hand-edited file
  }
  if (auto why = calibration_problem(c, ranks)) return unusable(*why);
  return c;
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
