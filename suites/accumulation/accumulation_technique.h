// Gradient accumulation's registration (common/train/technique.h): --accum.
//
//   flags      --accum K: micro-batches per optimizer step (TrainingSetup::accum; the trainer's
//              loop over micro-batches, common/train/trainer.cpp, is the technique's core)
//   remedy     --batch b --accum K*B/b: the same tokens per step in smaller micro-batches
#pragma once
#include "common/train/technique.h"

namespace trainmem {

const Technique& accumulation_technique();

}  // namespace trainmem
