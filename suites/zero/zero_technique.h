// ZeRO's registration (common/train/technique.h): --zero and --offload.
//
//   flags      --zero 0|1|2|3 (not given: 0 under mpirun when nothing else shards, else none),
//              --offload none|optimizer|params
//   strategy   ZeroStrategy (zero_strategy.h) and its optimizer over the shards
//   json       "zero": per-rank model states measured, by this implementation's exact formula and
//              by the paper's, and the communication per step (zero_memory.h)
//   formula    the sharded model states per rank (zero_memory.h)
#pragma once
#include "common/train/technique.h"
#include "suites/zero/zero_strategy.h"  // ZeroOptions: what the flags choose

namespace trainmem::zero {

const Technique& zero_technique();

}  // namespace trainmem::zero
