// FSDP's registration (common/train/technique.h): --fsdp, --fsdp-unit, --fsdp-prefetch.
//
//   flags      --fsdp full|grad_op|none, --fsdp-unit layer|K-layers, --fsdp-prefetch on|off
//              (fsdp_options.h)
//   strategy   FsdpStrategy (fsdp_strategy.h) and its optimizer over the shards
//   json       "fsdp": per-rank peaks of the model states, measured and predicted, the units
//              gathered at the peak, the communication per step (fsdp_memory.h)
//   formula    the sharded model states per rank (fsdp_memory.h)
#pragma once
#include "common/train/technique.h"
#include "suites/fsdp/fsdp_options.h"

namespace trainmem::fsdp {

// What the flags choose (an option of the setup).
struct FsdpChoice {
  bool enabled = false;  // --fsdp given
  FsdpOptions options;
};

const Technique& fsdp_technique();

}  // namespace trainmem::fsdp
