#include "suites/trainmem/planner/cpu_timing.h"

#include <algorithm>

#include "common/data/host_tokens.h"
#include "common/data/token_file.h"
#include "common/device/device.h"
#include "common/train/training_run.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::planner {

std::vector<double> run_timed_on_cpu(const TrainingSetup& setup, Communicator* world, int steps, CostLog* log) {
  DeviceOptions options;
  options.choice = "cpu";
  options.device_memory = std::size_t{8} << 30;
  options.allocator = setup.allocator;
  auto device = Device::open(options);
  std::unique_ptr<Communicator> own;  // a sharding technique on one process: a world of one rank
  if (world == nullptr && registered_techniques().sharding(setup)) {
    own = make_communicator(*device);
    world = own.get();
  }
  const std::size_t T = setup.model.seq;
  const std::size_t ranks = world ? static_cast<std::size_t>(world->world_size()) : 1;
  const std::size_t needed = (static_cast<std::size_t>(steps) + 1) * setup.batch * setup.accum * ranks * T + 1;
  TrainingRun run(setup, registered_techniques(), *device, world,
                  HostTokens(synthetic_corpus(std::max<std::size_t>(needed, 1 << 16), setup.seed)));
  device->set_cost_log(log);
  if (world) world->set_cost_log(log);
  std::vector<double> seconds;
  for (int i = 0; i < steps; ++i) seconds.push_back(run.step().ms / 1000.0);
  device->set_cost_log(nullptr);
  if (world) world->set_cost_log(nullptr);
  return seconds;
}

}  // namespace trainmem::planner
