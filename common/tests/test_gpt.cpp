// The GPT model: its parameter count, where its memory goes, and the gradient check that keeps
// every later technique honest: the model's analytic gradients (float, the real code path) agree
// with central finite differences of the loss computed in double precision by an independent
// forward pass written here from the same definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "common/model/gpt.h"
#include "common/model/parameter_table.h"
#include "common/train/adamw_optimizer.h"
#include "common/tests/cpu_device.h"
#include "common/tests/model_step.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace trainmem {
namespace {

using testing_support::Batch;
using testing_support::cpu_device;
using testing_support::forward_backward;
using testing_support::random_batch;

// The model's forward in double precision on the host, with the parameters laid out as
// GPT::parameters() lays them out. Returns the mean loss.
double gpt_reference_loss(const ModelConfig& cfg, const std::vector<double>& params,
                          const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets,
                          std::size_t B, std::size_t T) {
  namespace cpu = kernels::cpu;
  const std::size_t C = cfg.dim, V = cfg.vocab, Vp = padded_vocab(V), NH = cfg.heads, N = B * T;
  std::size_t offset = 0;
  auto take = [&](std::size_t n) {
    const double* ptr = params.data() + offset;
    offset += n;
    return ptr;
  };
  const double* wte = take(Vp * C);  // its first V rows are the tokens'; the padding rows are not read
  const double* wpe = take(cfg.seq * C);
  std::vector<double> x(N * C), ln(N * C), mean(N), rstd(N), qkv(N * 3 * C), pre(B * NH * T * T), att(B * NH * T * T),
      atty(N * C), proj(N * C), res2(N * C), fch(N * 4 * C), gel(N * 4 * C);
  cpu::embedding_forward(x.data(), tokens.data(), wte, wpe, B, T, C);
  for (std::size_t l = 0; l < cfg.layers; ++l) {
    const double *ln1w = take(C), *ln1b = take(C), *qkvw = take(3 * C * C), *qkvb = take(3 * C), *apw = take(C * C),
                 *apb = take(C), *ln2w = take(C), *ln2b = take(C), *fcw = take(4 * C * C), *fcb = take(4 * C),
                 *fpw = take(4 * C * C), *fpb = take(C);
    cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), ln1w, ln1b, N, C);
    cpu::matmul_forward(qkv.data(), ln.data(), qkvw, qkvb, N, C, 3 * C);
    cpu::attention_forward(atty.data(), pre.data(), att.data(), qkv.data(), B, T, C, NH);
    cpu::matmul_forward(proj.data(), atty.data(), apw, apb, N, C, C);
    cpu::residual_forward(res2.data(), x.data(), proj.data(), N * C);
    cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), res2.data(), ln2w, ln2b, N, C);
    cpu::matmul_forward(fch.data(), ln.data(), fcw, fcb, N, C, 4 * C);
    cpu::gelu_forward(gel.data(), fch.data(), N * 4 * C);
    cpu::matmul_forward(proj.data(), gel.data(), fpw, fpb, N, 4 * C, C);
    cpu::residual_forward(x.data(), res2.data(), proj.data(), N * C);
  }
  const double *lnfw = take(C), *lnfb = take(C);
  cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), lnfw, lnfb, N, C);
  // The unpadded head: V logits a row from wte's first V rows.
  std::vector<double> logits(N * V), losses(N);
  cpu::matmul_forward(logits.data(), ln.data(), wte, static_cast<const double*>(nullptr), N, C, V);
  cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, V);
  double sum = 0;
  for (double v : losses) sum += v;
  return sum / static_cast<double>(N);
}

TEST(Gpt, VocabularyIsPaddedToAMultipleOf64) {
  EXPECT_EQ(padded_vocab(50257), 50304u);  // GPT-2's, as llm.c pads it
  EXPECT_EQ(padded_vocab(256), 256u);      // tiny and small: already a multiple, unchanged
  EXPECT_EQ(padded_vocab(64), 64u);
  EXPECT_EQ(padded_vocab(65), 128u);
  EXPECT_EQ(padded_vocab(2), 64u);
  EXPECT_EQ(padded_vocab(65536), 65536u);  // the largest vocabulary (uint16 tokens)
}

