#include "suites/trainmem/estimator/estimate_report.h"

#include <cstdio>
#include <optional>

#include "common/util/byte_size.h"
#include "common/model/precision.h"
#include "suites/lazy_loading/lazy_loading_technique.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::estimator {

namespace {

// The suite formula for a category, where one exists.
std::optional<std::size_t> formula_for(const FormulaBytes& f, MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return f.parameters;
    case MemoryCategory::gradients: return f.gradients;
    case MemoryCategory::optimizer_state: return f.optimizer_state;
    case MemoryCategory::activations: return f.activations;
    case MemoryCategory::data: return f.data;
    default: return std::nullopt;
  }
}

std::string fmt(std::size_t bytes) { return format_bytes(static_cast<std::uint64_t>(bytes)); }

nlohmann::json setup_json(const TrainingSetup& s) {
  nlohmann::json j = {{"model", s.model.to_json()},
                      {"batch", s.batch},
                      {"seq", s.seq()},
                      {"tokens_per_step", s.batch * s.seq() * s.accum},
                      {"eager_dataset_tokens", s.option<lazy_loading::LoaderChoice>().loader == lazy_loading::Loader::eager
                                                   ? s.dataset_size()
                                                   : 0},
                      {"backend", to_string(s.backend)},  // whose allocation pattern the meta run followed
                      {"allocator_config", s.allocator.to_string()}};
  for (const Technique* t : registered_techniques()) t->add_config_json(s, j);  // as `trainmem train --json` has them
  return j;
}

}  // namespace

std::string bytes_and_gb(std::size_t bytes) {
  char gb[32];
  std::snprintf(gb, sizeof gb, " (%.2f GB)", static_cast<double>(bytes) / 1e9);
  return fmt(bytes) + gb;
}

std::string estimate_table(const MemoryEstimate& e, const EstimateTarget& target) {
  const TrainingSetup& s = e.setup;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "model %s: %zu parameters (L=%zu H=%zu C=%zu T=%zu V=%zu, padded to Vp=%zu)\n",
                s.model.name.c_str(), e.num_parameters, s.model.layers, s.model.heads, s.model.dim, s.model.seq,
                s.model.vocab, padded_vocab(s.model.vocab));
  out += line;
  std::snprintf(line, sizeof line, "setup: %s, allocator %s\n", describe_setup(s).c_str(), s.allocator.to_string().c_str());
  out += line;
  out += "measured: the run on the meta device, with the ";
  out += s.backend == DeviceKind::cuda ? "CUDA" : "CPU";
  out += " backend's allocation pattern\n";
  if (s.attention == AttentionKind::cudnn)
    out += "  (cuDNN sizes its attention workspaces on the GPU at run time: not counted here)\n";
  const BytesPerParameter bpp = bytes_per_parameter(s.precision);
  std::snprintf(line, sizeof line, "model states: %zu bytes per parameter (parameters %zu + gradients %zu + optimizer %zu)\n\n",
                bpp.total(), bpp.parameters, bpp.gradients, bpp.optimizer_state);
  out += line;

  std::snprintf(line, sizeof line, "%-16s %14s %14s %14s\n", "category", "peak in step", "at the peak", "suite formula");
  out += line;
  for (MemoryCategory c : kAllMemoryCategories) {
    if (c == MemoryCategory::other) continue;
    const auto formula = formula_for(e.formulas, c);
    std::snprintf(line, sizeof line, "%-16s %14s %14s %14s\n", std::string(to_string(c)).c_str(),
                  fmt(e.category_peak(c)).c_str(), fmt(e.run.at_peak[index_of(c)]).c_str(),
                  formula ? fmt(*formula).c_str() : "-");
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %14s %14s\n", "peak allocated", "", fmt(e.peak_allocated()).c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-16s %14s %14s   (%lld segments at the end)\n\n", "peak reserved", "",
                fmt(e.peak_reserved()).c_str(), static_cast<long long>(e.run.stats.segment[0].current));
  out += line;
  std::snprintf(line, sizeof line, "the peak: %s of step %ld, when %s is allocated\n", e.run.peak_phase.c_str(),
                e.run.peak_step, e.run.peak_tensor.c_str());
  out += line;

  if (e.formulas.sharded) {
    const ShardedFormulas& f = *e.formulas.sharded;
    out += "\nthe figures above are one rank's: " + f.scheme + "; its model states:\n";
    std::snprintf(line, sizeof line, "%-16s %14s %14s %14s\n", "", "measured", "exact formula", "ZeRO paper");
    out += line;
    // Decimal GB, the paper's unit, to two decimals.
    auto row = [&](const char* name, std::size_t measured, std::size_t exact, double paper) {
      std::snprintf(line, sizeof line, "%-16s %11.2f GB %11.2f GB %11.2f GB\n", name, static_cast<double>(measured) / 1e9,
                    static_cast<double>(exact) / 1e9, paper / 1e9);
      out += line;
    };
    // Measured as the formula counts: each category's peak, or what the rank holds after the steps.
    auto measured = [&](MemoryCategory c) { return f.peaks ? e.category_peak(c) : e.run.after_steps[index_of(c)]; };
    const std::size_t p = measured(MemoryCategory::parameters), g = measured(MemoryCategory::gradients),
                      o = measured(MemoryCategory::optimizer_state);
    row("parameters", p, f.parameters, f.paper.parameters);
    row("gradients", g, f.gradients, f.paper.gradients);
    row("optimizer_state", o, f.optimizer_state, f.paper.optimizer_state);
    row("model states", p + g + o, f.model_states(), f.paper.device_total());
    out += f.peaks ? "(each category's peak in the step; measured on meta)\n"
                   : "(what the rank holds after a step, as the paper counts; measured on meta)\n";
    if (f.host) out += "host (offload)   " + fmt(f.host) + "\n";
  }

  if (target.usable_bytes) {
    std::snprintf(line, sizeof line, "device: %s, %s", target.name.c_str(), fmt(target.total_bytes).c_str());
    out += line;
    if (target.usable_bytes != target.total_bytes) out += ", usable " + fmt(target.usable_bytes) + " (less the CUDA context)";
    out += "\n";
    if (e.fits) {
      out += "fits: yes (peak reserved " + fmt(e.peak_reserved()) + " of " + fmt(target.usable_bytes) +
             (e.formulas.sharded ? " per rank)\n" : ")\n");
    } else {
      out += "fits: NO";
      if (e.on_device && e.on_device->oom)
        out += " (out of memory in " + e.on_device->oom_phase + ", allocating " + e.on_device->oom->tensor + ")";
      out += "\n";
    }
    if (e.max_batch == 0) {
      out += "largest micro-batch that fits: none (not even --batch 1)\n";
    } else {
      const bool data_limited = e.max_batch_capped && e.max_batch == e.data_max_batch;
      std::snprintf(line, sizeof line, "largest micro-batch that fits: %s%zu%s\n",
                    e.max_batch_capped && !data_limited ? ">= " : "", e.max_batch,
                    data_limited ? " (the data's limit, not memory's: --data holds one batch of at most this)" : "");
      out += line;
    }
  }
  return out;
}

