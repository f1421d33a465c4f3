// trainmem info: the device a run would use, and its allocator's policy (the constants every
// memory figure is computed under). Text by default, JSON with --json (the same "device" and
// "allocator" objects every trainmem result carries). With a model's flags (--model, --arch, the
// shape flags, as train takes them), also that model: its family, shape and parameters.
//
//   trainmem info --model llama3-8b
//   ...
//   model llama3-8b (llama)
//     parameters          8030261248
//     shape               L=32 H=32 Hkv=8 C=4096 F=14336 T=8192 V=128256 (padded to 128256)
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/model/parameter_table.h"
#include "common/results/result_json.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

struct InfoFlags {
  DeviceFlags device;
  TrainFlags model;  // the model's flags only (add_model_flags)
  bool json = false;
  bool list = false;  // --list: the presets
  bool model_given() const {
    const TrainFlags& m = model;
    return !m.model.empty() || !m.hf_config.empty() || m.arch || m.layers || m.heads || m.dim || m.seq || m.vocab || m.kv_heads || m.ffn_dim ||
           m.head_dim || m.tied_head || m.qkv_bias || m.rope_theta || m.norm_eps || m.experts || m.experts_per_token ||
           m.expert_ffn_dim || m.shared_expert_ffn_dim || m.normalize_top_k || m.router_aux_loss;
  }
};

// " (354823168 as Hugging Face counts them, without the vocabulary's 48128 padding elements)"
std::string padding_note(const ModelConfig& c) {
  const std::size_t padding = ParameterTable(c).padding_numel();
  if (padding == 0) return {};
  return " (" + std::to_string(c.num_parameters() - padding) + " as Hugging Face counts them, without the " +
         std::to_string(padding) + " of the vocabulary's padding rows)";
}

void print_model(const ModelConfig& c) {
  std::cout << "model " << c.label() << "\n"
            << "  " << std::left << std::setw(20) << "parameters" << c.num_parameters() << padding_note(c) << '\n'
            << "  " << std::setw(20) << "shape" << c.shape_summary() << '\n';
  if (c.arch == Arch::llama) {
    std::cout << "  " << std::setw(20) << "constants" << "rope theta " << c.rope.theta;
    if (c.rope.scaled())
      std::cout << " (llama3 scaling: factor " << c.rope.factor << ", low/high frequency factors " << c.rope.low_freq_factor
                << "/" << c.rope.high_freq_factor << ", original context " << c.rope.original_context << ")";
    std::cout << ", RMSNorm eps " << c.norm_eps << '\n';
  }
}

void print_text(const Device& device, const AllocatorConfig& config) {
  const DeviceInfo& d = device.info();
  auto row = [](const char* name, const std::string& value) {
    if (!value.empty()) std::cout << "  " << std::left << std::setw(20) << name << value << '\n';
  };
  std::cout << "trainmem " << trainmem_version()
            << " (CUDA compiled: " << (cuda_compiled() ? "yes" : "no") << ")\n"
            << "device " << d.label() << '\n';
  row("name", d.name);
  if (d.kind == DeviceKind::cuda) {
    row("memory", format_bytes(d.total_memory_bytes));
    row("SMs", std::to_string(d.sm_count));
    row("compute capability", d.compute_capability);
    row("driver / runtime", d.driver_version + " / " + d.runtime_version);
    row("cuDNN", d.cudnn_version);
    row("NCCL", d.nccl_version);
    row("host CPU", d.cpu_model + " (" + std::to_string(d.cpu_cores) + " cores)");
  } else {
    row("cores", std::to_string(d.cpu_cores));
    row("host memory", format_bytes(d.total_memory_bytes));
    row("GEMM", d.cpu_gemm + " (" + d.cpu_gemm_kernels + ")");
  }
  row("device memory", format_bytes(d.device_memory_bytes) +
                           (d.kind == DeviceKind::cpu ? " (the emulated card: --device-memory)" : ""));
  std::cout << "allocator " << config.to_string() << '\n';
  row("rounding", "requests rounded up to " + std::to_string(kMinBlockSize) + " B");
  row("small pool", "requests <= " + format_bytes(kSmallSize) + ", carved from " + format_bytes(kSmallBuffer) + " segments");
  row("large pool", "requests < " + format_bytes(kMinLargeAlloc) + " share " + format_bytes(kLargeBuffer) +
                        " segments; larger ones are rounded up to " + format_bytes(kRoundLarge));
  row("max_split_size", config.max_split_size == kNoMaxSplit ? "unlimited" : format_bytes(config.max_split_size));
  row("backend", config.backend == AllocatorConfig::Backend::caching
                     ? "caching (freed blocks are kept for reuse)"
                     : "raw (one device allocation per request)");
}

// info --list: every preset, one a line (or a JSON array of their to_json), from the one table of
// presets (model_config.cpp); the counts are the parameter table's.
int list_presets(bool json) {
  if (json) {
    nlohmann::json presets = nlohmann::json::array();
    for (const std::string& name : model_preset_names()) presets.push_back(model_preset(name).to_json());
    std::cout << presets.dump(2) << '\n';
    return 0;
  }
  std::cout << std::left << std::setw(18) << "preset" << std::setw(8) << "family" << std::right << std::setw(16)
            << "parameters" << "  shape\n";
  for (const std::string& name : model_preset_names()) {
    const ModelConfig c = model_preset(name);
    std::cout << std::left << std::setw(18) << name << std::setw(8) << to_string(c.arch) << std::right << std::setw(16)
              << c.num_parameters() << "  " << c.shape_summary() << '\n';
  }
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, Command& run) {
  // The flags live as long as the callback below, which keeps this pointer.
  auto flags = std::make_shared<InfoFlags>();
  CLI::App* info = app.add_subcommand("info", "Show the device a run would use and its allocator configuration");
  add_device_flags(*info, flags->device);
  add_model_flags(*info, flags->model);
  info->add_flag("--json", flags->json, "Print JSON instead of text");
  info->add_flag("--list", flags->list, "List every model preset with its family, parameter count and shape (nothing else)");
  info->callback([flags, &run] {
    run = [flags] {
      if (flags->list) return list_presets(flags->json);
      // The model first: a bad model flag is an input error before anything is printed.
      std::optional<ModelConfig> model;
      if (flags->model_given()) model = model_config(flags->model);
      DeviceOptions options = flags->device.to_options();
      options.backed = false;  // info allocates nothing, so a cpu budget needs no real memory
      auto device = Device::open(options, &std::cerr);  // says on stderr which device was picked
      if (flags->json) {
        nlohmann::json j = run_context_json(device->info(), options.allocator);
        if (model) j["model"] = model->to_json();
        std::cout << j.dump(2) << '\n';
      } else {
        print_text(*device, options.allocator);
        if (model) print_model(*model);
      }
      return 0;
    };
  });
}

}  // namespace trainmem::cli