TEST(Gpt, PresetsHaveTheirPublishedParameterCountsPlusTheVocabularyPadding) {
  // GPT-2's published counts (the tied head, V = 50257), plus wte's (Vp - V) C padding elements:
  // Vp = 50304, 47 rows of C. GPT-2 small: 124,439,808 + 47 * 768 = 124,475,904, llm.c's count.
  struct Published {
    const char* name;
    std::size_t parameters, dim;
  };
  for (const Published& p : {Published{"gpt2-124m", 124439808, 768}, Published{"gpt2-350m", 354823168, 1024},
                             Published{"gpt2-774m", 774030080, 1280}, Published{"gpt2-1.5b", 1557611200, 1600}}) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(model_preset(p.name).num_parameters(), p.parameters + (50304 - 50257) * p.dim);
  }
  EXPECT_EQ(model_preset("gpt2-124m").num_parameters(), 124475904u);
  EXPECT_THROW(model_preset("gpt5"), ModelConfigError);
  // V C + T C + L (12 C^2 + 13 C) + 2 C (test_parameter_table.cpp), L = 2, V = 256, T = 128:
  // C = 128: 32768 + 16384 + 2 (196608 + 1664) + 256; C = 256: 65536 + 32768 + 2 (786432 + 3328) + 512
  EXPECT_EQ(model_preset("tiny-hd64").num_parameters(), 445952u);
  EXPECT_EQ(model_preset("tiny-hd128").num_parameters(), 1678336u);
  ModelConfig bad = model_preset("tiny");
  bad.heads = 3;
  EXPECT_THROW(bad.validate(), ModelConfigError);
}

// The models that run flash and cuDNN attention on a GPU: head dims the CUDA kernels take
// (kernels/flash_attention.h: 64 and 128) and T a whole number of their 64-row tiles.
TEST(Gpt, TheHeadDimPresetsHaveTheHeadDimsOfTheFlashKernels) {
  for (const auto& [name, head_dim] : {std::pair{"tiny-hd64", 64u}, std::pair{"tiny-hd128", 128u}}) {
    const ModelConfig c = model_preset(name);
    EXPECT_EQ(c.dim / c.heads, head_dim) << name;
    EXPECT_EQ(c.seq % 64, 0u) << name;
  }
  const std::vector<std::string> names = model_preset_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "tiny-hd64"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "tiny-hd128"), names.end());
}

TEST(Gpt, ParametersAndGradientsAreAccountedInTheirCategories) {
  auto device = cpu_device();
  GPT model(*device, model_preset("tiny"), 1);
  const MemoryStats s = device->allocator().stats();
  const auto bytes = static_cast<std::int64_t>(model.num_parameters() * 4);
  // Every parameter tensor is its own block; each block is its byte size rounded up to 512.
  std::int64_t rounded = 0;
  for (const Parameter& p : model.parameters()) rounded += static_cast<std::int64_t>(round_size(p.value.nbytes()));
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::parameters)].current, rounded);
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::gradients)].current, rounded);
  EXPECT_GE(rounded, bytes);
  std::size_t count = 0;
  for (const Parameter& p : model.parameters()) count += static_cast<std::size_t>(p.value.numel());
  EXPECT_EQ(count, model.num_parameters());
}

TEST(Gpt, ActivationsAreFreedByBackwardAndTheStepEndsWhereItBegan) {
  auto device = cpu_device();
  GPT model(*device, model_preset("tiny"), 1);
  testing_support::expect_a_step_ends_where_it_began(model);  // on 2 x 64 tokens
}

