// A Hugging Face config.json read as transformers reads it (common/model/hf_config.h): the
// parameter counts of real configs (tests/data/hf_configs, written from the published files)
// equal transformers' (ANCHORS.md, "Hugging Face configs"), the defaults of a field left out are
// its family's, and what trainmem does not model is refused naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/model/hf_config.h"
#include "common/model/parameter_table.h"
#include "common/tests/command_runner.h"

namespace trainmem {
namespace {

std::string config_dir(const std::string& name) { return std::string(TRAINMEM_TEST_DATA_DIR) + "/hf_configs/" + name; }

// What transformers counts: trainmem's parameters less its vocabulary's padding rows.
std::size_t hugging_face_count(const ModelConfig& c) { return c.num_parameters() - ParameterTable(c).padding_numel(); }

// A config.json of our own, in a folder of its own.
std::string write_config(const std::string& name, const std::string& json) {
  const std::string path = testing_support::scratch_path(name + ".json");
  std::ofstream(path) << json;
  return path;
}

std::string refusal(const std::string& path) {
  try {
    (void)read_hf_config(path);
  } catch (const HfConfigError& e) {
    return e.what();
  }
  return "(read without an error)";
}

TEST(HfConfig, Gpt2MediumCountsAsTransformers) {
  const ModelConfig c = read_hf_config(config_dir("gpt2-medium"));  // the folder: its config.json
  EXPECT_EQ(c.arch, Arch::gpt);
  EXPECT_EQ(c.name, "gpt2-medium");
  EXPECT_EQ(c.layers, 24u);
  EXPECT_EQ(c.heads, 16u);
  EXPECT_EQ(c.dim, 1024u);
  EXPECT_EQ(c.seq, 1024u);  // n_positions
  EXPECT_EQ(c.vocab, 50257u);
  EXPECT_EQ(hugging_face_count(c), 354823168u);
  EXPECT_EQ(c.num_parameters() - hugging_face_count(c), (padded_vocab(50257) - 50257) * 1024);  // wte's rows
  // Dropout is not modelled, and said; fields the reader does not know are named.
  EXPECT_NE(c.origin.find("not modelled: resid_pdrop=0.1 (no dropout: its masks are not counted)"), std::string::npos)
      << c.origin;
  EXPECT_NE(c.origin.find("not read: n_special, predict_special_tokens"), std::string::npos) << c.origin;
}

TEST(HfConfig, TinyLlamaCountsAsTransformers) {
  const ModelConfig c = read_hf_config(config_dir("TinyLlama-1.1B") + "/config.json");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.num_kv_heads(), 4u);
  EXPECT_EQ(c.mlp_dim(), 5632u);
  EXPECT_EQ(c.seq, 2048u);  // max_position_embeddings
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(hugging_face_count(c), 1100048384u);
  EXPECT_EQ(c.origin.find("not read"), std::string::npos) << c.origin;  // every field known
}

// The Llama family's variants, counted as transformers counts them (ANCHORS.md): a tied head
// (Llama 3.2 1B, Qwen2.5 0.5B), q, k, v biases (Qwen2), a head dimension that is not C / H (NeMo).
TEST(HfConfig, Qwen2CountsAsTransformers) {
  const ModelConfig small = read_hf_config(config_dir("Qwen2.5-0.5B"));
  EXPECT_EQ(small.arch, Arch::llama);
  EXPECT_TRUE(small.qkv_bias);
  EXPECT_TRUE(small.tied_head);
  EXPECT_EQ(small.num_kv_heads(), 2u);
  EXPECT_EQ(small.head_dim(), 64u);
  EXPECT_EQ(hugging_face_count(small), 494032768u);
  EXPECT_EQ(small.origin.find("not read"), std::string::npos) << small.origin;
  const ModelConfig seven = read_hf_config(config_dir("Qwen2.5-7B"));
  EXPECT_FALSE(seven.tied_head);
  EXPECT_EQ(seven.head_dim(), 128u);
  EXPECT_EQ(seven.vocab, 152064u);
  EXPECT_EQ(hugging_face_count(seven), 7615616512u);
}

TEST(HfConfig, MistralNemoCountsAsTransformers) {
  const ModelConfig c = read_hf_config(config_dir("Mistral-Nemo-Base-2407"));
  EXPECT_EQ(c.head_dim(), 128u);          // head_dim, not 5120 / 32 = 160
  EXPECT_EQ(c.attention_dim(), 4096u);    // H*D: attention's output, projected back to C = 5120
  EXPECT_EQ(c.dim, 5120u);
  EXPECT_EQ(hugging_face_count(c), 12247782400u);
}

// Llama 3.2 1B: a tied head, and Llama 3.1's rope scaling (kernels/rope_frequencies.h).
TEST(HfConfig, Llama32CountsAsTransformers) {
  const ModelConfig c = read_hf_config(config_dir("Llama-3.2-1B"));
  EXPECT_TRUE(c.tied_head);
  EXPECT_EQ(c.head_dim(), 64u);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_TRUE(c.rope.scaled());
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_context, 8192.0);
  EXPECT_EQ(c.seq, 131072u);
  EXPECT_EQ(hugging_face_count(c), 1235814400u);
  EXPECT_EQ(c.num_parameters() - hugging_face_count(c), 0u);  // 128256 = 2004 * 64: no padding row
  EXPECT_EQ(c.origin.find("not read"), std::string::npos) << c.origin;
}

