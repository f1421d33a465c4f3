// The trainer: hooks are called where they should be, a run is deterministic, and the tiny
// model learns the synthetic corpus (the loss falls well below ln 256 = 5.55).
#include <gtest/gtest.h>

#include <cmath>

#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/tests/cpu_device.h"
#include "common/train/trainer.h"

namespace trainmem {
namespace {

using testing_support::cpu_device;

// Records every hook call as a letter: D data, f/F before/after forward, b/B before/after
// backward, o/O before/after the optimizer.
struct RecordingStrategy : Strategy {
  std::string calls;
  void mark(char hook, std::size_t layer) {
    calls += hook;
    calls += std::to_string(layer);
  }
  std::string name() const override { return "recording"; }
  void on_data_fetch(StepContext&) override { calls += 'D'; }
  void before_layer_forward(StepContext&, std::size_t l) override { mark('f', l); }
  void after_layer_forward(StepContext&, std::size_t l) override { mark('F', l); }
  void before_layer_backward(StepContext&, std::size_t l) override { mark('b', l); }
  void after_layer_backward(StepContext&, std::size_t l) override { mark('B', l); }
  void before_optimizer_step(StepContext&) override { calls += 'o'; }
  void after_optimizer_step(StepContext&) override { calls += 'O'; }
};

TEST(Trainer, CallsEveryHookInOrder) {
  auto device = cpu_device();
  GPT model(*device, model_preset("tiny"), 1);
  SequentialBatches data(*device, synthetic_corpus(10000, 1), 2, 16);
  TrainerOptions options;
  options.batch = 2;
  options.seq = 16;
  options.accumulation_steps = 2;
  RecordingStrategy recording;
  Trainer trainer(model, data, options, {&recording});
  trainer.step();
  EXPECT_EQ(recording.calls, "Df0F0f1F1b1B1b0B0Df0F0f1F1b1B1b0B0oO");
}

TEST(Trainer, RunsAreDeterministic) {
  std::vector<double> losses[2];
  for (auto& run : losses) {
    auto device = cpu_device();
    GPT model(*device, model_preset("tiny"), 7);
    SequentialBatches data(*device, synthetic_corpus(20000, 3), 2, 32);
    TrainerOptions options;
    options.batch = 2;
    options.seq = 32;
    Trainer trainer(model, data, options);
    for (int i = 0; i < 5; ++i) run.push_back(trainer.step().loss);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(Trainer, TheTinyModelLearnsTheSyntheticCorpus) {
  auto device = cpu_device();
  GPT model(*device, model_preset("tiny"), 1);
  SequentialBatches data(*device, synthetic_corpus(1 << 18, 1), 4, 64);
  TrainerOptions options;
  options.batch = 4;
  options.seq = 64;
  options.adam.lr = 1e-3f;
  Trainer trainer(model, data, options);
  const StepResult first = trainer.step();
  EXPECT_NEAR(first.loss, std::log(256.0), 0.1) << "an untrained model is near uniform over 256 bytes";
  StepResult last;
  for (int i = 0; i < 120; ++i) last = trainer.step();
  EXPECT_LT(last.loss, 3.3) << "the loss should fall well below ln(256) = 5.55";
  EXPECT_GT(last.peak_allocated_bytes, last.allocated_bytes);
  // After a step only parameters, gradients, optimizer state and the batch are allocated.
  const MemoryStats s = device->allocator().stats();
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::activations)].current, 0);
  EXPECT_GT(s.by_category[index_of(MemoryCategory::optimizer_state)].current, 0);
}

TEST(Trainer, AModelThatDoesNotFitGivesTheOomReport) {
  auto device = testing_support::cpu_device(std::size_t{64} << 20);
  try {
    GPT model(*device, model_preset("gpt2-124m"), 1);
    FAIL() << "124M parameters cannot fit 64 MiB";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("parameters"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainmem
