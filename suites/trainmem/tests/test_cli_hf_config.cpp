// --hf-config: a Hugging Face config.json as the model of train, estimate and info (common/model/
// hf_config.h reads it; its own tests check the counts against transformers'). Here: the driver
// takes it like a preset, the shape flags beside it change it and say so, and what a user acts on
// (the estimate) equals a real run of that config.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem {
namespace {

using cli_test::CliRun;
using cli_test::temp_path;
using cli_test::trainmem;
using testing_support::read_text_file;

// A config of our own: a small Llama (grouped-query attention, SwiGLU) in transformers' words.
std::string small_llama_config() {
  const std::string path = temp_path("small-llama-config.json");
  std::ofstream(path) << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 32, "vocab_size": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "torch_dtype": "float32"})";
  return path;
}

TEST(CliHfConfig, InfoPrintsTheFamilyTheShapeAndBothParameterCounts) {
  const std::string config = std::string(TRAINMEM_COMMON_TEST_DATA_DIR) + "/hf_configs/gpt2-medium";
  const CliRun r = trainmem("info --hf-config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model gpt2-medium (gpt, from " + config + "/config.json (gpt2, GPT2LMHeadModel)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("354871296 (354823168 as Hugging Face counts them, without the 48128 of the vocabulary's "
                       "padding rows)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("L=24 H=16 C=1024 T=1024 V=50257, padded to Vp=50304"), std::string::npos) << r.out;
  const CliRun j = trainmem("info --json --hf-config " + config);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json model = nlohmann::json::parse(j.out)["model"];
  EXPECT_EQ(model["parameters_without_padding"], 354823168);
  EXPECT_EQ(model["parameters"], 354871296);
}

TEST(CliHfConfig, FlagsBesideItChangeAFieldAndSaySo) {
  const CliRun r = trainmem("info --hf-config " + small_llama_config() + " --layers 3 --seq 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("changed with --layers 3 --seq 16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("L=3 H=4 Hkv=2 C=64 F=176 T=16 V=256"), std::string::npos) << r.out;
}

TEST(CliHfConfig, ItIsRefusedBesideAPresetOrAnotherFamily) {
  const std::string config = small_llama_config();
  CliRun r = trainmem("estimate --model tiny --hf-config " + config);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model tiny and --hf-config " + config + ": give one of them"), std::string::npos) << r.err;
  r = trainmem("estimate --arch gpt --hf-config " + config);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("drop --arch (the config has its family)"), std::string::npos) << r.err;
  r = trainmem("estimate --hf-config " + std::string(TRAINMEM_COMMON_TEST_DATA_DIR) + "/hf_configs/Mixtral-8x7B");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("mixture of experts is not modelled yet"), std::string::npos) << r.err;
}

// The estimate of a config's model equals the run of it, to the byte.
TEST(CliHfConfig, TheEstimateOfAConfigEqualsItsRun) {
  const std::string setup = "--hf-config " + small_llama_config() + " --batch 2";
  const std::string json = temp_path("hf_config_run.json");
  const CliRun run = trainmem("train --device cpu --steps 2 --json " + json + " " + setup);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json trained = nlohmann::json::parse(read_text_file(json));
  std::remove(json.c_str());
  const CliRun e = trainmem("estimate --device cpu --json " + setup);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json estimate = nlohmann::json::parse(e.out);
  EXPECT_EQ(estimate["peak_allocated_bytes"], trained["memory"]["peak_allocated_bytes"]);
  EXPECT_EQ(estimate["peak_reserved_bytes"], trained["memory"]["peak_reserved_bytes"]);
}

}  // namespace
}  // namespace trainmem
