#include "suites/trainmem/techniques.h"

#include "suites/accumulation/accumulation_technique.h"
#include "suites/allocator/empty_cache_technique.h"
#include "suites/checkpointing/checkpointing_technique.h"
#include "suites/flash_attention/flash_attention_technique.h"
#include "suites/fsdp/fsdp_technique.h"
#include "suites/gradient_memory/gradient_memory_technique.h"
#include "suites/lazy_loading/lazy_loading_technique.h"
#include "suites/mixed_precision/mixed_precision_technique.h"
#include "suites/zero/zero_technique.h"

namespace trainmem {

// One line per technique, in the order the progress line names them (their strategies run in
// hook order, Technique::HookOrder).
const Techniques& registered_techniques() {
  static const Techniques techniques{
      &mixed_precision_technique(),
      &accumulation_technique(),
      &checkpointing_technique(),
      &gradient_memory::gradient_memory_technique(),
      &flash_attention_technique(),
      &lazy_loading::lazy_loading_technique(),
      &zero::zero_technique(),
      &fsdp::fsdp_technique(),
      &allocator::empty_cache_technique(),
  };
  return techniques;
}

std::string describe_setup(const TrainingSetup& setup) {
  std::string s = "batch=" + std::to_string(setup.batch) + " " + registered_techniques().describe(setup);
  if (setup.world_size > 1) s += " N=" + std::to_string(setup.world_size);
  return s;
}

}  // namespace trainmem
