#include "common/sharding/unit_layout.h"

#include <stdexcept>

#include "common/model/parameter_table.h"

namespace trainmem {

namespace {

std::string layer_unit_name(std::size_t first_layer, std::size_t layers) {
  std::string name = layers == 1 ? "layer" : "layers";
  name += std::to_string(first_layer);
  if (layers > 1) {
    name += "-";
    name += std::to_string(first_layer + layers - 1);
  }
  return name;
}

}  // namespace

std::vector<UnitLayout> unit_layouts(const ModelConfig& config, std::size_t shards, std::size_t layers_per_unit) {
  if (shards < 1) throw std::invalid_argument("sharding needs a world of at least one rank");
  if (layers_per_unit < 1) throw std::invalid_argument("a sharding unit needs at least one layer");
  const ParameterTable table(config);  // built once: an O(L) walk, not one table per unit
  auto make_unit = [&](UnitLayout u, const std::vector<std::size_t>& indices) {
    for (std::size_t i : indices) {
      u.parameters.push_back(i);
      u.offsets.push_back(u.numel);
      u.numel += table[i].numel();
    }
    u.shard_numel = shard_numel(u.numel, shards);
    u.padded_numel = padded_numel(u.numel, shards);
    return u;
  };
  std::vector<UnitLayout> units;
  UnitLayout root;
  root.name = "root";
  root.root = true;
  units.push_back(make_unit(root, table.root_indices()));
  for (std::size_t first = 0; first < config.layers; first += layers_per_unit) {
    UnitLayout u;
    u.first_layer = first;
    u.layers = first + layers_per_unit <= config.layers ? layers_per_unit : config.layers - first;
    u.name = layer_unit_name(first, u.layers);
    std::vector<std::size_t> indices;
    for (std::size_t l = first; l < first + u.layers; ++l)
      for (std::size_t i : table.layer_indices(l)) indices.push_back(i);
    units.push_back(make_unit(u, indices));
  }
  return units;
}

}  // namespace trainmem
