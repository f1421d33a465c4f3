#include "suites/trainmem/estimator/estimate_report.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "common/util/byte_size.h"
#include "common/model/precision.h"
#include "generated/result_schema.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::estimator {

namespace {

// The suite formula for a category's peak, where one exists: one rank's when the model states are
// sharded (as the meta run's figures beside it are).
std::optional<std::size_t> formula_for(const FormulaBytes& f, MemoryCategory c) {
  const ShardedFormulas* sharded = f.sharded ? &*f.sharded : nullptr;
  switch (c) {
    case MemoryCategory::parameters: return sharded ? sharded->parameters_peak : f.parameters;
    case MemoryCategory::gradients: return sharded ? sharded->gradients_peak : f.gradients;
    case MemoryCategory::optimizer_state: return sharded ? sharded->optimizer_state_peak : f.optimizer_state;
    case MemoryCategory::activations: return f.activations;
    case MemoryCategory::data: return f.data;
    default: return std::nullopt;
  }
}

// Every figure in binary units (KiB, MiB, GiB), as PyTorch prints memory.
// A formula's figure (a double) as bytes, rounded to the nearest byte.
std::string format_rounded_bytes(double bytes) { return format_bytes(static_cast<std::uint64_t>(std::llround(bytes))); }

nlohmann::json setup_json(const TrainingSetup& s) {
  nlohmann::json j = {{"model", s.model.to_json()},
                      {"batch", s.batch},
                      {"seq", s.seq()},
                      {"tokens_per_step", s.batch * s.seq() * s.accum},
                      {"eager_dataset_tokens",
                       registered_techniques().dataset_home(s) == DatasetHome::device ? s.dataset_size() : 0},
                      {"backend", to_string(s.backend)},  // whose allocation pattern the meta run followed
                      {"allocator_config", s.allocator.to_string()}};
  if (s.model.moe()) j["expert_routing"] = "any: dropless, B*T*k grouped rows, the same memory for every routing";
  for (const Technique* t : registered_techniques()) t->add_config_json(s, j);  // as `trainmem train --json` has them
  return j;
}

}  // namespace

std::string batch_search_lines(const BatchSearch& search, std::size_t data_max_batch, const std::string& tries) {
  std::string out = "largest micro-batch that fits: ";
  const bool data_limited = search.at_limit() && search.largest == data_max_batch;
  if (search.largest == 0) out += "none (not even --batch 1)";
  else if (data_limited) out += std::to_string(search.largest) + " (the data's limit, not memory's: --data holds one batch of at most this)";
  else out += (search.at_limit() ? ">= " : "") + std::to_string(search.largest);
  out += "\n";
  if (!search.holes.empty())
    out += "  below it, these do not fit: " + list_of_batches(search.holes) +
           " (the allocator packs their segments worse than a larger batch's)\n";
  const std::size_t last = search.end ? search.end : search.limit;
  out += last == 1 ? "  batch 1 was tried (" + tries + ")"
                   : "  every batch from 1 to " + std::to_string(last) + " was tried (" + tries + ")";
  if (search.end)
    out += (search.end == 1 ? std::string("; no batch can fit") : "; from " + std::to_string(search.end) + " up none can fit") +
           ": the tensors alive at once exceed the device";
  else if (!data_limited)
    out += ", the search's limit";
  return out + "\n";
}

std::string advice_lines(const std::vector<std::string>& advice) {
  if (advice.empty()) return {};
  std::string out = "what would help (the advice trainmem train gives out of memory):\n";
  for (const std::string& line : advice) out += "  - " + line + "\n";
  return out;
}

