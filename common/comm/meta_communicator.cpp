#include "common/comm/meta_communicator.h"

namespace trainmem {

MetaCommunicator::MetaCommunicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("MetaCommunicator: rank " + std::to_string(rank) + " of a world of " +
                                std::to_string(world_size) + " (0 <= rank < world size)");
}

}  // namespace trainmem