// V = 23 is padded to Vp = 64 (model_config.h): wte is [Vp, C] and the logits [B, T, Vp]; the padding
// rows of wte start at zero, get a gradient of exactly 0 (the cross-entropy gives the padded logits
// none) and stay zero through AdamW steps with weight decay. The loss is the unpadded model's
// (the gradient check below compares it with a reference that has no padding).
TEST(Gpt, VocabularyPaddingRowsStartZeroGetNoGradientAndStayZero) {
  ModelConfig cfg = model_preset("tiny");
  cfg.vocab = 23;
  const std::size_t V = cfg.vocab, Vp = padded_vocab(V), C = cfg.dim, B = 2, T = 16;
  ASSERT_EQ(Vp, 64u);
  auto device = cpu_device();
  GPT model(*device, cfg, 3);
  const Tensor& wte = model.parameters()[ParameterTable::kWte].value;
  ASSERT_EQ(wte.shape(), (std::vector<std::int64_t>{64, static_cast<std::int64_t>(C)}));
  auto padding_of = [&](const std::vector<float>& all) {  // wte's rows V..Vp-1 (wte comes first)
    return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(V * C),
                              all.begin() + static_cast<std::ptrdiff_t>(Vp * C));
  };
  const std::vector<float> zeros((Vp - V) * C, 0.0f), initial = model.parameter_values();
  EXPECT_EQ(padding_of(initial), zeros) << "initialized";
  EXPECT_GT(*std::max_element(initial.begin(), initial.begin() + static_cast<std::ptrdiff_t>(V * C)), 0.0f)
      << "the real rows are drawn";

  const Batch batch = random_batch(*device, B, T, V, 11);
  // The head saves lnf [B,T,C], its mean and rstd [B,T] (fp32) and the logits [B,T,Vp], each
  // rounded to 512 bytes by the allocator.
  auto activations = [&] { return device->allocator().stats().by_category[index_of(MemoryCategory::activations)].current; };
  model.begin(batch.tokens, batch.targets);
  model.embed_forward();
  for (std::size_t l = 0; l < cfg.layers; ++l) model.layer_forward(l);
  const std::int64_t before_head = activations();
  model.head_forward();
  EXPECT_EQ(static_cast<std::size_t>(activations() - before_head),
            round_size(B * T * C * 4) + 2 * round_size(B * T * 4) + round_size(B * T * Vp * 4));
  model.end();

  kernels::AdamWHyper hyper;
  hyper.weight_decay = 0.1f;
  AdamWOptimizer optimizer(model, hyper, 1.0f);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    forward_backward(model, batch);
    EXPECT_EQ(padding_of(model.gradient_values()), zeros) << "gradient";
    optimizer.step();
    EXPECT_EQ(padding_of(model.parameter_values()), zeros) << "after the update";
    model.zero_grad();
  }
}

TEST(Gpt, AnalyticGradientsMatchDoublePrecisionFiniteDifferences) {
  ModelConfig cfg = model_preset("tiny");
  cfg.seq = 8;  // small enough for finite differences over many parameters
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.vocab = 23;
  const std::size_t B = 2, T = 7;  // T < seq: a shorter sequence than the context is allowed
  auto device = cpu_device();
  GPT model(*device, cfg, 42);
  // Random values everywhere (also biases and layernorm weights); model_step.h has the tolerance.
  testing_support::expect_gradients_match_reference(model, B, T, [&](const std::vector<double>& p, const Batch& b) {
    return gpt_reference_loss(cfg, p, b.host_tokens, b.host_targets, B, T);
  });
}

// Training's head forward makes the loss and its gradient in one pass (kernels/cross_entropy.h):
// the loss is the evaluation's, bit for bit, and a backward after an evaluation's forward (which
// made no gradient) is the caller's bug, refused.
TEST(Gpt, TheTrainingForwardGivesTheEvaluationLossAndTheBackwardNeedsIt) {
  auto device = cpu_device();
  const ModelConfig cfg = model_preset("tiny");
  GPT model(*device, cfg, 1);
  const Batch batch = random_batch(*device, 2, 16, cfg.vocab, 5);
  auto forward_to_head = [&] {
    model.begin(batch.tokens, batch.targets);
    model.embed_forward();
    for (std::size_t l = 0; l < cfg.layers; ++l) model.layer_forward(l);
  };
  forward_to_head();
  const double evaluation = model.head_forward();
  EXPECT_THROW(model.head_backward(), std::logic_error);
  model.end();
  forward_to_head();
  EXPECT_EQ(model.head_forward(1.0f / 32), evaluation);
  EXPECT_NO_THROW(model.head_backward());
  model.end();
}

TEST(Gpt, ASequenceLongerThanTheContextIsAClearError) {
  auto device = cpu_device();
  ModelConfig cfg = model_preset("tiny");
  GPT model(*device, cfg, 1);
  const Batch batch = random_batch(*device, 1, cfg.seq + 1, cfg.vocab, 5);
  EXPECT_THROW(model.begin(batch.tokens, batch.targets), std::invalid_argument);
}

}  // namespace
}  // namespace trainmem