std::string estimate_table(const MemoryEstimate& e, const EstimateTarget& target) {
  const TrainingSetup& s = e.setup;
  std::string out;
  char line[512];
  out += "model " + s.model.label() + ": " + std::to_string(e.num_parameters) +
         " parameters (" + s.model.shape_summary() + ")\n";
  std::snprintf(line, sizeof line, "setup: %s, allocator %s\n", describe_setup(s).c_str(), s.allocator.to_string().c_str());
  out += line;
  out += "meta run: the figures below are the run itself on the meta device (every allocation, no kernel), with the ";
  out += s.backend == DeviceKind::cuda ? "CUDA" : "CPU";
  out += " backend's allocation pattern: a prediction, made before anything runs\n";
  if (s.attention == AttentionKind::cudnn)
    out += "  (cuDNN sizes its attention workspaces on the GPU at run time: not counted here)\n";
  if (s.model.moe())  // common/model/llama_moe.cpp: dropless, grouped
    out += "  (mixture of experts, dropless: every token reaches its k experts in B*T*k grouped rows, so the memory is "
           "the same for every routing; the time assumes a balanced one)\n";
  const BytesPerParameter bpp = bytes_per_parameter(s.precision);
  std::snprintf(line, sizeof line, "model states: %zu bytes per parameter (parameters %zu + gradients %zu + optimizer %zu)%s\n\n",
                bpp.total(), bpp.parameters, bpp.gradients, bpp.optimizer_state,
                e.formulas.sharded ? ", before sharding" : "");
  out += line;

  if (e.formulas.sharded) out += "per rank (" + e.formulas.sharded->scheme + "):\n";
  std::snprintf(line, sizeof line, "%-16s %14s %14s %14s\n", "category", "peak in step", "at the peak", "suite formula");
  out += line;
  std::snprintf(line, sizeof line, "%-16s %14s %14s %14s\n", "", "(meta run)", "(meta run)", "(its peak)");
  out += line;
  for (MemoryCategory c : kAllMemoryCategories) {
    if (c == MemoryCategory::other) continue;
    const auto formula = formula_for(e.formulas, c);
    std::snprintf(line, sizeof line, "%-16s %14s %14s %14s\n", std::string(to_string(c)).c_str(),
                  format_bytes(e.category_peak(c)).c_str(), format_bytes(e.run.at_peak[index_of(c)]).c_str(),
                  formula ? format_bytes(*formula).c_str() : "-");
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %14s %14s\n", "peak allocated", "", format_bytes(e.peak_allocated()).c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-16s %14s %14s   (%lld segments at the end)\n\n", "peak reserved", "",
                format_bytes(e.peak_reserved()).c_str(), static_cast<long long>(e.run.stats.segment[0].current));
  out += line;
  std::snprintf(line, sizeof line, "the peak: %s of step %ld, when %s is allocated\n", e.run.peak_phase.c_str(),
                e.run.peak_step, e.run.peak_tensor.c_str());
  out += line;

  if (e.formulas.sharded) {
    const ShardedFormulas& f = *e.formulas.sharded;
    // The model states as the sharding formulas count them: each category's peak (FSDP), or what
    // the rank holds after a step (ZeRO, as the paper counts), the meta run's figure alike.
    out += std::string("\nthe figures above are one rank's: ") + f.scheme + "; its model states " +
           (f.peaks ? "at their peaks in the step:\n" : "held after a step, as the ZeRO paper counts them:\n");
    // The paper counts what a rank holds between steps: its column stands beside those figures only.
    auto row = [&](const char* name, const std::string& meta, const std::string& exact, const std::string& paper) {
      std::snprintf(line, sizeof line, "%-16s %14s %14s", name, meta.c_str(), exact.c_str());
      out += line;
      if (!f.peaks) {
        std::snprintf(line, sizeof line, " %14s", paper.c_str());
        out += line;
      }
      out += "\n";
    };
    row("", "meta run", "exact formula", "ZeRO paper");
    auto meta = [&](MemoryCategory c) { return f.peaks ? e.category_peak(c) : e.run.after_steps[index_of(c)]; };
    const std::size_t p = meta(MemoryCategory::parameters), g = meta(MemoryCategory::gradients),
                      o = meta(MemoryCategory::optimizer_state);
    row("parameters", format_bytes(p), format_bytes(f.parameters), format_rounded_bytes(f.paper.parameters));
    row("gradients", format_bytes(g), format_bytes(f.gradients), format_rounded_bytes(f.paper.gradients));
    row("optimizer_state", format_bytes(o), format_bytes(f.optimizer_state), format_rounded_bytes(f.paper.optimizer_state));
    row("model states", format_bytes(p + g + o), format_bytes(f.model_states()), format_rounded_bytes(f.paper.device_total()));
    if (f.peaks)
      out += "(the ZeRO paper's stage " + std::to_string(f.paper_stage) + ", which counts what a rank holds between steps: " +
             format_rounded_bytes(f.paper.device_total()) + " of model states)\n";
    if (f.host) out += "host memory (offload), exact formula: " + format_bytes(f.host) + " per rank\n";
  }

  if (target.usable_bytes) {
    std::snprintf(line, sizeof line, "device: %s, %s", target.name.c_str(), format_bytes(target.total_bytes).c_str());
    out += line;
    if (target.usable_bytes != target.total_bytes) out += ", usable " + format_bytes(target.usable_bytes) + " (less the CUDA context)";
    out += "\n";
    if (e.fits) {
      out += "fits: yes (peak reserved " + format_bytes(e.peak_reserved()) + " of " + format_bytes(target.usable_bytes) +
             (e.formulas.sharded ? " per rank)\n" : ")\n");
    } else {
      out += "fits: NO";
      if (e.on_device && e.on_device->oom)
        out += " (out of memory in " + e.on_device->oom_phase + ", allocating " + e.on_device->oom->tensor + ")";
      out += "\n";
    }
    out += batch_search_lines(e.batches, e.data_max_batch, "meta runs");
    if (e.batches.at_limit() && e.batches.largest != e.data_max_batch)
      out += "  (larger batches were not tried, to keep the estimate within seconds; 'trainmem max-batch --device meta "
             "--limit N' tries them)\n";
    out += advice_lines(e.advice);
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
  j[result_schema::memory_peak_allocated] = e.peak_allocated();
  j[result_schema::memory_peak_reserved] = e.peak_reserved();
  j["peak"] = {{"phase", e.run.peak_phase}, {"step", e.run.peak_step}, {"tensor", e.run.peak_tensor}};
  nlohmann::json by_category = nlohmann::json::object();
  for (MemoryCategory c : kAllMemoryCategories) {
    const auto formula = formula_for(e.formulas, c);
    by_category[to_string(c)] = {{result_schema::memory_category_peak, e.category_peak(c)},
                                              {"at_peak_bytes", e.run.at_peak[index_of(c)]},
                                              {"formula_bytes", formula ? nlohmann::json(*formula) : nlohmann::json()}};
  }
  j[result_schema::memory_by_category] = by_category;
  j["memory_stats"] = e.run.stats.to_json();
  if (e.formulas.sharded) {
    const ShardedFormulas& f = *e.formulas.sharded;
    const Technique* sharding = registered_techniques().sharding(e.setup);
    j["sharding"] = {
        {"scheme", f.scheme},
        {"world_size", e.setup.world_size},
        {"figures", "per rank"},
        {"formula_counts", f.peaks ? "peaks in the step" : "held after a step"},
        // the sharding technique's registration, whose flags are in "config" under its own keys
        {"technique", sharding ? nlohmann::json(sharding->name()) : nlohmann::json()},
        {"formula_per_rank_bytes",
         {{"parameters", f.parameters},
          {"gradients", f.gradients},
          {"optimizer_state", f.optimizer_state},
          {"model_states", f.model_states()},
          {"parameters_peak", f.parameters_peak},
          {"gradients_peak", f.gradients_peak},
          {"optimizer_state_peak", f.optimizer_state_peak},
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
                        {"max_batch", e.batches.largest},
                        {"max_batch_capped", e.batches.at_limit()},
                        {"max_batch_holes", e.batches.holes},
                        {"max_batch_search_end", e.batches.end ? nlohmann::json(e.batches.end) : nlohmann::json()},
                        {"data_max_batch", e.data_max_batch ? nlohmann::json(e.data_max_batch) : nlohmann::json()},
                        {"advice", e.advice}};
    if (e.on_device && e.on_device->oom)
      d["oom"] = {{"phase", e.on_device->oom_phase},
                  {"tensor", e.on_device->oom->tensor},
                  {"message", e.on_device->oom->message()}};
    j["device"] = d;
  }
  return j;
}

}  // namespace trainmem::estimator
