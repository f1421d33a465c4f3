// The parameter table (common/model/parameter_table.h) is the model: a GPT built from a config
// holds exactly the table's tensors, in its order, with its names and shapes; the indices the
// sharding units use point at the tensors they name; the counts are GPT-2's published ones plus
// the vocabulary padding (wte has Vp = padded_vocab(V) rows, gpt_config.h).
#include <gtest/gtest.h>

#include "common/model/gpt.h"
#include "common/model/parameter_table.h"

namespace trainmem {
namespace {

GPTConfig odd_config() {
  GPTConfig c;
  c.vocab = 251;
  c.seq = 17;
  c.layers = 3;
  c.heads = 3;
  c.dim = 33;
  return c;
}

TEST(ParameterTable, IsWhatTheModelAllocates) {
  const GPTConfig c = odd_config();
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
  EXPECT_EQ(ParameterTable(gpt_preset("gpt2-124m")).total_numel(), 124439808u + 47 * 768);  // 124,475,904
  EXPECT_EQ(ParameterTable(gpt_preset("gpt2-1.5b")).total_numel(), 1557611200u + 47 * 1600);
  EXPECT_EQ(gpt_preset("gpt2-124m").num_parameters(), 124475904u);
  // A vocabulary already a multiple of 64 has no padding: tiny's 256.
  EXPECT_EQ(ParameterTable(gpt_preset("tiny"))[ParameterTable::kWte].shape[0], 256);
  EXPECT_EQ(ParameterTable(gpt_preset("tiny"))[ParameterTable::kWte].padding_rows, 0);
}

}  // namespace
}  // namespace trainmem
