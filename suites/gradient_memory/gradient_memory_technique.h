// Gradient memory's registration (common/train/technique.h): --grads persistent|on-demand and
// --optimizer-in-backward.
//
//   flags      --grads, --optimizer-in-backward (their values: common/train/gradient_mode.h)
//   strategy   OnDemandGradients (on_demand_gradients.h) with on-demand; OptimizerInBackward
//              (optimizer_in_backward.h) with the fused update on one device (under sharding the
//              engine runs it: common/sharding/sharding_engine.h)
//   remedies   --grads on-demand (the gradients exist only from their first write to the update),
//              then --optimizer-in-backward where its rules hold (no time cost)
//   formula    gradients held after a step: none with either
#pragma once
#include "common/train/gradient_mode.h"
#include "common/train/technique.h"

namespace trainmem::gradient_memory {

const Technique& gradient_memory_technique();

}  // namespace trainmem::gradient_memory