// The presets of those shapes are their configs: every field the same (the JSON without name and
// origin), so the ANCHORS counts above hold for the presets too.
// The mixtures of experts (ANCHORS.md): Mixtral 8x7B, 8 experts of 14336, top 2; Qwen1.5-MoE-A2.7B,
// 60 experts of 1408, top 4 not renormalized, a shared expert of 5632 with its sigmoid gate, q/k/v
// biases. Neither file asks for the load-balancing loss (output_router_logits false), and that is said.
TEST(HfConfig, MixturesOfExpertsCountAsTransformers) {
  const ModelConfig mixtral = read_hf_config(config_dir("Mixtral-8x7B"));
  EXPECT_TRUE(mixtral.moe());
  EXPECT_EQ(mixtral.experts, 8u);
  EXPECT_EQ(mixtral.experts_per_token, 2u);
  EXPECT_EQ(mixtral.expert_ffn_dim, 14336u);
  EXPECT_EQ(mixtral.shared_expert_ffn_dim, 0u);
  EXPECT_TRUE(mixtral.normalize_top_k);
  EXPECT_EQ(mixtral.router_aux_loss_coef, 0.0);
  EXPECT_EQ(hugging_face_count(mixtral), 46702792704u);
  EXPECT_NE(mixtral.origin.find("router_aux_loss_coef=0.02 (output_router_logits is false"), std::string::npos)
      << mixtral.origin;
  const ModelConfig qwen = read_hf_config(config_dir("Qwen1.5-MoE-A2.7B"));
  EXPECT_EQ(qwen.experts, 60u);
  EXPECT_EQ(qwen.experts_per_token, 4u);
  EXPECT_EQ(qwen.expert_ffn_dim, 1408u);
  EXPECT_EQ(qwen.shared_expert_ffn_dim, 5632u);
  EXPECT_FALSE(qwen.normalize_top_k);
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(hugging_face_count(qwen), 14315784192u);
  // output_router_logits true: the loss is added with the file's coefficient.
  const ModelConfig aux = read_hf_config(write_config(
      "mixtral-aux", R"({"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                        "num_hidden_layers": 2,
                        "output_router_logits": true, "router_aux_loss_coef": 0.02})"));
  EXPECT_EQ(aux.router_aux_loss_coef, 0.02);
  EXPECT_EQ(aux.expert_ffn_dim, 14336u);  // MixtralConfig's intermediate_size
  EXPECT_EQ(aux.norm_eps, 1e-5);          // and its other defaults
  EXPECT_EQ(aux.rope.theta, 1e6);
  const ModelConfig qwen_defaults = read_hf_config(write_config("qwen-moe-defaults", R"({"model_type": "qwen2_moe"})"));
  EXPECT_EQ(hugging_face_count(qwen_defaults), 14315784192u);  // Qwen2MoeConfig's defaults are A2.7B's shape
}

