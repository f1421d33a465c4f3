// `trainmem replay` of a PyTorch memory snapshot (common/allocator/pytorch_snapshot.h): the run
// replayed as it was recorded (the recorded settings, the recorded device's own answers, every
// decision compared), or on a card of a given size under given settings, and with --what-if the
// same trace under other allocator settings, the setting with the lowest peak reserved, and the
// smallest card of the GPU list that holds the run with it.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/pytorch_snapshot.h"

namespace trainmem::cli {

struct SnapshotReplayRequest {
  std::optional<int> device;                   // --device N (which of the snapshot's devices)
  std::optional<AllocatorConfig> config;       // --allocator-config; nullopt: the recorded settings
  std::optional<std::size_t> capacity;         // --device-memory or --gpu; nullopt: see card_capacity
  std::string capacity_source;                 // where `capacity` came from, for the output ("--gpu a100-40gb")
  bool what_if = false;
  bool json = false;
  std::string record;                          // --record FILE
};

// Whether a file holds a PyTorch snapshot (a pickle, or JSON whose first key is one of a
// snapshot's) rather than a trace of trainmem's own; reads only the file's first bytes.
bool file_holds_snapshot(const std::string& path);
// The snapshot's document: the pickle read by the restricted reader, or the JSON parsed. Throws
// TraceError (PickleError's message as its own) with one line.
nlohmann::json read_snapshot_document(const std::string& path);

// One replay of the trace on a simulated card of `capacity` bytes under `config`: a row of the
// what-if table, and what a direct replay under those settings gives.
ReplayResult replay_on_card(const PytorchSnapshot& snapshot, const AllocatorConfig& config, std::size_t capacity,
                            const ReplayObserver& observe = {});

// The settings --what-if compares (the recorded ones first).
std::vector<AllocatorConfig> what_if_settings(const AllocatorConfig& recorded);

int run_snapshot_replay(const std::string& path, const SnapshotReplayRequest& request);

}  // namespace trainmem::cli
