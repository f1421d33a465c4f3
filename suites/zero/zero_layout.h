// How ZeRO cuts the model into units and each unit into N equal slices.
//
//   unit 0        the ROOT unit: wte, wpe, lnf.weight, lnf.bias. The tied embedding is used at
//                 both ends (embedding forward first, LM head, its backward, embedding backward
//                 last), so its gradient is complete only after the whole backward.
//   unit 1 + l    layer l's 12 tensors: used between before/after_layer_forward(l) and
//                 before/after_layer_backward(l); its gradient is complete at after_layer_backward(l).
//
// Each unit is one flat vector: its tensors one after the other (`offsets`), n_u elements,
// padded with zeros to P_u = N * ceil(n_u / N); rank r owns elements [r*S_u, (r+1)*S_u) with
// S_u = P_u / N. Units are the granularity of every collective: a unit's gradients are
// reduce-scattered in one call (the "bucket"), its parameters all-gathered in one call.
// zero_memory.h's zero_units() describes the same units from the model's shape alone.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/model/gpt.h"

namespace trainmem::zero {

struct ZeroUnit {
  std::string name;                  // "root", "h0", "h1", ...
  std::vector<std::size_t> params;   // indices into GPT::parameters()
  std::vector<std::size_t> offsets;  // element offset of each of them in the unit's flat vector
  std::size_t numel = 0;             // n_u
  std::size_t padded = 0;            // P_u = N * ceil(n_u / N)
  std::size_t shard = 0;             // S_u = P_u / N
};

class ZeroLayout {
 public:
  ZeroLayout(GPT& model, int world_size);

  const std::vector<ZeroUnit>& units() const { return units_; }
  const ZeroUnit& root() const { return units_.front(); }
  const ZeroUnit& layer(std::size_t l) const { return units_.at(1 + l); }
  std::size_t padded_total() const;  // P = sum of P_u
  std::size_t shard_total() const;   // P / N: the elements this rank owns

 private:
  std::vector<ZeroUnit> units_;
};

}  // namespace trainmem::zero
