// trainmem plan: the fastest mix of techniques that fits, for a model, a device and a global
// batch (planner/plan_search.h), with the command that runs it.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli/flag_ranges.h"
#include "common/comm/communicator.h"
#include "common/device/device.h"
#include "common/util/byte_size.h"
#include "common/util/output_file.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/planner/calibration.h"
#include "suites/trainmem/planner/device_model.h"
#include "suites/trainmem/planner/plan_search.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

// The model flags a plan passes on to every candidate: those add_model_flags declares (the shape),
// but --batch, which is the plan's to choose.
std::vector<std::string> model_flag_names() {
  CLI::App probe;
  TrainFlags unused;
  add_model_flags(probe, unused);
  std::vector<std::string> names;
  for (const CLI::Option* option : probe.get_options())
    for (const std::string& name : option->get_lnames())
      if (name != "batch" && name != "help") names.push_back("--" + name);
  return names;
}

struct PlanFlags {
  TrainFlags train;
  std::string model_flags;
  std::string gpu;
  std::size_t world_size = 1;
  bool world_size_given = false;
  bool batch_given = false, global_batch_given = false;
  std::size_t gpus_per_node = 8;
  std::size_t global_batch = 0;
  std::size_t top = 10;
  bool show_all = false;
  bool calibrate = false;
  bool json_to_stdout = false;
  std::string json_file;
};

std::string gib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
  return text;
}

std::string command_of(const PlanFlags& f, const planner::Candidate& c, std::size_t world_size) {
  std::string cmd = world_size > 1 ? "mpirun -np " + std::to_string(world_size) + " trainmem train" : "trainmem train";
  cmd += " " + f.model_flags + " " + c.flags;
  if (f.gpu.empty()) cmd += " --device cpu";
  if (!f.train.device.device_memory.empty()) cmd += " --device-memory " + f.train.device.device_memory;
  return cmd;
}

// Whether two candidates predict the same step time and the same memory.
bool same_figures(const planner::Candidate& a, const planner::Candidate& b) {
  return a.time.seconds == b.time.seconds && a.peak_reserved == b.peak_reserved && a.peak_allocated == b.peak_allocated;
}

// The "--flag value" settings of `flags` that `reference` does not have: "--precision fp16".
std::string flags_not_in(const std::string& flags, const std::string& reference) {
  auto settings = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream words(text);
    for (std::string w; words >> w;) {
      if (w.rfind("--", 0) == 0 || out.empty()) out.push_back(w);
      else out.back() += " " + w;
    }
    return out;
  };
  const std::vector<std::string> ref = settings(reference);
  std::string diff;
  for (const std::string& s : settings(flags))
    if (std::find(ref.begin(), ref.end(), s) == ref.end()) diff += (diff.empty() ? "" : " ") + s;
  return diff;
}

// Tokens per optimizer step over all ranks.
double tokens_per_step(const planner::Candidate& c, std::size_t world_size) {
  return static_cast<double>(c.setup.batch * c.setup.accum * c.setup.seq() * world_size);
}

nlohmann::json candidate_json(const PlanFlags& f, const planner::Candidate& c, std::size_t world_size, bool chosen) {
  const double tokens = tokens_per_step(c, world_size);
  nlohmann::json j = {{"command", command_of(f, c, world_size)},
                      {"flags", c.flags},
                      {"describe", c.describe},
                      {"fits", c.fits},
                      {"micro_batch", c.setup.batch},
                      {"accumulation", c.setup.accum},
                      {"peak_allocated_bytes", c.peak_allocated},
                      {"peak_reserved_bytes", c.peak_reserved}};
  if (c.fits) {
    j["predicted_step_ms"] = c.time.seconds * 1e3;
    j["predicted_tokens_per_s"] = tokens / c.time.seconds;
    j["time_ms"] = {{"compute", c.time.compute * 1e3},       {"memory", c.time.memory * 1e3},
                    {"communication", c.time.communication * 1e3}, {"exposed_communication", c.time.exposed_communication * 1e3},
                    {"offload", c.time.offload * 1e3},       {"host", c.time.overhead * 1e3}};
    j["chosen"] = chosen;
  } else {
    j["reason"] = c.reason;
  }
  return j;
}

