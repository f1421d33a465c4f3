// How the sharding engine cuts the model into units, and each unit into N equal slices.
//
// A unit is what is gathered, freed and reduced as one piece: its parameters, in the parameter
// table's order, concatenated into one flat vector (PyTorch FSDP's FlatParameter).
//
//   root unit   wte, wpe, lnf.weight, lnf.bias    (the table's root_indices()). The tied LM head
//               uses wte too, so the root is needed at both ends of a micro-step: it is gathered
//               for the whole micro-step and its gradient is complete only after the whole backward.
//   layer unit  K consecutive transformer layers (the table's layer_indices(l)); the last unit may
//               have fewer. ZeRO uses K = 1, FSDP --fsdp-unit K-layers.
//
// Sharding over N ranks pads each flat vector with zeros to a multiple of N; rank r owns
//   [r*S, (r+1)*S),   S = ceil(numel / N),   padded = N * S
// (an unsharded unit is the case N = 1: S = padded = numel).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/model/model_config.h"

namespace trainmem {

// S: one rank's slice of a vector of n elements cut into N equal slices.
constexpr std::size_t shard_numel(std::size_t n, std::size_t N) { return (n + N - 1) / N; }
// N * S: the vector padded so that the N slices are equal.
constexpr std::size_t padded_numel(std::size_t n, std::size_t N) { return N * shard_numel(n, N); }

struct UnitLayout {
  std::string name;                     // "root", "layer2", "layers0-1"
  bool root = false;
  std::size_t first_layer = 0;          // layer units: the layers [first_layer, first_layer + layers)
  std::size_t layers = 0;               // 0 for the root
  std::vector<std::size_t> parameters;  // indices into the parameter table (= Model::parameters())
  std::vector<std::size_t> offsets;     // element offset of each of them in the flat vector
  std::size_t numel = 0;                // elements of the unit's parameters
  std::size_t shard_numel = 0;          // S: what one rank keeps
  std::size_t padded_numel = 0;         // N * S: the unit whole
};

// The root first, then the layer units in layer order, each cut into `shards` slices (N, or 1
// for a unit that every rank keeps whole). Throws std::invalid_argument for 0 shards or
// layers_per_unit 0.
std::vector<UnitLayout> unit_layouts(const ModelConfig& config, std::size_t shards, std::size_t layers_per_unit);

}  // namespace trainmem
