// Fuzz target: the restricted pickle reader (common/util/restricted_pickle.h) on arbitrary bytes,
// as `trainmem replay` reads a PyTorch snapshot, with small limits (so that an expanding memo or a
// deep nesting is met quickly), and the result printed as JSON the way a caller would.
//
// Expected, not findings: PickleError (a one-line input error). Anything else — a crash, a
// sanitizer report, a hang, any other exception (the dump of what the reader returned must not
// throw: its strings are valid UTF-8) — is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/util/restricted_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainmem::PickleLimits limits;
  limits.max_depth = 64;
  limits.max_values = 1u << 16;
  try {
    const nlohmann::json value = trainmem::read_restricted_pickle(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pickle", limits);
    (void)value.dump();
    (void)trainmem::looks_like_pickle(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const trainmem::PickleError&) {
    return 0;
  }
  return 0;
}