int run_plan(PlanFlags& f) {
  if (f.batch_given)
    throw std::invalid_argument("--batch: plan chooses the micro-batch; give --global-batch (sequences per step)");
  // Checked here, not by CLI11's required(): a mistyped flag is then named once, as the typo.
  if (!f.global_batch_given)
    throw std::invalid_argument("plan needs --global-batch N: the sequences per optimizer step over all ranks");
  f.train.device.to_options();
  if (launched_by_mpirun()) {
    if (f.world_size_given && f.world_size != launched_world_size())
      throw std::invalid_argument("--world-size " + std::to_string(f.world_size) + " but mpirun started " +
                                  std::to_string(launched_world_size()) + " ranks: give one or the other");
    f.world_size = launched_world_size();
  }
  planner::PlanQuestion q;
  q.model_flags = f.model_flags;
  q.global_batch = f.global_batch;
  q.world_size = f.world_size;
  planner::check_global_batch(q);  // before a calibration: a wrong question costs nothing
  std::unique_ptr<planner::DeviceModel> model;
  std::string device_name, device_description;
  if (!f.gpu.empty()) {
    if (f.train.device.device == "cpu") throw std::invalid_argument("--gpu names a GPU: drop --device cpu (or drop --gpu)");
    const estimator::GpuSpec& g = estimator::find_gpu(f.gpu);
    q.backend = DeviceKind::cuda;
    q.capacity = f.train.device.device_memory.empty() ? g.usable_bytes() : parse_device_memory(f.train.device.device_memory);
    model = planner::gpu_model(g, static_cast<int>(f.gpus_per_node));
    device_name = g.name;
    device_description = g.description;
  } else {
    if (f.train.device.device != "cpu")
      throw std::invalid_argument("plan needs the device to plan for: --gpu NAME (a card of the catalog) or --device cpu");
    q.backend = DeviceKind::cpu;
    q.capacity = f.train.device.device_memory.empty() ? kDefaultDeviceMemory : parse_device_memory(f.train.device.device_memory);
    // This machine's speed: the cached calibration for this many ranks, or measured now (every
    // rank of mpirun at once: they share the machine as the planned run will).
    const int ranks = static_cast<int>(launched_by_mpirun() ? launched_world_size() : 1);
    const std::string cache = planner::calibration_cache_path(static_cast<int>(f.world_size));
    std::optional<planner::Calibration> cal = f.calibrate ? std::nullopt : planner::read_calibration(cache);
    if (!cal) {
      if (ranks != static_cast<int>(f.world_size))
        throw std::invalid_argument("no calibration of this machine for " + std::to_string(f.world_size) +
                                    " ranks yet: run 'mpirun -np " + std::to_string(f.world_size) +
                                    " trainmem plan --device cpu ...' once (it measures, then plans)");
      DeviceOptions options;
      options.choice = "cpu";
      auto device = Device::open(options);
      std::unique_ptr<Communicator> world = ranks > 1 ? make_communicator(*device) : nullptr;
      if (launched_rank() == 0) std::cerr << "calibrating this machine (" << ranks << " rank(s)), once: " << cache << "\n";
      cal = planner::calibrate_this_machine(world.get());
      if (launched_rank() == 0) planner::write_calibration(*cal, cache);
    }
    model = planner::cpu_model(*cal);
    device_name = "cpu";
    device_description = cal->machine;
  }
  if (launched_rank() != 0) return 0;
  const planner::Plan plan = planner::make_plan(q, *model);

  nlohmann::json j = {{"command", "plan"},
                      {"model", {{"name", f.train.model}, {"flags", f.model_flags}}},
                      {"device", {{"name", device_name}, {"description", device_description},
                                  {"capacity_bytes", q.capacity}, {"kind", f.gpu.empty() ? "cpu" : "gpu"},
                                  {"model", model->describe()}}},
                      {"world_size", q.world_size}, {"gpus_per_node", f.gpus_per_node},
                      {"global_batch", q.global_batch},
                      {"search", {{"configurations", plan.mixes}, {"meta_runs", plan.meta_runs}, {"seconds", plan.seconds}}}};
  j["candidates"] = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.fitting.size(); ++i)
    j["candidates"].push_back(candidate_json(f, plan.fitting[i], q.world_size, i == 0));
  j["not_fitting"] = nlohmann::json::array();
  for (const planner::Candidate& c : plan.not_fitting) j["not_fitting"].push_back(candidate_json(f, c, q.world_size, false));
  if (!plan.fitting.empty()) j["seq"] = plan.fitting.front().setup.seq();
  if (!f.json_file.empty()) write_output_file(f.json_file, j.dump(1) + "\n", "--json");
  if (f.json_to_stdout) {
    std::cout << j.dump(2) << '\n';
    return plan.fitting.empty() ? 1 : 0;
  }

  std::cout << "plan: " << f.model_flags << ", global batch " << q.global_batch << " over " << q.world_size
            << (q.world_size == 1 ? " rank" : " ranks") << " of " << device_name << " (" << gib(q.capacity) << " each)\n"
            << "device model: " << model->describe() << "\n"
            << "searched " << plan.mixes << " mixes with " << plan.meta_runs << " meta runs in " << plan.seconds << " s; "
            << plan.fitting.size() << " fit, " << plan.not_fitting.size() << " do not\n\n";
  if (plan.fitting.empty()) {
    std::cout << "nothing fits: more ranks (--world-size), a smaller --global-batch or --seq, or a larger device\n";
    return 1;
  }
  // One row per outcome: candidates with the same time and memory as the row above (bf16 and fp16
  // on a card as fast in both, flash and cuDNN while they share one efficiency) are named under it.
  // What the techniques cost in time, per row: the kernels (recompute adds to them), the
  // communication the kernels wait for (sharding), the host's part (offload), in ms of a step.
  std::printf("%4s %10s %12s %12s %12s %9s %9s %9s  %s\n", "rank", "step ms", "tokens/s", "reserved", "allocated", "kernels",
              "comm", "offload", "flags");
  const std::size_t rows = f.show_all ? plan.fitting.size() : f.top;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < plan.fitting.size() && shown < rows;) {
    const planner::Candidate& c = plan.fitting[i];
    std::size_t same = i + 1;
    std::vector<std::string> alternatives;
    for (; same < plan.fitting.size() && same_figures(plan.fitting[same], c); ++same)
      alternatives.push_back(flags_not_in(plan.fitting[same].flags, c.flags));
    ++shown;
    std::printf("%4zu %10.2f %12.0f %12s %12s %9.2f %9.2f %9.2f  %s\n", shown, c.time.seconds * 1e3,
                tokens_per_step(c, q.world_size) / c.time.seconds, gib(c.peak_reserved).c_str(), gib(c.peak_allocated).c_str(),
                (c.time.compute + c.time.memory) * 1e3, c.time.exposed_communication * 1e3, c.time.offload * 1e3,
                c.flags.c_str());
    if (!alternatives.empty()) {
      std::string line;
      for (const std::string& a : alternatives) line += (line.empty() ? "" : "; ") + a;
      std::printf("%86s  the same figures with: %s\n", "", line.c_str());
    }
    i = same;
  }
  const planner::Candidate& best = plan.fitting.front();
  std::printf("(kernels: the kernels' time, recompute included; comm: the communication they wait for; offload: "
              "PCIe copies and the host's optimizer; ms a step)\n");
  std::printf("\nbest: %.2f ms per step (compute %.2f, memory-bound %.2f, communication %.2f of which exposed %.2f, "
              "offload %.2f, host %.2f)\n  %s\n",
              best.time.seconds * 1e3, best.time.compute * 1e3, best.time.memory * 1e3, best.time.communication * 1e3,
              best.time.exposed_communication * 1e3, best.time.offload * 1e3, best.time.overhead * 1e3,
              command_of(f, best, q.world_size).c_str());
  if (f.show_all) {
    std::cout << "\ndo not fit:\n";
    for (const planner::Candidate& c : plan.not_fitting) std::cout << "  " << c.flags << ": " << c.reason << "\n";
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "The fastest mix of techniques that fits: memory exact (meta runs), time from the runs' own kernels");
  add_device_flags(*cmd, flags->train.device);
  add_model_flags(*cmd, flags->train);
  add_gpu_flag(*cmd, flags->gpu, "Plan for this card");
  cmd->add_option("--world-size", flags->world_size, "Ranks of data parallelism (GPUs) to plan for")
      ->capture_default_str()
      ->check(whole_number(1, FlagLimits::max_world_size));
  cmd->add_option("--gpus-per-node", flags->gpus_per_node, "GPUs in one node (collectives beyond it use the network)")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  cmd->add_option("--global-batch", flags->global_batch, "Sequences per optimizer step over all ranks (kept by every candidate)")
      ->check(whole_number(1, std::size_t{1} << 24));
  cmd->add_option("--top", flags->top, "Rows to print (candidates with the same figures share one)")->capture_default_str()->check(whole_number(1, 1 << 20));
  cmd->add_flag("--show-all", flags->show_all, "Print every candidate, and those that do not fit with the reason");
  cmd->add_flag("--calibrate", flags->calibrate, "--device cpu: measure this machine again (else the cached calibration)");
  cmd->add_option("--json", flags->json_file, "Print JSON instead of the table (--json FILE: write it there too)")
      ->expected(0, 1)
      ->type_name("[FILE]");
  cmd->callback([flags, cmd, &run] {
    flags->batch_given = cmd->count("--batch") > 0;
    flags->global_batch_given = cmd->count("--global-batch") > 0;
    flags->world_size_given = cmd->count("--world-size") > 0;
    flags->json_to_stdout = cmd->count("--json") > 0 && flags->json_file.empty();
    flags->model_flags.clear();
    for (const std::string& name : model_flag_names()) {
      const CLI::Option* option = cmd->get_option_no_throw(name);
      if (option == nullptr || option->count() == 0) continue;
      if (!flags->model_flags.empty()) flags->model_flags += ' ';
      flags->model_flags += name + " " + option->results().front();
    }
    if (flags->model_flags.empty()) flags->model_flags = "--model tiny";
    run = [flags] { return run_plan(*flags); };
  });
}

}  // namespace trainmem::cli
