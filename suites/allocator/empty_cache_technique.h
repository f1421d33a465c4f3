// The allocator suite's registration (common/train/technique.h): --empty-cache.
//
//   flags      --empty-cache never|every-step|every:N   (EmptyCachePolicy, empty_cache_policy.h)
//   strategy   EmptyCacheStrategy, after everything else is done with the step
#pragma once
#include "common/train/technique.h"

namespace trainmem::allocator {

const Technique& empty_cache_technique();

}  // namespace trainmem::allocator
