// The techniques two at a time, from their samples (Technique::sample_setups, sample_setups.h):
// each sample of one technique that names no other technique's flag, with each such sample of
// another, on one command line. The combination is accepted, or refused by a rule whose message
// names one of its flags; an accepted one trains on the CPU, and the estimate (the meta run)
// equals two real steps to the byte, as each sample alone does (test_estimator.cpp, and the
// meta device's allocation sequence, test_meta_device.cpp). A new technique is paired with every
// other by its registration alone. (What each technique promises within one combined run:
// test_composition.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/tests/sanitizers.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "suites/trainmem/estimator/trial_run.h"
#include "suites/trainmem/tests/sample_setups.h"

namespace trainmem {
namespace {

using testing_support::flag_names;
using testing_support::setup_from_flags;

// Every registered technique gives samples, and train takes each.
TEST(TechniquePairs, EveryTechniqueGivesSamplesThatTrainTakes) {
  for (const Technique* technique : registered_techniques()) {
    SCOPED_TRACE(technique->name());
    EXPECT_FALSE(technique->sample_setups().empty()) << "a technique gives its samples (Technique::sample_setups)";
    for (const SampleSetup& sample : technique->sample_setups()) {
      try {
        setup_from_flags(sample.flags);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "'" << sample.flags << "': " << e.what();
      }
    }
  }
}

// Whether `flags` names a flag of a registered technique other than `technique`.
bool names_another_techniques_flag(const Technique& technique, const std::string& flags) {
  for (const Technique* other : registered_techniques()) {
    if (other == &technique) continue;
    const std::vector<std::string> theirs = testing_support::flags_of(*other);
    for (const std::string& name : flag_names(flags))
      if (std::binary_search(theirs.begin(), theirs.end(), name)) return true;
  }
  return false;
}

// Every two techniques, each sample of one with each of the other: those that name no other
// technique's flag (they may name the core's, but not the same one twice).
std::vector<std::string> combinations() {
  std::vector<std::vector<std::string>> own;  // per technique, in the registrations' order
  for (const Technique* technique : registered_techniques()) {
    own.emplace_back();
    for (const SampleSetup& sample : technique->sample_setups())
      if (!names_another_techniques_flag(*technique, sample.flags)) own.back().push_back(sample.flags);
  }
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < own.size(); ++i)
    for (std::size_t j = i + 1; j < own.size(); ++j)
      for (const std::string& a : own[i])
        for (const std::string& b : own[j]) {
          const std::vector<std::string> x = flag_names(a), y = flag_names(b);
          std::vector<std::string> both;
          std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
          if (both.empty()) lines.push_back(a + " " + b);
        }
  return lines;
}

TEST(TechniquePairs, EveryTwoTrainTogetherOrARuleSaysWhyNot) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("test_composition's mixes and each sample's meta and real runs (MetaDevice)");
  int accepted = 0, refused = 0;
  for (const std::string& flags : combinations()) {
    SCOPED_TRACE(flags);
    TrainingSetup setup;
    try {
      setup = setup_from_flags(flags);
    } catch (const std::invalid_argument& e) {
      ++refused;
      std::printf("refused   %s: %s\n", flags.c_str(), e.what());
      const std::string message = e.what();
      const std::vector<std::string> names = flag_names(flags);
      EXPECT_TRUE(std::any_of(names.begin(), names.end(),
                              [&](const std::string& name) { return message.find(name) != std::string::npos; }))
          << "the refusal names none of the flags: " << message;
      continue;
    }
    ++accepted;
    std::printf("accepted  %s\n", flags.c_str());
    const estimator::MemoryEstimate e = estimator::estimate_memory(setup);
    estimator::TrialOptions options;
    options.capacity = 2 * GiB;
    const estimator::TrialResult measured = estimator::run_trial(setup, options);
    ASSERT_FALSE(measured.oom.has_value());
    EXPECT_EQ(e.peak_allocated(), static_cast<std::size_t>(measured.stats.allocated_bytes[0].peak));
    EXPECT_EQ(e.peak_reserved(), static_cast<std::size_t>(measured.stats.reserved_bytes[0].peak));
    for (MemoryCategory c : kAllMemoryCategories)
      EXPECT_EQ(e.category_peak(c), static_cast<std::size_t>(measured.stats.by_category[index_of(c)].peak)) << to_string(c);
  }
  std::printf("%d combinations of two techniques: %d accepted and estimated, %d refused\n", accepted + refused, accepted,
              refused);
  EXPECT_GT(accepted, refused) << "most combinations should train";
}

}  // namespace
}  // namespace trainmem
