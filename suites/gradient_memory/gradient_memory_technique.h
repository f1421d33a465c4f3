// Gradient memory's registration (common/train/technique.h): --grads persistent|on-demand.
//
//   flags      --grads (gradient_mode.h)
//   strategy   OnDemandGradients (on_demand_gradients.h), with on-demand
//   remedy     --grads on-demand: the gradients exist only from their first write to the update
//              (no time cost)
//   formula    gradients held after a step: none with on-demand
#pragma once
#include "common/train/technique.h"
#include "suites/gradient_memory/gradient_mode.h"

namespace trainmem::gradient_memory {

const Technique& gradient_memory_technique();

}  // namespace trainmem::gradient_memory
