// The parameter table (common/model/parameter_table.h) is the model: a GPT built from a config
// holds exactly the table's tensors, in its order, with its names and shapes; the indices the
// sharding units use point at the tensors they name; the counts are GPT-2's published ones plus
// the vocabulary padding (wte has Vp = padded_vocab(V) rows, model_config.h). The Llama family's
// table (no model runs it yet: issue 29) gives the published counts of the Llama presets, and its
// indices name their tensors.
#include <gtest/gtest.h>

#include <stdexcept>

#include "common/model/gpt.h"
#include "common/model/parameter_table.h"

namespace trainmem {
namespace {

ModelConfig odd_config() {
  ModelConfig c;
  c.vocab = 251;
  c.seq = 17;
  c.layers = 3;
  c.heads = 3;
  c.dim = 33;
  return c;
}

TEST(ParameterTable, IsWhatTheModelAllocates) {
  const ModelConfig c = odd_config();
  DeviceOptions options;
  options.choice = "meta";
  auto device = Device::open(options);
  GPT model(*device, c, 1);
  const ParameterTable table(c);
  ASSERT_EQ(model.parameters().size(), table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(model.parameters()[i].name, table[i].name) << i;
    EXPECT_EQ(model.parameters()[i].value.shape(), table[i].shape) << table[i].name;
    EXPECT_EQ(static_cast<std::size_t>(model.parameters()[i].value.numel()), table[i].numel()) << table[i].name;
  }
}

TEST(ParameterTable, IndicesNameTheirTensors) {
  const ParameterTable table(odd_config());
  EXPECT_EQ(table[ParameterTable::kWte].name, "wte");
  EXPECT_EQ(table[ParameterTable::kWpe].name, "wpe");
  EXPECT_EQ(table[table.lnf_weight()].name, "lnf.weight");
  EXPECT_EQ(table[table.lnf_bias()].name, "lnf.bias");
  EXPECT_EQ(table[ParameterTable::index(2, LayerParameter::qkv_weight)].name, "h2.attn.qkv.weight");
  EXPECT_EQ(table[ParameterTable::index(1, LayerParameter::mlp_proj_bias)].name, "h1.mlp.proj.bias");
  for (std::size_t l = 0; l < 3; ++l)
    for (std::size_t i : table.layer_indices(l)) EXPECT_EQ(table[i].layer, static_cast<long>(l)) << table[i].name;
  for (std::size_t i : table.root_indices()) EXPECT_EQ(table[i].layer, -1) << table[i].name;
  // Vp C + T C + L (12 C^2 + 13 C) + 2 C, V = 251 padded to Vp = 256
  const std::size_t C = 33;
  EXPECT_EQ(table[ParameterTable::kWte].shape, (std::vector<std::int64_t>{256, 33}));
  EXPECT_EQ(table[ParameterTable::kWte].padding_rows, 256 - 251);
  EXPECT_EQ(table.layer_numel(), 12 * C * C + 13 * C);
  EXPECT_EQ(table.root_numel(), 256 * C + 17 * C + 2 * C);
  EXPECT_EQ(table.total_numel(), table.root_numel() + 3 * table.layer_numel());
}

// GPT-2's published sizes (Radford et al. 2019, with the tied head; 124M counts wpe at T=1024),
// plus wte's padding: V = 50257 padded to Vp = 50304, (Vp - V) C = 47 C more (llm.c's counts).
TEST(ParameterTable, CountsArePublishedOnesPlusThePadding) {
  EXPECT_EQ(ParameterTable(model_preset("gpt2-124m")).total_numel(), 124439808u + 47 * 768);  // 124,475,904
  EXPECT_EQ(ParameterTable(model_preset("gpt2-1.5b")).total_numel(), 1557611200u + 47 * 1600);
  EXPECT_EQ(model_preset("gpt2-124m").num_parameters(), 124475904u);
  // A vocabulary already a multiple of 64 has no padding: tiny's 256.
  EXPECT_EQ(ParameterTable(model_preset("tiny"))[ParameterTable::kWte].shape[0], 256);
  EXPECT_EQ(ParameterTable(model_preset("tiny"))[ParameterTable::kWte].padding_rows, 0);
}

// The Llama presets' published parameter counts (Meta's and Mistral's model cards; Hugging Face's
// safetensors totals): untied head, no biases, grouped K/V. Their vocabularies (32000, 128256) are
// multiples of 64 already, so padding adds nothing.
TEST(ParameterTable, LlamaCountsAreThePublishedOnes) {
  EXPECT_EQ(model_preset("llama2-7b").num_parameters(), 6738415616u);
  EXPECT_EQ(model_preset("llama3-8b").num_parameters(), 8030261248u);
  EXPECT_EQ(model_preset("llama3-70b").num_parameters(), 70553706496u);
  EXPECT_EQ(model_preset("mistral-7b").num_parameters(), 7241732096u);
}

// The formula beside ModelConfig::num_parameters, on a shape where every term differs:
// 2 Vp C + L (2C + (H + 2 Hkv) D C + C^2 + 3 F C) + C.
TEST(ParameterTable, LlamaLayoutAndFormula) {
  ModelConfig c = model_preset("llama-tiny");
  c.vocab = 251;  // Vp = 256
  c.layers = 3;
  c.heads = 6;
  c.kv_heads = 2;
  c.dim = 48;     // D = 8
  c.ffn_dim = 100;
  c.validate();
  const ParameterTable table(c);
  const std::size_t Vp = 256, C = 48, H = 6, Hkv = 2, D = 8, F = 100, L = 3;
  EXPECT_EQ(table.layer_numel(), 2 * C + (H + 2 * Hkv) * D * C + C * C + 3 * F * C);
  EXPECT_EQ(table.total_numel(), 2 * Vp * C + L * table.layer_numel() + C);
  EXPECT_EQ(table.size(), 3 + 7 * L);
  EXPECT_EQ(table[ParameterTable::kWte].name, "wte");
  EXPECT_EQ(table[ParameterTable::kWte].padding_rows, 5);
  EXPECT_EQ(table[table.norm_weight()].name, "norm.weight");
  EXPECT_EQ(table[table.head_weight()].name, "head.weight");
  EXPECT_EQ(table[table.head_weight()].padding_rows, 5);
  EXPECT_EQ(table[table.index(2, LlamaLayerParameter::qkv_weight)].name, "h2.attn.qkv.weight");
  EXPECT_EQ(table[table.index(2, LlamaLayerParameter::qkv_weight)].shape,
            (std::vector<std::int64_t>{static_cast<std::int64_t>((H + 2 * Hkv) * D), static_cast<std::int64_t>(C)}));
  EXPECT_EQ(table[table.index(1, LlamaLayerParameter::down_weight)].name, "h1.mlp.down.weight");
  EXPECT_EQ(table[table.index(1, LlamaLayerParameter::down_weight)].shape,
            (std::vector<std::int64_t>{static_cast<std::int64_t>(C), static_cast<std::int64_t>(F)}));
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i : table.layer_indices(l)) EXPECT_EQ(table[i].layer, static_cast<long>(l)) << table[i].name;
  for (std::size_t i : table.root_indices()) EXPECT_EQ(table[i].layer, -1) << table[i].name;
  // Every index once: the root and the layers cover the table.
  std::size_t covered = table.root_indices().size();
  for (std::size_t l = 0; l < L; ++l) covered += table.layer_indices(l).size();
  EXPECT_EQ(covered, table.size());
}

// The family's variants (model_config.h), each in the table as parameter_table.h lists it: q, k, v
// biases after the qkv weight, attn.proj [C, H*D] for a set head dimension, no head.weight when tied.
TEST(ParameterTable, LlamaVariantsAreLaidOutAsListed) {
  ModelConfig c = model_preset("llama-tiny");  // C 64, H 4, Hkv 2, F 176, V 256, L 2
  c.qkv_bias = true;
  c.head_dim_set = 32;  // H*D = 128 != C
  c.tied_head = true;
  c.validate();
  const ParameterTable table(c);
  const std::size_t C = 64, H = 4, Hkv = 2, D = 32, F = 176, Vp = 256, L = 2, QKV = (H + 2 * Hkv) * D;
  EXPECT_EQ(table.layer_numel(), 2 * C + QKV * C + QKV + H * D * C + 3 * F * C);
  EXPECT_EQ(table.total_numel(), Vp * C + L * table.layer_numel() + C);  // one Vp*C: the head is wte
  EXPECT_EQ(table.size(), 2 + 8 * L);
  EXPECT_EQ(table.head_weight(), ParameterTable::kWte);
  EXPECT_EQ(table.root_indices(), (std::vector<std::size_t>{ParameterTable::kWte, table.norm_weight()}));
  EXPECT_EQ(table[table.index(1, LlamaLayerParameter::qkv_bias)].name, "h1.attn.qkv.bias");
  EXPECT_EQ(table[table.index(1, LlamaLayerParameter::qkv_bias)].shape, (std::vector<std::int64_t>{std::int64_t(QKV)}));
  EXPECT_EQ(table[table.index(1, LlamaLayerParameter::attn_proj_weight)].shape,
            (std::vector<std::int64_t>{std::int64_t(C), std::int64_t(H * D)}));
  EXPECT_EQ(table[table.index(1, LlamaLayerParameter::down_weight)].name, "h1.mlp.down.weight");
  EXPECT_EQ(table[table.norm_weight()].name, "norm.weight");
  EXPECT_EQ(table.norm_weight(), table.size() - 1);
  std::size_t covered = table.root_indices().size();
  for (std::size_t l = 0; l < L; ++l) covered += table.layer_indices(l).size();
  EXPECT_EQ(covered, table.size());
  // Without biases, asking for one is a bug of the caller's.
  EXPECT_THROW(static_cast<void>(ParameterTable(model_preset("llama-tiny")).index(0, LlamaLayerParameter::qkv_bias)),
               std::logic_error);
}

// What a Llama shape must satisfy, each refused with the flag to change.
TEST(ModelConfig, LlamaShapesAreChecked) {
  auto refused = [](ModelConfig c, const char* flag) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted; expected a message naming " << flag;
    } catch (const ModelConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  ModelConfig c = model_preset("llama-tiny");
  EXPECT_NO_THROW(c.validate());
  ModelConfig uneven = c;
  uneven.kv_heads = 3;  // 4 heads are not 3 groups
  refused(uneven, "--kv-heads");
  ModelConfig odd_head = c;
  odd_head.heads = 4;
  odd_head.kv_heads = 4;
  odd_head.dim = 36;  // D = 9: RoPE rotates pairs
  refused(odd_head, "--dim");
  ModelConfig theta = c;
  theta.rope.theta = 0.5;
  refused(theta, "--rope-theta");
  ModelConfig eps = c;
  eps.norm_eps = 0;
  refused(eps, "--norm-eps");
  // A GPT ignores the Llama fields: its K/V heads are its heads, its MLP is 4C.
  ModelConfig gpt = model_preset("tiny");
  gpt.kv_heads = 3;
  gpt.ffn_dim = 7;
  EXPECT_NO_THROW(gpt.validate());
  EXPECT_EQ(gpt.num_kv_heads(), gpt.heads);
  EXPECT_EQ(gpt.mlp_dim(), 4 * gpt.dim);
}

}  // namespace
}  // namespace trainmem
