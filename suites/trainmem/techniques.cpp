#include "suites/trainmem/techniques.h"

// registered_techniques() is generated from the suites' manifests (cmake/TrainmemTechniques.cmake:
// build/<preset>/generated/registered_techniques.cpp); what is here is not a list.
namespace trainmem {

std::string describe_setup(const TrainingSetup& setup) {
  std::string s = "batch=" + std::to_string(setup.batch) + " " + registered_techniques().describe(setup);
  if (setup.world_size > 1) s += " N=" + std::to_string(setup.world_size);
  return s;
}

}  // namespace trainmem
