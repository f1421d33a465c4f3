#include "suites/allocator/empty_cache_policy.h"

#include <charconv>
#include <optional>
#include <stdexcept>

#include "common/model/model.h"

namespace trainmem::allocator {

EmptyCachePolicy EmptyCachePolicy::parse(const std::string& text) {
  const std::string accepted = " (accepted: " + kEmptyCacheWords.joined(", ") + ", every:N with N >= 1)";
  EmptyCachePolicy policy;
  if (const std::optional<std::size_t> every = kEmptyCacheWords.find(text)) {
    policy.every = *every;
    return policy;
  }
  if (text.rfind("every:", 0) == 0) {
    const std::string n = text.substr(6);
    std::size_t value = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), value);
    if (ec != std::errc() || end != n.data() + n.size() || value == 0)
      throw std::invalid_argument("--empty-cache every:N needs a whole number N >= 1, not '" + n + "'" + accepted);
    policy.every = value;
    return policy;
  }
  throw std::invalid_argument("--empty-cache '" + text + "' is not a policy" + accepted);
}

std::string EmptyCachePolicy::to_string() const {
  if (every <= 1) return std::string(kEmptyCacheWords.name(every));
  std::string s = "every:";
  s += std::to_string(every);
  return s;
}

void EmptyCacheStrategy::after_optimizer_step(StepContext& ctx) {
  if (!policy_.empties_after(ctx.step)) return;
  ctx.model.device().allocator().empty_cache();
  ++calls_;
}

}  // namespace trainmem::allocator
