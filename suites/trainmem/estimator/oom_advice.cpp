#include "suites/trainmem/estimator/oom_advice.h"

#include <functional>

#include "common/util/byte_size.h"
#include "suites/trainmem/estimator/memory_estimate.h"

namespace trainmem::estimator {

namespace {

struct Candidate {
  std::string flags;
  std::function<bool(TrainingSetup&)> apply;  // false: does not apply to this setup
};

bool set_recompute(TrainingSetup& s, const char* policy) {
  const RecomputePolicy p = RecomputePolicy::parse(policy);
  if (s.recompute.kind == p.kind || s.recompute.kind == RecomputePolicy::Kind::full) return false;
  s.recompute = p;
  return true;
}
bool set_bf16(TrainingSetup& s) {
  if (s.precision != Precision::fp32) return false;
  s.precision = Precision::bf16;
  return true;
}
bool set_flash(TrainingSetup& s) {
  if (s.attention != AttentionKind::naive) return false;
  s.attention = AttentionKind::flash;
  return s.backend != DeviceKind::cuda || s.precision != Precision::fp32;  // GPU flash runs in 16 bits
}

// The cheapest first (see oom_advice.h).
std::vector<Candidate> candidates() {
  return {
      {"--loader lazy",
       [](TrainingSetup& s) {
         if (s.loader != Loader::eager) return false;
         s.loader = Loader::lazy;
         return true;
       }},
      {"--attention flash", set_flash},
      {"--precision bf16", set_bf16},
      {"--precision bf16 --attention flash", [](TrainingSetup& s) { return set_bf16(s) && set_flash(s); }},
      {"--recompute selective", [](TrainingSetup& s) { return set_recompute(s, "selective"); }},
      {"--precision bf16 --attention flash --recompute selective",
       [](TrainingSetup& s) { return set_bf16(s) && set_flash(s) && set_recompute(s, "selective"); }},
      {"--recompute full", [](TrainingSetup& s) { return set_recompute(s, "full"); }},
      {"--precision bf16 --attention flash --recompute full",
       [](TrainingSetup& s) { return set_bf16(s) && set_flash(s) && set_recompute(s, "full"); }},
  };
}

std::string fmt(std::size_t bytes) { return format_bytes(static_cast<std::uint64_t>(bytes)); }

}  // namespace

std::vector<Remedy> remedies_that_fit(const TrainingSetup& failed, std::size_t capacity) {
  std::vector<Remedy> out;
  auto consider = [&](std::string flags, const TrainingSetup& s) {
    try {
      if (!fits_on(s, capacity)) return;
      out.push_back({std::move(flags), s, run_on_meta(s, 0, 0, PeakMoment::skip).peak_reserved});
    } catch (const std::invalid_argument&) {
      // a combination the model refuses (e.g. cuDNN attention on the CPU): not a remedy
    }
  };
  const std::vector<Candidate> list = candidates();
  // The single techniques cheaper than smaller micro-batches (lazy, flash, bf16, selective)...
  std::size_t i = 0;
  for (; i < list.size() && list[i].flags != "--recompute full"; ++i) {
    TrainingSetup s = failed;
    if (list[i].apply(s)) consider(list[i].flags, s);
  }
  // ... then the same tokens per step in smaller micro-batches: the largest b < B dividing B.
  for (std::size_t b = failed.batch / 2; b >= 1; --b) {
    if (failed.batch % b != 0) continue;
    TrainingSetup s = failed;
    s.batch = b;
    s.accum = failed.accum * (failed.batch / b);
    if (!fits_on(s, capacity)) continue;
    std::string flags = "--batch ";
    flags += std::to_string(b);
    flags += " --accum ";
    flags += std::to_string(s.accum);
    consider(flags, s);
    break;
  }
  // ... then full recompute and the combinations with it.
  for (; i < list.size(); ++i) {
    TrainingSetup s = failed;
    if (list[i].apply(s)) consider(list[i].flags, s);
  }
  return out;
}

std::vector<std::string> estimator_oom_advice(const TrainingSetup& failed, std::size_t capacity, const OomReport& report) {
  std::vector<std::string> advice;
  try {
    const std::size_t before = run_on_meta(failed, 0, 0, PeakMoment::skip).peak_reserved;
    const std::vector<Remedy> fixes = remedies_that_fit(failed, capacity);
    if (!fixes.empty()) {
      const Remedy& best = fixes.front();
      advice.push_back(best.flags + " would bring the peak reserved from " + fmt(before) + " to " +
                       fmt(best.peak_reserved) + " (usable " + fmt(capacity) + "; the cheapest technique that fits, " +
                       "by trainmem estimate)");
      if (fixes.size() > 1)
        advice.push_back("also fits: " + fixes[1].flags + " (peak reserved " + fmt(fixes[1].peak_reserved) + ")");
    } else {
      advice.push_back("no single-device technique makes this fit " + fmt(capacity) + " (predicted peak reserved " +
                       fmt(before) + "): shard the model states across devices (ZeRO/FSDP) or use a " +
                       "larger device; 'trainmem estimate' shows the figures");
    }
  } catch (const std::exception& e) {
    advice.push_back(std::string("(the estimator could not advise: ") + e.what() + ")");
  }
  for (std::string& line : default_oom_advice(report)) advice.push_back(std::move(line));
  return advice;
}

CachingAllocator::OomAdvisor make_oom_advisor(TrainingSetup setup) {
  return [setup](const OomReport& report) {
    // What the allocator could have had: what it held plus what the device still had free (on a
    // GPU this leaves out the CUDA context and anything else outside the allocator).
    return estimator_oom_advice(setup, report.reserved_bytes + report.device_free_bytes, report);
  };
}

}  // namespace trainmem::estimator