nlohmann::json estimate_json(const MemoryEstimate& e, const EstimateTarget& target) {
  nlohmann::json j;
  j["command"] = "estimate";
  j["method"] =
      "the run itself (setup and two training steps) on the meta device: every kernel skipped, the caching allocator "
      "on a device without memory";
  j["config"] = setup_json(e.setup);
  j["num_parameters"] = e.num_parameters;
  const BytesPerParameter bpp = bytes_per_parameter(e.setup.precision);
  j["bytes_per_parameter"] = {{"parameters", bpp.parameters},
                              {"gradients", bpp.gradients},
                              {"optimizer_state", bpp.optimizer_state},
                              {"total", bpp.total()}};
  j["peak_allocated_bytes"] = e.peak_allocated();
  j["peak_reserved_bytes"] = e.peak_reserved();
  j["peak"] = {{"phase", e.run.peak_phase}, {"step", e.run.peak_step}, {"tensor", e.run.peak_tensor}};
  nlohmann::json by_category = nlohmann::json::object();
  for (MemoryCategory c : kAllMemoryCategories) {
    const auto formula = formula_for(e.formulas, c);
    by_category[std::string(to_string(c))] = {{"peak_bytes", e.category_peak(c)},
                                              {"at_peak_bytes", e.run.at_peak[index_of(c)]},
                                              {"formula_bytes", formula ? nlohmann::json(*formula) : nlohmann::json()}};
  }
  j["by_category"] = by_category;
  j["memory_stats"] = e.run.stats.to_json();
  if (e.formulas.sharded) {
    const ShardedFormulas& f = *e.formulas.sharded;
    j["sharding"] = {
        {"scheme", f.scheme},
        {"world_size", e.setup.world_size},
        {"figures", "per rank"},
        {"formula_counts", f.peaks ? "peaks in the step" : "held after a step"},
        // the sharding flags, as the registrations put them in "config"
        {"zero", j["config"]["zero"]},
        {"fsdp", j["config"]["fsdp"].is_object() ? j["config"]["fsdp"]["mode"] : nlohmann::json()},
        {"offload", j["config"]["offload"]},
        {"formula_per_rank_bytes",
         {{"parameters", f.parameters},
          {"gradients", f.gradients},
          {"optimizer_state", f.optimizer_state},
          {"model_states", f.model_states()},
          {"communication", f.communication},
          {"host", f.host}}},
        {"paper_stage", f.paper_stage},
        {"paper_per_rank_bytes",
         {{"parameters", f.paper.parameters},
          {"gradients", f.paper.gradients},
          {"optimizer_state", f.paper.optimizer_state},
          {"model_states", f.paper.device_total()},
          {"host", f.paper.host}}},
        // What the rank's collectives move per step (communicator.h's volume); the meta run's steps
        // hold min(accum, 3) micro-batches, so only below that is it the run's figure.
        {"comm_volume_bytes_per_step", e.setup.accum <= kMetaMicroBatches
                                           ? nlohmann::json(static_cast<double>(e.run.comm.total.volume_bytes) /
                                                            static_cast<double>(kMetaSteps))
                                           : nlohmann::json()}};
  }
  if (target.usable_bytes) {
    nlohmann::json d = {{"name", target.name},
                        {"total_bytes", target.total_bytes},
                        {"usable_bytes", target.usable_bytes},
                        {"fits", e.fits},
                        {"max_batch", e.max_batch},
                        {"max_batch_capped", e.max_batch_capped},
                        {"data_max_batch", e.data_max_batch ? nlohmann::json(e.data_max_batch) : nlohmann::json()}};
    if (e.on_device && e.on_device->oom)
      d["oom"] = {{"phase", e.on_device->oom_phase},
                  {"tensor", e.on_device->oom->tensor},
                  {"message", e.on_device->oom->message()}};
    j["device"] = d;
  }
  return j;
}

}  // namespace trainmem::estimator
