// Activation checkpointing's registration (common/train/technique.h): --recompute.
//
//   flags      --recompute none|full|selective|sqrt|every:K   (RecomputePolicy, recompute.h)
//   strategy   RecomputeStrategy, when the policy recomputes anything
//   remedies   --recompute selective (a few % more time), --recompute full (a third more)
//   formula    the activations' peak: predicted_activation_peak (recompute.h)
#pragma once
#include "common/train/technique.h"

namespace trainmem {

const Technique& checkpointing_technique();

}  // namespace trainmem
