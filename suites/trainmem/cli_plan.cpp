// trainmem plan: the fastest mix of techniques that fits, for a model, a device and a global
// batch (planner/plan_search.h), with the command that runs it.
//
// Every argument is checked before any work (the calibration, the search): a wrong question costs
// nothing. Under mpirun the ranks first agree on their settings (common/comm/rank_agreement.h),
// and rank 0's calibration cache decides for every rank whether they measure the machine.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/cli/flag_ranges.h"
#include "common/cli/output_flags.h"
#include "common/comm/communicator.h"
#include "common/comm/rank_agreement.h"
#include "common/device/device.h"
#include "common/util/byte_size.h"
#include "common/util/output_file.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/command_settings.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/planner/calibration.h"
#include "suites/trainmem/planner/device_model.h"
#include "suites/trainmem/planner/plan_search.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

// --json with no FILE (or "-"): print the JSON to standard output instead of the table.
constexpr const char* kJsonToStdout = "-";

struct PlanFlags {
  TrainFlags train;
  std::vector<std::string> run_args;  // what every candidate runs with, as train's arguments (the model, the allocator)
  std::string gpu;
  std::size_t world_size = 1;
  bool world_size_given = false;
  bool batch_given = false, global_batch_given = false;
  std::size_t gpus_per_node = 8;
  std::size_t global_batch = 0;
  std::size_t top = 10;
  bool show_all = false;
  bool calibrate = false;
  std::string json;  // kJsonToStdout: JSON instead of the table; else the file to write it to
  bool json_given = false;
  Settings settings;  // what the ranks of mpirun compare first
};

// One argument as a POSIX shell reads it back: as it is when it holds only characters no shell
// treats specially, else in single quotes (a ' inside as '\'').
std::string shell_quoted(const std::string& arg) {
  const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::string_view("-_./:=,+@%").find(ch) != std::string_view::npos;
  });
  if (plain) return arg;
  std::string quoted = "'";
  for (const char ch : arg) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

std::string shell_words(const std::vector<std::string>& args) {
  std::string text;
  for (const std::string& a : args) {
    if (!text.empty()) text += ' ';
    text += shell_quoted(a);
  }
  return text;
}

