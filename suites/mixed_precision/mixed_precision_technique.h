// Mixed precision's registration (common/train/technique.h): --precision and, for fp16, the
// dynamic loss scaler's --loss-scale* flags.
//
//   flags      --precision fp32|bf16|fp16 (the model's storage: TrainingSetup::precision)
//              --loss-scale, --loss-scale-interval, --loss-scale-growth, --loss-scale-backoff (fp16)
//   strategy   DynamicLossScaler (loss_scaler.h), with fp16
//   remedy     --precision bf16: half the activation bytes, faster on tensor cores
//   formula    the weight side: bytes_per_parameter per tensor (precision_memory.h)
#pragma once
#include "common/train/technique.h"
#include "suites/mixed_precision/loss_scaler.h"

namespace trainmem {

// The loss scaler's options as the flags set them (an option of the setup).
struct LossScaling {
  LossScalerOptions scaler;
  bool flags_given = false;  // any --loss-scale* flag: refused without fp16
};

const Technique& mixed_precision_technique();

}  // namespace trainmem
