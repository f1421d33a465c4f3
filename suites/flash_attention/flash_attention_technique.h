// Flash attention's registration (common/train/technique.h): --attention.
//
//   flags      --attention naive|flash|cudnn (the model's attention: TrainingSetup::attention;
//              the kernels are kernels/flash_attention.h, kernels/cudnn_attention.h)
//   remedy     --attention flash: no B*H*T^2 matrices, and faster
//   formula    none of its own: the activations' formula (suites/checkpointing) counts a
//              log-sum-exp per row instead of the probabilities
#pragma once
#include "common/train/technique.h"

namespace trainmem {

const Technique& flash_attention_technique();

}  // namespace trainmem
