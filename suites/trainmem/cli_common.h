// Pieces every trainmem subcommand shares: the device flags, and how a subcommand plugs in.
//
// Exit codes (the same for every subcommand):
//   0  success (and --help)
//   1  the run itself failed: out of memory (the report goes to stderr), or an unexpected error
//   2  the request is wrong: a bad flag or value, an unreadable or malformed input file, or a
//      device that cannot be used (--device cuda without a GPU). One line on stderr,
//      "trainmem: error: ...", says what to change.
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli/flag_ranges.h"
#include "common/device/device.h"

namespace trainmem {
class Technique;
}

namespace trainmem::cli {

// Each add_*_command registers a subcommand; when that subcommand is the one chosen on the
// command line, its CLI11 callback stores the work to do in `run`, and main calls it after
// parsing (so that errors of the work itself are not mistaken for parse errors).
using Command = std::function<int()>;

// --device auto|cpu|cuda, --device-memory SIZE, --allocator-config STR.
// The values are checked while parsing (a bad one is a one-line parse error naming the flag), so
// the conversions below cannot fail afterwards.
// --device-memory's valid range: at least one small segment's worth, and at most what the
// allocator's statistics count (common/util/checked_math.h).
constexpr std::size_t kMinDeviceMemory = std::size_t{1} << 20;  // 1 MiB
constexpr std::size_t kMaxDeviceMemory = std::size_t{1} << 62;  // 4 EiB
// parse_byte_size, then the range above (std::invalid_argument naming both limits).
std::size_t parse_device_memory(const std::string& text);

struct DeviceFlags {
  std::string device = "auto";
  std::string device_memory;     // empty: the default (16 GiB budget on cpu, the whole card on cuda)
  std::string allocator_config;  // empty: caching, unlimited max_split_size
  std::string pattern;           // --pattern cpu|cuda (meta); empty: not given

  DeviceOptions to_options() const;
  // Whose rules and allocation pattern the run follows: --pattern on meta, cuda for --device cuda,
  // the CPU's for cpu and meta, and for auto what Device::open would pick (a GPU when one answers).
  DeviceKind backend() const;
  std::size_t device_memory_or(std::size_t fallback) const;
  AllocatorConfig allocator() const;
};

// --pattern cpu|cuda: whose allocation pattern a meta run follows (train --device meta, estimate).
void add_pattern_flag(CLI::App& command, DeviceFlags& flags);
// All three flags (subcommands that open a device: info, and later train, bench, estimate).
void add_device_flags(CLI::App& command, DeviceFlags& flags);
// --device-memory and --allocator-config only (subcommands that simulate a device: replay).
void add_memory_flags(CLI::App& command, DeviceFlags& flags);

// --gpu NAME (estimate, max-batch): a card of the catalog (estimator/gpu_catalog.h), checked while
// parsing; `help` says what the card is for, the names are added to it.
void add_gpu_flag(CLI::App& command, std::string& gpu, const std::string& help);

// The whole program: its description, footer and every subcommand below (cli_commands.cpp). main
// and the flag fuzzer (fuzz/fuzz_flags.cpp) call it on `CLI::App app{"", "trainmem"}`.
void add_commands(CLI::App& app, Command& run);

void add_info_command(CLI::App& app, Command& run);    // cli_info.cpp
void add_replay_command(CLI::App& app, Command& run);  // cli_replay.cpp
void add_train_command(CLI::App& app, Command& run);   // cli_train.cpp
void add_estimate_command(CLI::App& app, Command& run);   // cli_estimate.cpp
void add_plan_command(CLI::App& app, Command& run);       // cli_plan.cpp
void add_max_batch_command(CLI::App& app, Command& run);  // cli_max_batch.cpp
void add_tokens_command(CLI::App& app, Command& run);     // cli_tokens.cpp
void add_flags_command(CLI::App& app, Command& run);      // cli_flags.cpp (hidden: the build's)

// Every command and flag of `app` ("train", "--model", "-h"), each once, the program's own flags
// first: what `trainmem flags` prints.
std::vector<std::string> commands_and_flags(const CLI::App& app);
// The long flags a technique's registration declares ("--recompute"), in its order: what
// `trainmem flags --by-technique` prints for it.
std::vector<std::string> flags_of(const Technique& technique);

}  // namespace trainmem::cli
