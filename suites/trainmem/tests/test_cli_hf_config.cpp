// --hf-config: a Hugging Face config.json as the model of train, estimate and info (common/model/
// hf_config.h reads it; its own tests check the counts against transformers'). Here: the driver
// takes it like a preset, the shape flags beside it change it and say so, and what a user acts on
// (the estimate) equals a real run of that config.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"
#include "common/tests/sanitizers.h"
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

// A small Qwen2 (q, k, v biases, a head tied to wte) and a small Mistral NeMo (head_dim 32 at C 64,
// H 4: H*D = 128), with Llama 3.1's rope scaling, in transformers' words.
std::string small_qwen2_config() {
  const std::string path = temp_path("small-qwen2-config.json");
  std::ofstream(path) << R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
    "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 32, "vocab_size": 251, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32, "max_window_layers": 2, "use_sliding_window": false, "tie_word_embeddings": true})";
  return path;
}
std::string small_nemo_config() {
  const std::string path = temp_path("small-nemo-config.json");
  std::ofstream(path) << R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 64,
    "head_dim": 32, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 32, "vocab_size": 256, "sliding_window": null,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 16}})";
  return path;
}

// A small Mixtral (8 experts, top 2, the load-balancing loss asked for) and a small Qwen2-MoE (4 of
// 8 experts, not renormalized, a shared expert, q/k/v biases), in transformers' words.
std::string small_mixtral_config() {
  const std::string path = temp_path("small-mixtral-config.json");
  std::ofstream(path) << R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 32, "vocab_size": 256, "num_local_experts": 8, "num_experts_per_tok": 2,
    "output_router_logits": true, "router_aux_loss_coef": 0.02, "sliding_window": null})";
  return path;
}
std::string small_qwen2_moe_config() {
  const std::string path = temp_path("small-qwen2-moe-config.json");
  std::ofstream(path) << R"({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 64,
    "intermediate_size": 176, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 128,
    "num_experts": 8, "num_experts_per_tok": 4, "norm_topk_prob": false, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 32, "vocab_size": 256,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": false})";
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
  // What the model does not have: dense MLPs between the experts.
  const std::string dense_between = temp_path("qwen2-moe-sparse-step.json");
  std::ofstream(dense_between) << R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "decoder_sparse_step": 2})";
  r = trainmem("estimate --hf-config " + dense_between);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("decoder_sparse_step = 2: a mixture of experts in every layer is modelled"), std::string::npos)
      << r.err;
}

TEST(CliHfConfig, InfoSaysTheMixtureOfExperts) {
  CliRun r = trainmem("info --hf-config " + small_qwen2_moe_config());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("L=2 H=4 Hkv=4 C=64 E=8 k=4 Fe=48 Fs=128 T=32 V=256, padded to Vp=256, q/k/v biases, top-k "
                       "weights not renormalized"),
            std::string::npos)
      << r.out;
  r = trainmem("info --hf-config " + small_mixtral_config());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("E=8 k=2 Fe=96 T=32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("load-balancing loss x0.02"), std::string::npos) << r.out;
  const CliRun j = trainmem("info --json --hf-config " + small_mixtral_config() + " --experts-per-token 1");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json model = nlohmann::json::parse(j.out)["model"];
  EXPECT_EQ(model["experts"]["experts"], 8);
  EXPECT_EQ(model["experts"]["experts_per_token"], 1);
  EXPECT_EQ(model["experts"]["router_aux_loss_coef"], 0.02);
  EXPECT_NE(model["origin"].get<std::string>().find("changed with --experts-per-token 1"), std::string::npos);
}

TEST(CliHfConfig, InfoSaysTheLlamaVariants) {
  CliRun r = trainmem("info --hf-config " + small_qwen2_config());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("L=2 H=4 Hkv=2 C=64 F=176 T=32 V=251, padded to Vp=256, tied head, q/k/v biases"),
            std::string::npos) << r.out;
  r = trainmem("info --hf-config " + small_nemo_config());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("L=2 H=4 Hkv=2 C=64 F=176 D=32 T=32 V=256"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rope theta 10000 (llama3 scaling: factor 8, low/high frequency factors 1/4, original context 16)"),
            std::string::npos) << r.out;
  const CliRun j = trainmem("info --json --hf-config " + small_nemo_config());
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json model = nlohmann::json::parse(j.out)["model"];
  EXPECT_EQ(model["head_dim"], 32);
  EXPECT_EQ(model["rope_scaling"]["factor"], 8.0);
  // A flag beside the config overrides a variant, and says so.
  r = trainmem("info --hf-config " + small_qwen2_config() + " --tied-head false");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("changed with --tied-head false"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("tied head"), std::string::npos) << r.out;
}

