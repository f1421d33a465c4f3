// --empty-cache never|every-step|every:N: calling the allocator's empty_cache()
// (torch.cuda.empty_cache()) after the optimizer step, as the guides advise.
//
//   never        the default: the cache keeps every segment it has taken
//   every-step   after every optimizer step: every segment with no live block goes back to the
//                device (fixed segments), or every wholly free page is unmapped (expandable)
//   every:N      after steps N, 2N, 3N, ...
//
// After the optimizer step only parameters, gradients, optimizer state and the data buffers are
// live; the activations of the step are all free, so this is when the cache holds the most.
#pragma once
#include <cstddef>
#include <string>

#include "common/cli/enum_table.h"
#include "common/train/strategy.h"

namespace trainmem::allocator {

struct EmptyCachePolicy {
  std::size_t every = 0;  // 0: never; N: after every N-th optimizer step (1: every step)

  // never | every-step | every:N (N >= 1; every:1 is every-step). Throws std::invalid_argument
  // naming the accepted forms.
  static EmptyCachePolicy parse(const std::string& text);
  std::string to_string() const;  // never | every-step | every:N
  // True after optimizer step `step` (1, 2, ...): step is a multiple of N.
  bool empties_after(long step) const { return every != 0 && step > 0 && static_cast<std::size_t>(step) % every == 0; }
};

// The policies --empty-cache names by a word alone, by their `every`; every:N is read by
// EmptyCachePolicy::parse.
inline constexpr auto kEmptyCacheWords = cli::enum_table<std::size_t>("--empty-cache", {{0, "never"}, {1, "every-step"}});

class EmptyCacheStrategy : public Strategy {
 public:
  explicit EmptyCacheStrategy(EmptyCachePolicy policy) : policy_(policy) {}
  std::string name() const override { return "empty_cache:" + policy_.to_string(); }
  void after_optimizer_step(StepContext& ctx) override;

  const EmptyCachePolicy& policy() const { return policy_; }
  long calls() const { return calls_; }  // how many times empty_cache() was called

 private:
  EmptyCachePolicy policy_;
  long calls_ = 0;
};

}  // namespace trainmem::allocator