TEST(HfConfig, ThePresetsAreTheirConfigs) {
  for (const auto& [preset, config] : {std::pair{"llama3.2-1b", "Llama-3.2-1B"}, {"qwen2.5-0.5b", "Qwen2.5-0.5B"},
                                       {"qwen2.5-7b", "Qwen2.5-7B"}, {"mistral-nemo-12b", "Mistral-Nemo-Base-2407"},
                                       {"mixtral-8x7b", "Mixtral-8x7B"}, {"qwen1.5-moe-a2.7b", "Qwen1.5-MoE-A2.7B"},
                                       {"llama3.1-8b", "Llama-3.1-8B"}}) {
    SCOPED_TRACE(preset);
    nlohmann::json from_preset = model_preset(preset).to_json(), from_file = read_hf_config(config_dir(config)).to_json();
    for (nlohmann::json* j : {&from_preset, &from_file}) {
      j->erase("name");
      j->erase("origin");
    }
    EXPECT_EQ(from_preset, from_file) << from_preset.dump() << "\n" << from_file.dump();
  }
  // Llama 3.1 8B: llama3-8b's weights (8,030,261,248) at its 128k context, with its rope scaling.
  const ModelConfig llama31 = model_preset("llama3.1-8b");
  EXPECT_EQ(llama31.num_parameters(), 8030261248u);
  EXPECT_EQ(llama31.rope.factor, 8.0);
  EXPECT_EQ(llama31.seq, 131072u);
}

// transformers' defaults for a field the file leaves out: LlamaConfig's K/V heads = heads,
// 2048 positions, RMSNorm eps 1e-6; MistralConfig's 8 K/V heads and 14336-wide MLP; GPT2Config's
// GPT-2 small.
TEST(HfConfig, AFieldLeftOutTakesItsFamilysDefault) {
  const ModelConfig llama = read_hf_config(write_config(
      "llama-defaults", R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
                           "intermediate_size": 512})"));
  EXPECT_EQ(llama.num_kv_heads(), 4u);
  EXPECT_EQ(llama.seq, 2048u);
  EXPECT_EQ(llama.vocab, 32000u);
  EXPECT_EQ(llama.norm_eps, 1e-6);
  EXPECT_EQ(llama.rope.theta, 10000);
  const ModelConfig mistral = read_hf_config(write_config(
      "mistral-defaults", R"({"model_type": "mistral", "hidden_size": 256, "num_attention_heads": 8,
                             "num_hidden_layers": 2, "max_position_embeddings": 4096})"));
  EXPECT_EQ(mistral.num_kv_heads(), 8u);
  EXPECT_EQ(mistral.mlp_dim(), 14336u);
  const ModelConfig gpt2 = read_hf_config(write_config("gpt2-defaults", R"({"model_type": "gpt2"})"));
  EXPECT_EQ(gpt2.layers, 12u);
  EXPECT_EQ(gpt2.dim, 768u);
  EXPECT_EQ(hugging_face_count(gpt2), 124439808u);  // GPT-2 small, as transformers counts it
  // transformers 5's rope_parameters carry the base.
  const ModelConfig rope5 = read_hf_config(write_config(
      "llama-rope5", R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})"));
  EXPECT_EQ(rope5.rope.theta, 500000.0);
}

