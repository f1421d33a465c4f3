// Flash attention's registration (common/train/technique.h): --attention.
//
//   flags      --attention naive|flash|cudnn (the model's attention: TrainingSetup::attention;
//              the kernels are kernels/flash_attention.h, kernels/cudnn_attention.h); not given:
//              naive on the CPU, flash on a GPU where its kernels run (AttentionDefault)
//   remedy     --attention flash: no B*H*T^2 matrices, and faster
//   formula    none of its own: the activations' formula (suites/checkpointing) counts a
//              log-sum-exp per row instead of the probabilities
#pragma once
#include <string>

#include "common/train/technique.h"

namespace trainmem {

// When --attention was not given (TrainingSetup::attention_given), complete() chose (flash on a
// GPU where it runs: the default PyTorch users get) and says so.
struct AttentionDefault {
  bool defaulted_on_gpu = false;  // complete() chose, on the CUDA backend
  std::string why_naive;          // it kept naive there: why
};

const Technique& flash_attention_technique();

}  // namespace trainmem