// info --list: every preset with its family and count (from the one table of presets).
TEST(CliHfConfig, InfoListShowsEveryPresetWithItsCount) {
  const CliRun r = trainmem("info --list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The line of each preset: its name first, then family, count and shape.
  const auto line_of = [&](const std::string& name) {
    const auto at = r.out.find("\n" + name + " ");
    return at == std::string::npos ? std::string() : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  for (const auto& [name, words] : {std::pair<std::string, std::vector<std::string>>{"qwen2.5-7b", {" llama ", " 7615616512 ", "L=28 H=28 Hkv=4 C=3584 F=18944", "q/k/v biases"}},
                                    {"llama3.2-1b", {" llama ", " 1235814400 ", "tied head"}},
                                    {"mistral-nemo-12b", {" llama ", " 12247782400 ", " D=128 "}},
                                    {"gpt2-124m", {" gpt ", " 124475904 "}},
                                    {"mixtral-8x7b", {" llama ", " 46702792704 ", "E=8 k=2 Fe=14336"}},
                                    {"qwen1.5-moe-a2.7b", {" llama ", " E=60 k=4 Fe=1408 Fs=5632 "}}}) {
    const std::string line = line_of(name);
    for (const std::string& word : words) EXPECT_NE(line.find(word), std::string::npos) << name << ": " << word << "\n" << r.out;
  }
  const CliRun j = trainmem("info --list --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json presets = nlohmann::json::parse(j.out);
  ASSERT_TRUE(presets.is_array());
  EXPECT_GE(presets.size(), 20u);
  EXPECT_EQ(presets.back()["name"], "qwen1.5-moe-a2.7b");
}

// The estimate of a config's model equals the run of it, to the byte.
struct NamedConfig {
  const char* name;
  std::string (*write)();
};
class CliHfConfigRun : public testing::TestWithParam<NamedConfig> {};
TEST_P(CliHfConfigRun, TheEstimateOfAConfigEqualsItsRun) {
  const std::string setup = "--hf-config " + GetParam().write() + " --batch 2";
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
  // The loss falls (the config's model learns the synthetic data as the presets do).
  const nlohmann::json& steps = trained["steps"];
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_LT(steps[1]["loss"].get<double>(), steps[0]["loss"].get<double>());
}
INSTANTIATE_TEST_SUITE_P(Configs, CliHfConfigRun,
                         testing::Values(NamedConfig{"Llama", &small_llama_config}, NamedConfig{"Qwen2", &small_qwen2_config},
                                         NamedConfig{"MistralNemo", &small_nemo_config},
                                         NamedConfig{"Mixtral", &small_mixtral_config},
                                         NamedConfig{"Qwen2Moe", &small_qwen2_moe_config}),
                         [](const testing::TestParamInfo<NamedConfig>& info) { return std::string(info.param.name); });

// plan for a user's own config.json, at 8B and at 8x7B (a mixture of experts): it answers (a
// meta computation: BM_Plan in bench_planner times it), and its best candidate's figures are the
// estimate of that candidate's command, to the byte.
TEST(CliHfConfig, PlanAnswersForAConfigAndItsBestIsTheEstimate) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("the Plan tests, which run the planner's code, and CliHfConfigRun's estimates of these configs");
  for (const auto& [config, ranks] : {std::pair{"Llama-3.1-8B", "8"}, {"Mixtral-8x7B", "64"}}) {
    SCOPED_TRACE(config);
    const std::string model =
        "--gpu h100-80gb --hf-config " + std::string(TRAINMEM_COMMON_TEST_DATA_DIR) + "/hf_configs/" + config + " --seq 4096";
    const CliRun r = trainmem("plan " + model + " --global-batch 64 --world-size " + ranks + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json plan = nlohmann::json::parse(r.out);
    ASSERT_FALSE(plan["candidates"].empty()) << r.out;
    const nlohmann::json& best = plan["candidates"][0];
    const CliRun e = trainmem("estimate " + model + " --world-size " + ranks + " " + best["flags"].get<std::string>() + " --json");
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const nlohmann::json estimate = nlohmann::json::parse(e.out);
    EXPECT_EQ(estimate["peak_reserved_bytes"], best["peak_reserved_bytes"]) << best["flags"];
    EXPECT_EQ(estimate["peak_allocated_bytes"], best["peak_allocated_bytes"]) << best["flags"];
  }
}

}  // namespace
}  // namespace trainmem
