#include "suites/zero/zero_layout.h"

#include <stdexcept>

#include "suites/zero/zero_memory.h"

namespace trainmem::zero {

ZeroLayout::ZeroLayout(GPT& model, int world_size) {
  if (world_size < 1) throw std::invalid_argument("ZeroLayout: the world size must be at least 1");
  const auto N = static_cast<std::size_t>(world_size);
  const std::vector<Parameter>& params = model.parameters();
  const ParameterTable table(model.config());
  if (params.size() != table.size())
    throw std::logic_error("ZeroLayout: the model's parameters are not its parameter table's");

  auto make_unit = [&](std::string name, std::vector<std::size_t> indices) {
    ZeroUnit u;
    u.name = std::move(name);
    for (std::size_t i : indices) {
      u.params.push_back(i);
      u.offsets.push_back(u.numel);
      u.numel += static_cast<std::size_t>(params[i].value.numel());
    }
    u.padded = padded(u.numel, N);  // P_u = N * ceil(n_u / N)
    u.shard = u.padded / N;         // S_u
    units_.push_back(std::move(u));
  };
  make_unit("root", table.root_indices());
  for (std::size_t l = 0; l < model.config().layers; ++l) {
    std::string name = "h";
    name += std::to_string(l);
    make_unit(std::move(name), table.layer_indices(l));
  }
}

std::size_t ZeroLayout::padded_total() const {
  std::size_t n = 0;
  for (const ZeroUnit& u : units_) n += u.padded;
  return n;
}

std::size_t ZeroLayout::shard_total() const {
  std::size_t n = 0;
  for (const ZeroUnit& u : units_) n += u.shard;
  return n;
}

}  // namespace trainmem::zero
