// How FSDP cuts the GPT into units, and how big each unit's flat parameter and its shards are.
//
// A unit is what is gathered and freed as one piece: its parameters are concatenated, in the
// model's parameters() order, into one flat vector (PyTorch FSDP's FlatParameter).
//
//   root unit   wte [V,C], wpe [T,C], lnf.weight [C], lnf.bias [C]   V*C + T*C + 2C elements
//               (the embeddings and the final layernorm: the tied LM head uses wte too, so the
//               root is needed at both ends of the step and, like FSDP's root, stays gathered
//               for the whole micro-step)
//   layer unit  K consecutive transformer layers (the last unit may have fewer),
//               K * (12 C^2 + 13 C) elements: ln1 2C, qkv 3C^2+3C, attn proj C^2+C, ln2 2C,
//               fc 4C^2+4C, fc proj 4C^2+C
//
// Sharding over N ranks pads each flat vector to a multiple of N and gives rank r the slice
//   [r*S, (r+1)*S),  S = ceil(numel / N),  padded = N * S
// (NO_SHARD keeps the whole vector on every rank: S = padded = numel.)
//
// Header-only, C++17, no trainmem library code: the estimator computes with it too.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/model/gpt_config.h"
#include "common/model/parameter_table.h"
#include "suites/fsdp/fsdp_options.h"

namespace trainmem::fsdp {

struct UnitLayout {
  std::string name;              // "root", "layers0-1", "layer2"
  bool root = false;
  std::size_t first_layer = 0;   // layer units: the layers [first_layer, first_layer + layers)
  std::size_t layers = 0;        // 0 for the root
  std::size_t numel = 0;         // parameters in the unit
  std::size_t shard_numel = 0;   // S: what one rank keeps
  std::size_t padded_numel = 0;  // N * S: what a gathered unit holds
};


inline std::string unit_name(std::size_t first_layer, std::size_t layers) {
  std::string name = layers == 1 ? "layer" : "layers";
  name += std::to_string(first_layer);
  if (layers > 1) {
    name += "-";
    name += std::to_string(first_layer + layers - 1);
  }
  return name;
}

// The units in the order the layouts are kept: the root first, then the layer units in layer
// order. `world` is N; NO_SHARD does not pad.
inline std::vector<UnitLayout> unit_layouts(const GPTConfig& config, std::size_t world, std::size_t layers_per_unit,
                                            ShardingMode mode) {
  if (world < 1) throw std::invalid_argument("FSDP needs a world of at least one rank");
  if (layers_per_unit < 1) throw std::invalid_argument("--fsdp-unit: a unit needs at least one layer");
  const std::size_t shards = mode == ShardingMode::none ? 1 : world;
  auto sized = [shards](UnitLayout u) {
    u.shard_numel = (u.numel + shards - 1) / shards;  // S = ceil(numel / N)
    u.padded_numel = u.shard_numel * shards;          // N * S
    return u;
  };
  const ParameterTable table(config);  // built once: a layer's count is every layer's
  std::vector<UnitLayout> units;
  UnitLayout root;
  root.name = "root";
  root.root = true;
  root.numel = table.root_numel();
  units.push_back(sized(root));
  for (std::size_t first = 0; first < config.layers; first += layers_per_unit) {
    UnitLayout u;
    u.first_layer = first;
    u.layers = first + layers_per_unit <= config.layers ? layers_per_unit : config.layers - first;
    u.name = unit_name(first, u.layers);
    u.numel = u.layers * table.layer_numel();
    units.push_back(sized(u));
  }
  return units;
}

}  // namespace trainmem::fsdp
