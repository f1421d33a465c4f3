// What `--fsdp`, `--fsdp-unit` and `--fsdp-prefetch` choose (PyTorch FSDP's names in brackets).
//
//   --fsdp full        FULL_SHARD: parameters, gradients and optimizer state are sharded; a unit's
//                      parameters are all-gathered before its forward, freed after it, gathered
//                      again before its backward and freed after it
//   --fsdp grad_op     SHARD_GRAD_OP: the same, but a unit gathered for forward stays gathered
//                      until its backward is done (one all-gather per unit instead of two)
//   --fsdp none        NO_SHARD: every rank holds everything; gradients are all-reduced per unit
//                      (plain data parallelism, with FSDP's flat per-unit buffers)
//   --fsdp-unit layer      one transformer layer per unit (FSDP's auto-wrap of each block)
//   --fsdp-unit K-layers   K consecutive layers per unit (the last unit may have fewer)
//   --fsdp-prefetch on|off gather the next unit while the current one computes (forward and
//                          backward prefetch)
//
// Header-only and free of anything but the standard library and the name tables
// (common/cli/enum_table.h), so that the estimator can use it.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/cli/enum_table.h"

namespace trainmem::fsdp {

enum class ShardingMode { full, grad_op, none };
inline constexpr auto kShardingModes = cli::enum_table<ShardingMode>(
    "--fsdp", {{ShardingMode::full, "full"}, {ShardingMode::grad_op, "grad_op"}, {ShardingMode::none, "none"}});
inline std::string to_string(ShardingMode mode) { return std::string(kShardingModes.name(mode)); }

// "layer" -> 1, "K-layers" -> K (K >= 1).
inline std::size_t parse_layers_per_unit(const std::string& text) {
  const std::string error = "--fsdp-unit must be 'layer' or 'K-layers' with K >= 1 (e.g. 2-layers), not '" + text + "'";
  if (text == "layer") return 1;
  const std::string suffix = "-layers";
  if (text.size() <= suffix.size() || text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw std::invalid_argument(error);
  const std::string number = text.substr(0, text.size() - suffix.size());
  std::size_t k = 0;
  for (char c : number) {
    if (c < '0' || c > '9' || k > 100000) throw std::invalid_argument(error);
    k = k * 10 + static_cast<std::size_t>(c - '0');
  }
  if (k < 1) throw std::invalid_argument(error);
  return k;
}

inline std::string unit_to_string(std::size_t layers_per_unit) {
  if (layers_per_unit == 1) return "layer";
  std::string s = std::to_string(layers_per_unit);
  s += "-layers";
  return s;
}

// --fsdp-prefetch on|off.
inline constexpr auto kFsdpPrefetch = cli::enum_table<bool>("--fsdp-prefetch", {{true, "on"}, {false, "off"}});

struct FsdpOptions {
  ShardingMode mode = ShardingMode::full;
  std::size_t layers_per_unit = 1;
  bool prefetch = false;
};

}  // namespace trainmem::fsdp
