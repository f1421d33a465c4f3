// Ranks that agree on their settings before they train together.
//
// mpirun starts each rank with its own command line (`mpirun -np 1 A : -np 1 B` even with
// different flags). Ranks with different settings would call different collectives (a hang) or
// the same collectives with different sizes (memory corruption). So, first thing, the ranks
// compare a digest of their settings; where any differ, every rank learns the first setting that
// differs and stops with the same message, e.g.
//   the ranks were started with different settings: --steps is 3 on rank 0 but 6 on rank 1;
//   start every rank with the same flags
//
// The exchange uses MPI directly: it runs before any device or communicator exists.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainmem {

// One setting a rank was started with: a flag and its value as given ("--steps", "3").
struct Setting {
  std::string name, value;
  bool operator==(const Setting&) const = default;
};
using Settings = std::vector<Setting>;

// Thrown on every rank at once when the ranks' settings differ. Since every rank knows the same
// outcome, each can print its own line and exit: nobody waits for anybody, nobody needs MPI_Abort.
struct RanksDisagree : std::runtime_error {
  RanksDisagree(const std::string& message, int rank, int world_size)
      : std::runtime_error(message), rank(rank), world_size(world_size) {}
  int rank;        // the rank that threw this copy
  int world_size;
};

// Under mpirun (and built with MPI): compares `mine` with every rank's settings; a collective,
// so every rank must call it, before any other collective. Throws RanksDisagree on every rank
// when any settings differ. Without mpirun it does nothing.
void require_same_settings_on_every_rank(const Settings& mine);

// --- the pieces of the comparison (no MPI; tested on their own)

// The settings as one string, for the digest and for sending: "name\0value\0" per setting
// (a command-line argument cannot hold a \0). parse_settings is its inverse.
std::string serialize_settings(const Settings& settings);
Settings parse_settings(const std::string& serialized);

// A 64-bit FNV-1a hash: equal settings give equal digests on every rank and build.
std::uint64_t settings_digest(const std::string& serialized);

// The index of the first setting where `a` and `b` differ, counting the end of the shorter list
// as a difference (another build may have other flags); nullopt when they are equal.
std::optional<std::size_t> first_difference(const Settings& a, const Settings& b);

// The setting at `index`, or nullopt when the list is shorter.
std::optional<Setting> setting_at(const Settings& settings, std::size_t index);

// How one setting differs between two ranks, for the message:
//   "--steps is 3 on rank 0 but 6 on rank 1"
// or, where the ranks do not even have the same setting there (different builds):
//   "rank 0 has --foo where rank 1 has no such setting (different trainmem builds?)"
std::string difference_message(const std::optional<Setting>& a, int rank_a, const std::optional<Setting>& b, int rank_b);

}  // namespace trainmem
