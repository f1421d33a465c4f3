// The techniques the driver knows: one registration per suite (common/train/technique.h). Every
// command (train, estimate, max-batch) takes their flags and builds its run from this list, which
// the build generates from the suites' manifests (trainmem_add_technique, cmake/TrainmemTechniques.cmake).
#pragma once
#include "common/train/technique.h"

namespace trainmem {

const Techniques& registered_techniques();

// "batch=4 bf16 accum=1 recompute=none attention=naive zero=2 N=8": the setup in messages.
std::string describe_setup(const TrainingSetup& setup);

}  // namespace trainmem
