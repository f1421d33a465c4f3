#include "suites/trainmem/estimator/oom_advice.h"

#include <algorithm>
#include <optional>

#include "common/util/byte_size.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::estimator {

namespace {


// Every registered technique's remedies, the cheapest first (the order of registration among equals).
std::vector<std::pair<const Technique*, Remedy>> all_remedies(const TrainingSetup& failed) {
  std::vector<std::pair<const Technique*, Remedy>> all;
  for (const Technique* t : registered_techniques())
    for (Remedy& r : t->remedies(failed)) all.emplace_back(t, std::move(r));
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second.cost < b.second.cost; });
  return all;
}

// ", with 18.69 GiB in host memory" for a remedy that offloads ("" otherwise).
std::string on_host(const FittingRemedy& fix) {
  return fix.host_bytes ? ", with " + format_bytes(fix.host_bytes) + " in host memory" : std::string();
}

}  // namespace

std::vector<std::string> category_advice(const TrainingSetup& setup, const OomReport& report) {
  std::vector<std::string> advice;
  for (MemoryCategory c : categories_to_shrink(report)) {
    const std::vector<std::string> ways = registered_techniques().category_remedies(setup, c);
    if (ways.empty()) continue;
    std::string line = std::string(to_string(c)) + ": ";  // "activations: a, b, or c"
    for (std::size_t i = 0; i < ways.size(); ++i) {
      if (i > 0) line += i + 1 < ways.size() ? ", " : ways.size() > 2 ? ", or " : " or ";
      line += ways[i];
    }
    advice.push_back(std::move(line));
  }
  return advice;
}

std::vector<FittingRemedy> remedies_that_fit(const TrainingSetup& failed, std::size_t capacity) {
  std::vector<FittingRemedy> out;
  // The first variant that fits; false when none does.
  auto consider = [&](const std::vector<Remedy::Variant>& variants) {
    for (const Remedy::Variant& v : variants) {
      try {
        if (!fits_on(v.setup, capacity)) continue;
        const std::optional<ShardedFormulas> sharded = formula_bytes(v.setup).sharded;
        out.push_back({v.flags, v.setup, run_on_meta(v.setup, 0, 0, PeakMoment::skip).peak_reserved,
                       sharded ? sharded->host : 0});
        return;
      } catch (const std::invalid_argument&) {
        // a combination the model refuses (e.g. cuDNN attention on the CPU): not a remedy
      }
    }
  };
  const auto all = all_remedies(failed);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& [technique, remedy] = all[i];
    const std::vector<Remedy::Variant> alone = remedy.variants(failed);
    consider(alone);
    if (alone.empty() || !remedy.combines) continue;
    // With the cheaper remedies of the other techniques: this one first (a cheaper one may apply
    // only after it, as GPU flash attention after bf16), then the cheaper ones, the dearest first.
    Remedy::Variant combined = alone.front();
    std::size_t joined = 0;
    for (std::size_t j = i; j-- > 0;) {
      const auto& [other, cheaper] = all[j];
      if (other == technique || !cheaper.combines) continue;
      const std::vector<Remedy::Variant> with = cheaper.variants(combined.setup);
      if (with.empty()) continue;
      combined = {with.front().flags + " " + combined.flags, with.front().setup};
      ++joined;
    }
    if (joined > 0) consider({combined});
  }
  return out;
}

std::vector<std::string> estimator_oom_advice(const TrainingSetup& failed, std::size_t capacity, const OomReport& report) {
  std::vector<std::string> advice;
  OomReport known = report;
  try {
    const MetaRun unlimited = run_on_meta(failed, 0, 0, PeakMoment::skip);
    const std::size_t before = unlimited.peak_reserved;
    known.live_tensors_exceed_device = unlimited.peak_allocated > capacity;
    const std::vector<FittingRemedy> fixes = remedies_that_fit(failed, capacity);
    if (!fixes.empty()) {
      const FittingRemedy& best = fixes.front();
      advice.push_back(best.flags + " would bring the peak reserved from " + format_bytes(before) + " to " +
                       format_bytes(best.peak_reserved) + on_host(best) + " (usable " + format_bytes(capacity) +
                       "; the cheapest technique that fits, by trainmem estimate)");
      if (fixes.size() > 1)
        advice.push_back("also fits: " + fixes[1].flags + " (peak reserved " + format_bytes(fixes[1].peak_reserved) +
                         on_host(fixes[1]) + ")");
    } else {
      advice.push_back("no technique on this device makes this fit " + format_bytes(capacity) + " (predicted peak reserved " +
                       format_bytes(before) + ", offload included): shard the model states across devices (ZeRO/FSDP) or " +
                       "use a larger device; 'trainmem estimate' shows the figures");
    }
  } catch (const std::exception& e) {
    advice.push_back(std::string("(the estimator could not advise: ") + e.what() + ")");
  }
  std::vector<std::string> more = fragmentation_advice(known);
  for (std::string& line : category_advice(failed, known)) more.push_back(std::move(line));
  if (more.empty()) more = default_oom_advice(known);  // a larger device
  for (std::string& line : more) advice.push_back(std::move(line));
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