// What would compute something else is refused, naming the field (the shapes to come: issue 44).
TEST(HfConfig, WhatIsNotModelledIsRefusedNamingTheField) {
  // Dense layers among the experts, and the router's noise.
  EXPECT_NE(refusal(write_config("qwen-moe-step", R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4,
                                 "num_hidden_layers": 2, "decoder_sparse_step": 2})"))
                .find("decoder_sparse_step = 2"),
            std::string::npos);
  EXPECT_NE(refusal(write_config("qwen-moe-dense", R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4,
                                 "num_hidden_layers": 2, "mlp_only_layers": [0]})"))
                .find("mlp_only_layers = [0]"),
            std::string::npos);
  EXPECT_NE(refusal(write_config("mixtral-jitter", R"({"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4,
                                 "num_hidden_layers": 2, "router_jitter_noise": 0.1})"))
                .find("router_jitter_noise = 0.1"),
            std::string::npos);
  // Experts in a family without them.
  EXPECT_NE(refusal(write_config("llama-experts", R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                 "num_hidden_layers": 2, "num_local_experts": 8})"))
                .find("num_local_experts = 8"),
            std::string::npos);
  // A bias on o (Llama's attention_bias biases q, k, v and o) is not modelled; Qwen2's q, k, v are.
  EXPECT_NE(refusal(write_config("llama-bias", R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                                 "num_hidden_layers": 2, "attention_bias": true})"))
                .find("attention_bias = true: a bias on the output projection o"),
            std::string::npos);
  // Qwen2's sliding window, where use_sliding_window turns it on for layers from max_window_layers.
  const std::string qwen_sliding = R"({"model_type": "qwen2", "hidden_size": 256, "num_attention_heads": 4,
      "num_key_value_heads": 4, "num_hidden_layers": 4, "max_position_embeddings": 8192, "sliding_window": 4096,
      "max_window_layers": 2,
      "use_sliding_window": )";
  EXPECT_NE(refusal(write_config("qwen-sliding", qwen_sliding + "true}")).find("use_sliding_window = true"),
            std::string::npos);
  EXPECT_NO_THROW(read_hf_config(write_config("qwen-full", qwen_sliding + "false}")));
  const std::string partial = refusal(write_config(
      "llama-scaled", R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
                         "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})"));
  EXPECT_NE(partial.find("rope_scaling = {"), std::string::npos) << partial;
  EXPECT_NE(partial.find("llama3 scaling without its low_freq_factor"), std::string::npos) << partial;
  const std::string linear = refusal(write_config(
      "llama-linear", R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
                         "rope_scaling": {"type": "linear", "factor": 2.0}})"));
  EXPECT_NE(linear.find("rope scaling of type 'linear' is not modelled (llama3 is)"), std::string::npos) << linear;
  // Mistral's default window (4096) is shorter than a context of 32768: refused; null: none.
  EXPECT_NE(refusal(write_config("mistral-window", R"({"model_type": "mistral", "hidden_size": 256,
                                   "num_attention_heads": 8, "num_hidden_layers": 2, "max_position_embeddings": 32768})"))
                .find("sliding_window"),
            std::string::npos);
  EXPECT_NO_THROW(read_hf_config(write_config("mistral-nowindow", R"({"model_type": "mistral", "hidden_size": 256,
      "num_attention_heads": 8, "num_hidden_layers": 2, "max_position_embeddings": 32768, "sliding_window": null})")));
  EXPECT_NE(refusal(write_config("gpt2-relu", R"({"model_type": "gpt2", "activation_function": "relu"})"))
                .find("activation_function = \"relu\""),
            std::string::npos);
}

TEST(HfConfig, AFileThatIsNotAConfigSaysWhy) {
  EXPECT_NE(refusal("/nonexistent/folder").find("no such file (give a config.json, or the folder holding one)"),
            std::string::npos);
  EXPECT_NE(refusal(write_config("broken", "{\"model_type\": \"gpt2\",")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal(write_config("array", "[1, 2]")).find("not a config (a JSON object)"), std::string::npos);
  EXPECT_NE(refusal(write_config("no-type", "{}")).find("model_type: absent"), std::string::npos);
  EXPECT_NE(refusal(write_config("bert", R"({"model_type": "bert"})")).find("not a family trainmem reads"),
            std::string::npos);
  EXPECT_NE(refusal(write_config("text-width", R"({"model_type": "gpt2", "n_embd": "768"})"))
                .find("n_embd is \"768\", not a whole number of at least 1"),
            std::string::npos);
  EXPECT_NE(refusal(write_config("zero-layers", R"({"model_type": "gpt2", "n_layer": 0})")).find("n_layer is 0"),
            std::string::npos);
  // A shape trainmem's own checks refuse (C not divisible by H): ModelConfig::validate's message.
  EXPECT_THROW(read_hf_config(write_config("odd", R"({"model_type": "gpt2", "n_embd": 100, "n_head": 3})")),
               ModelConfigError);
}

}  // namespace
}  // namespace trainmem