std::string command_of(const PlanFlags& f, const planner::Candidate& c, std::size_t world_size) {
  std::string cmd = world_size > 1 ? "mpirun -np " + std::to_string(world_size) + " trainmem train" : "trainmem train";
  cmd += " " + shell_words(f.run_args) + " " + c.flags;
  if (f.gpu.empty()) cmd += " --device cpu";
  if (!f.train.device.device_memory.empty()) cmd += " --device-memory " + shell_quoted(f.train.device.device_memory);
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

// The question, every argument checked (exit 2 with what to change): nothing has run yet.
planner::PlanQuestion checked_question(PlanFlags& f) {
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
  q.run_args = f.run_args;
  q.global_batch = f.global_batch;
  q.world_size = f.world_size;
  if (!f.gpu.empty()) {
    if (f.train.device.device == "cpu") throw std::invalid_argument("--gpu names a GPU: drop --device cpu (or drop --gpu)");
    const estimator::GpuSpec& g = estimator::find_gpu(f.gpu);
    q.backend = DeviceKind::cuda;
    q.capacity = f.train.device.device_memory.empty() ? g.usable_bytes() : parse_device_memory(f.train.device.device_memory);
  } else {
    if (f.train.device.device != "cpu")
      throw std::invalid_argument("plan needs the device to plan for: --gpu NAME (a card of the catalog) or --device cpu");
    q.backend = DeviceKind::cpu;
    q.capacity = f.train.device.device_memory.empty() ? kDefaultDeviceMemory : parse_device_memory(f.train.device.device_memory);
  }
  planner::check_question(q);  // the global batch's shares, the model
  if (f.json_given && f.json.empty())
    throw std::invalid_argument("--json: needs the path of the file to write; an empty path names no file (--json alone "
                                "prints to standard output)");
  if (!f.json.empty() && f.json != kJsonToStdout && launched_rank() == 0) check_output_path(f.json, "--json");
  return q;
}

// This machine's speed for `world_size` ranks: the cached calibration, or measured now by every
// rank of mpirun at once (they share the machine as the planned run will). Rank 0's cache decides
// for every rank, so that all measure or none do (a rank measuring alone would wait for the others
// forever). Every rank calls it; only rank 0's answer is used.
planner::Calibration this_machines_calibration(const PlanFlags& f, std::size_t world_size) {
  const bool rank0 = launched_rank() == 0;
  const int ranks = static_cast<int>(launched_by_mpirun() ? launched_world_size() : 1);
  const std::string cache = planner::calibration_cache_path(static_cast<int>(world_size));
  std::optional<planner::Calibration> cal;
  std::string problem;
  if (rank0 && !f.calibrate) cal = planner::read_calibration(cache, static_cast<int>(world_size), &problem);
  if (rank0 && !problem.empty())
    std::cerr << "trainmem: the cached calibration " << cache << " cannot serve (" << problem << "): measuring again\n";
  if (!cal && ranks != static_cast<int>(world_size))
    throw std::invalid_argument("no calibration of this machine for " + std::to_string(world_size) +
                                " ranks yet: run 'mpirun -np " + std::to_string(world_size) +
                                " trainmem plan --device cpu ...' once (it measures, then plans)");
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> world;
  if (ranks > 1) {
    DeviceOptions options;
    options.choice = "cpu";
    device = Device::open(options);
    world = make_communicator(*device);
  }
  const bool measure = world ? world->all_reduce_max(rank0 && !cal ? 1.0 : 0.0) > 0 : !cal;
  if (!measure) return rank0 ? *cal : planner::Calibration{};
  if (rank0) std::cerr << "calibrating this machine (" << ranks << " rank(s)), once: " << cache << "\n";
  planner::Calibration measured = planner::calibrate_this_machine(world.get());
  if (rank0) {
    try {
      planner::write_calibration(measured, cache);
    } catch (const OutputFileError& e) {
      // The plan is as good without the file: only the next plan measures again.
      std::cerr << "trainmem: the calibration was not saved (" << e.what()
                << "): the next plan measures again; set TRAINMEM_CACHE_DIR to a folder you can write\n";
    }
  }
  return measured;
}

// --show-all's list of the mixes that do not fit, each with why and what it held when it failed.
void print_not_fitting(const planner::Plan& plan, const planner::PlanQuestion& q) {
  std::printf("\ndo not fit (reserved and allocated when the request failed, the request included; each rank has %s):\n",
              format_bytes(q.capacity).c_str());
  for (const planner::Candidate& c : plan.not_fitting)
    std::printf("  %s: %s; %s reserved, %s allocated\n", c.flags.c_str(), c.reason.c_str(),
                format_bytes(c.peak_reserved).c_str(), format_bytes(c.peak_allocated).c_str());
}

int run_plan(PlanFlags& f) {
  require_same_settings_on_every_rank(f.settings);  // under mpirun: before any collective
  const planner::PlanQuestion q = checked_question(f);
  std::unique_ptr<planner::DeviceModel> model;
  std::string device_name, device_description;
  if (!f.gpu.empty()) {
    const estimator::GpuSpec& g = estimator::find_gpu(f.gpu);
    model = planner::gpu_model(g, static_cast<int>(f.gpus_per_node));
    device_name = g.name;
    device_description = g.description;
  } else {
    planner::Calibration cal = this_machines_calibration(f, q.world_size);
    device_name = "cpu";
    device_description = cal.machine;
    model = planner::cpu_model(std::move(cal));
  }
  if (launched_rank() != 0) return 0;
  const planner::Plan plan = planner::make_plan(q, *model);
  const std::string run_words = shell_words(f.run_args);

  nlohmann::json j = {{"command", "plan"},
                      {"model", {{"name", f.train.model}, {"flags", run_words}}},
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
  if (!f.json.empty() && f.json != kJsonToStdout) write_output_file(f.json, j.dump(1) + "\n", "--json");
  if (f.json == kJsonToStdout) {
    std::cout << j.dump(2) << '\n';
    return plan.fitting.empty() ? 1 : 0;
  }

  // The table goes through printf alone: mixed with std::cout its lines came out of order.
  std::printf("plan: %s, global batch %zu over %zu %s of %s (%s each)\ndevice model: %s\n"
              "searched %zu mixes with %zu meta runs in %g s; %zu fit, %zu do not\n\n",
              run_words.c_str(), q.global_batch, q.world_size, q.world_size == 1 ? "rank" : "ranks", device_name.c_str(),
              format_bytes(q.capacity).c_str(), model->describe().c_str(), plan.mixes, plan.meta_runs, plan.seconds,
              plan.fitting.size(), plan.not_fitting.size());
  if (plan.fitting.empty()) {
    std::printf("nothing fits: more ranks (--world-size), a smaller --global-batch or --seq, or a larger device\n");
    if (f.show_all) print_not_fitting(plan, q);
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
                tokens_per_step(c, q.world_size) / c.time.seconds, format_bytes(c.peak_reserved).c_str(),
                format_bytes(c.peak_allocated).c_str(), (c.time.compute + c.time.memory) * 1e3,
                c.time.exposed_communication * 1e3, c.time.offload * 1e3, c.flags.c_str());
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
  if (f.show_all) print_not_fitting(plan, q);
  return 0;
}

// plan's --device: only cpu (this machine, calibrated); a card is --gpu's. So --help offers no
// device plan refuses, and a wrong one says where to go.
void add_plan_device_flags(CLI::App& cmd, DeviceFlags& device) {
  cmd.add_option("--device", device.device,
                 "cpu: plan for this machine's CPU, calibrated (under mpirun: its ranks); for a GPU give --gpu NAME")
      ->type_name("cpu")
      ->check(CLI::Validator(
          [](const std::string& value) {
            return value == "cpu" ? std::string()
                                  : "--device takes cpu for plan (this machine), not " + value + "; for a card of the catalog give --gpu NAME";
          },
          ""));
  add_memory_flags(cmd, device);
}

}  // namespace

void add_plan_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "The fastest mix of techniques that fits: memory exact (meta runs), time from the runs' own kernels");
  add_plan_device_flags(*cmd, flags->train.device);
  add_model_flags(*cmd, flags->train);
  // --batch is the plan's to choose: kept out of --help, and refused saying so (run_plan).
  cmd->get_option("--batch")->group("");
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
  add_output_flag(*cmd, "--json", flags->json,
                  "--json alone (or --json -): print JSON instead of the table; --json FILE: write it there, and "
                  "print the table")
      ->expected(0, 1)
      ->default_str(kJsonToStdout)
      ->type_name("[FILE]");
  cmd->callback([flags, cmd, &run] {
    flags->batch_given = cmd->count("--batch") > 0;
    flags->global_batch_given = cmd->count("--global-batch") > 0;
    flags->world_size_given = cmd->count("--world-size") > 0;
    flags->json_given = cmd->count("--json") > 0;
    // Every model flag given, then the allocator's settings: each flag and its value one argument
    // (a value is never split into words: a model name is a name).
    CLI::App model_flags;
    TrainFlags unused;
    add_model_flags(model_flags, unused);
    flags->run_args.clear();
    for (const CLI::Option* declared : model_flags.get_options()) {
      if (declared->get_lnames().empty() || declared->check_lname("batch")) continue;
      const CLI::Option* option = cmd->get_option_no_throw("--" + declared->get_lnames().front());
      if (option == nullptr || option->count() == 0) continue;
      flags->run_args.insert(flags->run_args.end(), {"--" + declared->get_lnames().front(), option->results().front()});
    }
    if (flags->run_args.empty()) flags->run_args = {"--model", "tiny"};
    if (cmd->count("--allocator-config") > 0)
      flags->run_args.insert(flags->run_args.end(), {"--allocator-config", flags->train.device.allocator_config});
    flags->settings = command_settings(*cmd);
    run = [flags] { return run_plan(*flags); };
  });
}

}  // namespace trainmem::cli
