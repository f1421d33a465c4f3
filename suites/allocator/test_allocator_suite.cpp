// The empty_cache policy (--empty-cache never|every-step|every:N) and what it does to the recorded
// allocator trace of a real training run (tiny model, CPU device):
//   never        after warm-up no segment is taken or given back: the cache serves every step
//   every-step   every step ends by giving back its free segments (segment_free, phase
//                "optimizer") and the next step takes the same sizes again (segment_alloc)
//   every:N      segments are given back only after steps N, 2N, ...
//   expandable   the same with pages: segment_unmap at the step's end, segment_map again next step
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/tests/enum_table_checks.h"
#include "common/train/trainer.h"
#include "suites/allocator/empty_cache_policy.h"

namespace trainmem::allocator {
namespace {

TEST(EmptyCachePolicy, ParsesTheThreeForms) {
  EXPECT_EQ(EmptyCachePolicy::parse("never").every, 0u);
  EXPECT_EQ(EmptyCachePolicy::parse("every-step").every, 1u);
  EXPECT_EQ(EmptyCachePolicy::parse("every:4").every, 4u);
  EXPECT_EQ(EmptyCachePolicy::parse("every:1").to_string(), "every-step");
  for (const char* text : {"never", "every-step", "every:7"}) EXPECT_EQ(EmptyCachePolicy::parse(text).to_string(), text);
  const EmptyCachePolicy every3 = EmptyCachePolicy::parse("every:3");
  EXPECT_FALSE(every3.empties_after(1));
  EXPECT_FALSE(every3.empties_after(2));
  EXPECT_TRUE(every3.empties_after(3));
  EXPECT_TRUE(every3.empties_after(6));
  EXPECT_FALSE(EmptyCachePolicy::parse("never").empties_after(5));
}

TEST(EmptyCachePolicy, RejectsWhatItCannotReadNamingTheAcceptedForms) {
  for (const char* text : {"sometimes", "every:0", "every:x", "every:", "every:2x", ""}) {
    try {
      EmptyCachePolicy::parse(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("never, every-step, every:N"), std::string::npos) << e.what();
    }
  }
  testing_support::expect_whole_table(kEmptyCacheWords);
}

// The sizes of the recorded events of one action in one step, sorted.
std::vector<std::size_t> sizes_of(const MemoryRecorder& recorder, TraceAction action, long step) {
  std::vector<std::size_t> sizes;
  for (const TraceEvent& e : recorder.events())
    if (e.action == action && e.step == step) sizes.push_back(e.size);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::size_t count_of(const MemoryRecorder& recorder, TraceAction action, long step) {
  return sizes_of(recorder, action, step).size();
}

// The strategy alone on a trainer: the tiny model, B rows, a corpus long enough for `steps` steps.
struct StrategyRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<GPT> model;
  std::unique_ptr<SequentialBatches> data;
  std::unique_ptr<Trainer> trainer;
};
StrategyRun make_allocator_train_run(const DeviceOptions& options, const ModelConfig& config, std::size_t batch,
                                     std::vector<Strategy*> strategies, std::size_t steps) {
  StrategyRun run;
  run.device = Device::open(options);
  run.model = std::make_unique<GPT>(*run.device, config, 1);
  run.data = std::make_unique<SequentialBatches>(*run.device, synthetic_corpus(batch * config.seq * steps + 1, 1), batch,
                                                 config.seq);
  TrainerOptions topt;
  topt.batch = batch;
  topt.seq = config.seq;
  run.trainer = std::make_unique<Trainer>(*run.model, *run.data, topt, std::move(strategies));
  return run;
}

DeviceOptions cpu_device_options(const std::string& allocator_config) {
  DeviceOptions options;
  options.choice = "cpu";
  options.allocator = AllocatorConfig::parse(allocator_config);
  return options;
}

struct Recorded {
  StrategyRun run;
  std::vector<std::int64_t> reserved_at_step_end;
};

// `steps` steps of the tiny model (B = 4, T = 64) with the policy, recording every event.
Recorded train(const std::string& allocator_config, EmptyCacheStrategy& strategy, long steps) {
  Recorded r{make_allocator_train_run(cpu_device_options(allocator_config), model_preset("tiny"), 4, {&strategy},
                                      static_cast<std::size_t>(steps)),
             {}};
  r.run.device->allocator().recorder().enable();
  for (long s = 0; s < steps; ++s) r.reserved_at_step_end.push_back(r.run.trainer->step().reserved_bytes);
  return r;
}

TEST(EmptyCacheStrategy, NeverTakesOrGivesBackNoSegmentAfterWarmUp) {
  EmptyCacheStrategy never(EmptyCachePolicy::parse("never"));
  const Recorded r = train("", never, 5);
  const MemoryRecorder& rec = r.run.device->allocator().recorder();
  EXPECT_GT(count_of(rec, TraceAction::segment_alloc, 1), 0u);  // the first step takes its segments
  for (long s = 1; s <= 5; ++s) EXPECT_EQ(count_of(rec, TraceAction::segment_free, s), 0u) << "step " << s;
  // Step 1 allocates the Adam moments after its activations are freed, so step 2 may still need
  // a segment; from step 3 on, every request is served from the cache.
  for (long s = 3; s <= 5; ++s) EXPECT_EQ(count_of(rec, TraceAction::segment_alloc, s), 0u) << "step " << s;
  for (long s = 3; s <= 5; ++s) EXPECT_EQ(r.reserved_at_step_end[s - 1], r.reserved_at_step_end[1]) << "step " << s;
  EXPECT_EQ(never.calls(), 0);
}

TEST(EmptyCacheStrategy, EveryStepGivesSegmentsBackAtEachStepEndAndTakesThemAgain) {
  EmptyCacheStrategy every_step(EmptyCachePolicy::parse("every-step"));
  const Recorded r = train("", every_step, 5);
  const CachingAllocator& allocator = r.run.device->allocator();
  const MemoryRecorder& rec = allocator.recorder();
  EXPECT_EQ(every_step.calls(), 5);
  for (long s = 1; s <= 5; ++s) {
    EXPECT_GT(count_of(rec, TraceAction::segment_free, s), 0u) << "step " << s;
    // Every segment_free of the step happens at its end: after the optimizer step.
    for (const TraceEvent& e : rec.events())
      if (e.action == TraceAction::segment_free && e.step == s) {
        EXPECT_EQ(rec.phases()[e.phase], "optimizer");
      }
  }
  // From step 2 on the steps are alike: each takes again exactly the segments the previous step
  // gave back at its end.
  for (long s = 3; s <= 5; ++s) {
    EXPECT_EQ(sizes_of(rec, TraceAction::segment_alloc, s), sizes_of(rec, TraceAction::segment_free, s - 1))
        << "step " << s;
    EXPECT_EQ(r.reserved_at_step_end[s - 1], r.reserved_at_step_end[1]) << "step " << s;
  }
  // At a step's end nothing is cached whole: every segment left holds a live block.
  for (const SegmentSnapshot& seg : allocator.snapshot()) {
    EXPECT_GT(seg.active_size, 0u) << "segment " << seg.address;
  }
}

TEST(EmptyCacheStrategy, EveryNGivesSegmentsBackOnlyAfterEveryNthStep) {
  EmptyCacheStrategy every2(EmptyCachePolicy::parse("every:2"));
  const Recorded r = train("", every2, 4);
  const MemoryRecorder& rec = r.run.device->allocator().recorder();
  EXPECT_EQ(every2.calls(), 2);
  EXPECT_EQ(count_of(rec, TraceAction::segment_free, 1), 0u);
  EXPECT_GT(count_of(rec, TraceAction::segment_free, 2), 0u);
  EXPECT_EQ(count_of(rec, TraceAction::segment_free, 3), 0u);
  EXPECT_GT(count_of(rec, TraceAction::segment_free, 4), 0u);
  // What step 2 gave back, step 3 takes again; step 4 takes nothing (step 3 kept its cache).
  EXPECT_EQ(sizes_of(rec, TraceAction::segment_alloc, 3), sizes_of(rec, TraceAction::segment_free, 2));
  EXPECT_EQ(count_of(rec, TraceAction::segment_alloc, 4), 0u);
}

TEST(EmptyCacheStrategy, WithExpandableSegmentsPagesAreUnmappedAndMappedAgain) {
  EmptyCacheStrategy every_step(EmptyCachePolicy::parse("every-step"));
  const Recorded r = train("expandable_segments:True", every_step, 4);
  const MemoryRecorder& rec = r.run.device->allocator().recorder();
  for (long s = 1; s <= 4; ++s) {
    EXPECT_EQ(count_of(rec, TraceAction::segment_alloc, s), 0u) << "no fixed segments";
    EXPECT_GT(count_of(rec, TraceAction::segment_unmap, s), 0u) << "step " << s;
  }
  for (long s = 3; s <= 4; ++s) {
    // The bytes unmapped at the end of step s - 1 are mapped again during step s.
    std::size_t mapped = 0, unmapped = 0;
    for (std::size_t b : sizes_of(rec, TraceAction::segment_map, s)) mapped += b;
    for (std::size_t b : sizes_of(rec, TraceAction::segment_unmap, s - 1)) unmapped += b;
    EXPECT_EQ(mapped, unmapped) << "step " << s;
  }

  EmptyCacheStrategy never(EmptyCachePolicy::parse("never"));
  const Recorded kept = train("expandable_segments:True", never, 4);
  const MemoryRecorder& kept_rec = kept.run.device->allocator().recorder();
  for (long s = 3; s <= 4; ++s) {
    EXPECT_EQ(count_of(kept_rec, TraceAction::segment_map, s), 0u) << "step " << s;
    EXPECT_EQ(count_of(kept_rec, TraceAction::segment_unmap, s), 0u) << "step " << s;
  }
}

TEST(EmptyCacheStrategy, DoesNotChangeTheTraining) {
  // empty_cache only moves memory between the cache and the device: the losses are identical.
  EmptyCacheStrategy never(EmptyCachePolicy::parse("never")), every_step(EmptyCachePolicy::parse("every-step"));
  StrategyRun a = make_allocator_train_run(cpu_device_options(""), model_preset("tiny"), 4, {&never}, 3);
  StrategyRun b = make_allocator_train_run(cpu_device_options("expandable_segments:True"), model_preset("tiny"), 4,
                                        {&every_step}, 3);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(a.trainer->step().loss, b.trainer->step().loss) << "step " << s + 1;
}

}  // namespace
}  // namespace trainmem::allocator
