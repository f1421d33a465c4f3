// The sharded estimate against sharded training (and, for the Llama family, sharded training
// against one process): `trainmem estimate --world-size N` (rank 0's real
// ZeRO or FSDP strategy on the meta device, over a communicator that moves nothing) gives the
// same per-rank figures as `mpirun -np N trainmem train` measures, to the byte: peak allocated,
// peak reserved and every category's peak, for ZeRO 0-3, offload, and FSDP full/grad_op with and
// without prefetch, at 2 and 4 ranks, in both allocator pools.
//
// The vocabulary (251) and so the embedding do not divide by 2 or 4: the units are padded, and
// every rank's figures, as train --json lists them (memory.per_rank), equal rank 0's, which is
// the rank the estimate runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "common/tests/sanitizers.h"
#include "common/tests/command_runner.h"

namespace trainmem {
namespace {

const char* const kModel = "--device cpu --model tiny --vocab 251";

std::string mpirun(int ranks, const std::string& args) {
  // OpenMPI refuses to run as root (CI) unless both variables are set.
  return std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 120 '") + TRAINMEM_MPIEXEC +
         "' --oversubscribe -np " + std::to_string(ranks) + " '" + TRAINMEM_BINARY + "' " + args;
}

nlohmann::json run_json(const std::string& command) {
  const testing_support::CommandResult r = testing_support::run_command(command);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.out << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out, nullptr, false) : nlohmann::json();
}

// Returns the training's --json (nullptr when it failed).
nlohmann::json expect_estimate_equals_training(int ranks, std::string sharding, int batch = 2,
                                               const std::string& model = kModel) {
  sharding += " --batch " + std::to_string(batch);
  SCOPED_TRACE("-np " + std::to_string(ranks) + " " + sharding);
  const std::string json = testing_support::scratch_path("estimate_ranks.json");
  const testing_support::CommandResult trained =
      testing_support::run_command(mpirun(ranks, "train --steps 2 " + model + " " + sharding + " --json '" + json + "'"));
  EXPECT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  if (trained.exit_code != 0) return nullptr;
  const nlohmann::json result = nlohmann::json::parse(testing_support::read_text_file(json));
  const nlohmann::json& measured = result["memory"];
  std::remove(json.c_str());
  const nlohmann::json predicted = run_json(std::string("'") + TRAINMEM_BINARY + "' estimate " + model + " " + sharding +
                                            " --world-size " + std::to_string(ranks) + " --json");
  EXPECT_TRUE(predicted.is_object());
  if (!predicted.is_object()) return nullptr;

  EXPECT_EQ(predicted["peak_allocated_bytes"], measured["peak_allocated_bytes"]);
  EXPECT_EQ(predicted["peak_reserved_bytes"], measured["peak_reserved_bytes"]);
  for (const auto& [category, figures] : measured["by_category"].items())
    EXPECT_EQ(predicted["by_category"][category]["peak_bytes"], figures["peak_bytes"]) << category;
  // Every rank as rank 0 (so the estimate's one rank is the largest).
  EXPECT_EQ(measured["per_rank"].size(), static_cast<std::size_t>(ranks));
  if (measured["per_rank"].empty()) return nullptr;
  const nlohmann::json& rank0 = measured["per_rank"][0];
  for (const nlohmann::json& rank : measured["per_rank"]) {
    EXPECT_EQ(rank["peak_allocated_bytes"], rank0["peak_allocated_bytes"]) << "rank " << rank["rank"];
    EXPECT_EQ(rank["peak_reserved_bytes"], rank0["peak_reserved_bytes"]) << "rank " << rank["rank"];
    EXPECT_EQ(rank["by_category_peak_bytes"], rank0["by_category_peak_bytes"]) << "rank " << rank["rank"];
  }
  std::printf("-np %d %-40s peak allocated %lld, reserved %lld: estimate equal\n", ranks, sharding.c_str(),
              measured["peak_allocated_bytes"].get<long long>(), measured["peak_reserved_bytes"].get<long long>());
  return result;
}

// Under the sanitizers (each mpirun of an ASan trainmem costs seconds) only EstimateRanks.Zero at 2
// ranks runs of this suite: the sharding engine, the communicator and the estimate over ranks
// under ASan; FSDP's engine there by test_fsdp_np2, the rest in ci/test's ctest of the main build.
class EstimateRanks : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (GetParam() == 4) TRAINMEM_SKIP_UNDER_SANITIZERS("the same test at 2 ranks");
    const std::string test = testing::UnitTest::GetInstance()->current_test_info()->name();
    if (test.rfind("Zero/", 0) != 0) TRAINMEM_SKIP_UNDER_SANITIZERS("EstimateRanks.Zero/np2 and test_fsdp_np2");
  }
};

TEST_P(EstimateRanks, Zero) {
  for (const char* stage : {"--zero 0", "--zero 1", "--zero 2", "--zero 3"}) expect_estimate_equals_training(GetParam(), stage);
}

TEST_P(EstimateRanks, ZeroOffload) {
  expect_estimate_equals_training(GetParam(), "--zero 2 --offload optimizer");
  expect_estimate_equals_training(GetParam(), "--zero 3 --offload params");
}

TEST_P(EstimateRanks, Fsdp) {
  for (const char* mode : {"full", "grad_op"})
    for (const char* prefetch : {"off", "on"})
      expect_estimate_equals_training(GetParam(), std::string("--fsdp ") + mode + " --fsdp-prefetch " + prefetch);
}

// At B=20 the attention matrices (1.25 MiB) go to the large pool and its 20 MiB segments.
TEST_P(EstimateRanks, LargePool) {
  expect_estimate_equals_training(GetParam(), "--zero 3", 20);
  expect_estimate_equals_training(GetParam(), "--fsdp full --fsdp-prefetch on", 20);
}

// The Llama family sharded (llama-tiny: grouped-query attention, SwiGLU, an untied head; the
// vocabulary padded, units that do not divide evenly): every ZeRO stage, offload and FSDP mode
// estimated to the byte as above, and training as one process does with the whole batch -- the
// loss and gradient norm of each step within 1e-5 (relative for the norm), the same batches in
// another summation order (suites/zero/tests/test_zero_cli.cpp).
TEST_P(EstimateRanks, LlamaShardedTrainsAsOneProcessAndAsEstimated) {
  const int ranks = GetParam();
  const std::string model = "--device cpu --model llama-tiny --vocab 251";
  const std::string json = testing_support::scratch_path("llama_single.json");
  const testing_support::CommandResult trained = testing_support::run_command(
      std::string("'") + TRAINMEM_BINARY + "' train --steps 2 " + model + " --batch " + std::to_string(2 * ranks) +
      " --json '" + json + "'");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const nlohmann::json single = nlohmann::json::parse(testing_support::read_text_file(json));
  std::remove(json.c_str());
  for (const char* sharding : {"--zero 1", "--zero 2", "--zero 3", "--zero 2 --offload optimizer",
                               "--zero 3 --offload params", "--fsdp full --fsdp-prefetch on", "--fsdp grad_op"}) {
    const nlohmann::json sharded = expect_estimate_equals_training(ranks, sharding, 2, model);
    if (sharded.is_null()) continue;
    SCOPED_TRACE(sharding);
    ASSERT_EQ(sharded["steps"].size(), single["steps"].size());
    for (std::size_t i = 0; i < single["steps"].size(); ++i) {
      EXPECT_NEAR(sharded["steps"][i]["loss"].get<double>(), single["steps"][i]["loss"].get<double>(), 1e-5);
      const double a = single["steps"][i]["grad_norm"].get<double>(), b = sharded["steps"][i]["grad_norm"].get<double>();
      EXPECT_NEAR(b, a, 1e-5 * a) << "step " << i + 1;
    }
  }
}

// The Llama family's variants (a head tied to wte: one tensor sharded once in the root unit; q, k,
// v biases; a head dimension with H*D != C): sharded with ZeRO-3 and FSDP, estimated to the byte
// (alone: test_cli_hf_config.cpp, CliHfConfigRun).
TEST(EstimateRanksOfLlamaVariants, TiedHeadBiasesAndHeadDimAsEstimated) {
  const std::string model =
      "--device cpu --model llama-tiny --vocab 251 --tied-head true --qkv-bias true --head-dim 32";
  for (const char* sharding : {"--zero 3", "--fsdp full --fsdp-prefetch on"})
    expect_estimate_equals_training(2, sharding, 2, model);
}

// A mixture of experts sharded (llama-tiny-moe: 8 experts, top 2; each layer's unit holds its router
// and every expert): ZeRO-3 and FSDP estimated to the byte, and ZeRO-3 training as one process with
// the whole batch does (without the load-balancing loss, which each rank takes over its own tokens,
// as PyTorch's DDP does: not one process's loss). A shared expert and the loss: the same, estimated.
TEST(EstimateRanksOfAMixtureOfExperts, ShardedAsEstimatedAndTrainsAsOneProcess) {
  const std::string model = "--device cpu --model llama-tiny-moe --vocab 251";
  const std::string json = testing_support::scratch_path("moe_single.json");
  const testing_support::CommandResult trained = testing_support::run_command(
      std::string("'") + TRAINMEM_BINARY + "' train --steps 2 " + model + " --batch 4 --json '" + json + "'");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const nlohmann::json single = nlohmann::json::parse(testing_support::read_text_file(json));
  std::remove(json.c_str());
  const nlohmann::json sharded = expect_estimate_equals_training(2, "--zero 3", 2, model);
  ASSERT_FALSE(sharded.is_null());
  ASSERT_EQ(sharded["steps"].size(), single["steps"].size());
  for (std::size_t i = 0; i < single["steps"].size(); ++i) {
    EXPECT_NEAR(sharded["steps"][i]["loss"].get<double>(), single["steps"][i]["loss"].get<double>(), 1e-5);
    const double a = single["steps"][i]["grad_norm"].get<double>(), b = sharded["steps"][i]["grad_norm"].get<double>();
    EXPECT_NEAR(b, a, 1e-5 * a) << "step " << i + 1;
  }
  // Under the sanitizers, ZeRO-3 only: FSDP's engine is test_fsdp_np2's there, and the shared
  // expert and the loss are MetaDevice's and Estimator's samples (about 25 of this test's 37 s).
  if (TRAINMEM_UNDER_SANITIZERS) return;
  expect_estimate_equals_training(2, "--fsdp full --fsdp-prefetch on", 2, model);
  expect_estimate_equals_training(2, "--zero 3", 2, "--device cpu --model llama-small-moe --router-aux-loss 0.01");
}

// A sharded run never holds the whole model on the device: it is built with its values on the
// host (ModelOptions::values_on_host) and each rank's units take their shards from there, as
// deepspeed.zero.Init and FSDP's meta-device init build it. So a device smaller than the whole
// model's parameters and gradients (8 bytes a parameter in fp32) trains it over 4 ranks when the
// shards fit -- the estimate says it fits, and the real run does, with the predicted peaks.
TEST(EstimateRanksOfAModelLargerThanTheDevice, TrainsWhenItsShardsFit) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("four ranks (EstimateRanks runs two)");
  const std::string model = "--device cpu --model llama-small --dim 512 --heads 8 --kv-heads 4 --ffn-dim 1408 "
                            "--layers 4 --seq 32 --batch 1 --device-memory 92MiB";
  for (const char* sharding : {"--zero 3", "--fsdp full"}) {
    SCOPED_TRACE(sharding);
    const nlohmann::json predicted = run_json(std::string("'") + TRAINMEM_BINARY + "' estimate " + model + " " +
                                              sharding + " --world-size 4 --json");
    ASSERT_TRUE(predicted.is_object());
    const auto whole_model_states = 8 * predicted["num_parameters"].get<std::size_t>();
    ASSERT_GT(whole_model_states, std::size_t{92} << 20) << "the whole model's parameters and gradients exceed the device";
    EXPECT_EQ(predicted["device"]["fits"], true) << predicted["device"].dump();
    const std::string json = testing_support::scratch_path("larger_than_device.json");
    const testing_support::CommandResult trained =
        testing_support::run_command(mpirun(4, "train --steps 2 " + model + " " + sharding + " --json '" + json + "'"));
    ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
    const nlohmann::json measured = nlohmann::json::parse(testing_support::read_text_file(json))["memory"];
    std::remove(json.c_str());
    EXPECT_EQ(predicted["peak_reserved_bytes"], measured["peak_reserved_bytes"]);
  }
}

// `mpirun -np N trainmem estimate` printed N estimates, each "over 1 rank" (issue 25). It now
// estimates the run mpirun started, N ranks, and rank 0 alone prints it: one JSON document, equal
// to `estimate --world-size N`.
TEST_P(EstimateRanks, UnderMpirunEstimatesForItsRanksOnce) {
  const int ranks = GetParam();
  const std::string flags = std::string(kModel) + " --zero 3 --batch 2 --json";
  const testing_support::CommandResult r = testing_support::run_command(mpirun(ranks, "estimate " + flags));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json under_mpirun = nlohmann::json::parse(r.out, nullptr, false);  // one document, not N
  ASSERT_TRUE(under_mpirun.is_object()) << r.out;
  EXPECT_EQ(under_mpirun["sharding"]["world_size"], ranks);
  const nlohmann::json alone = run_json(std::string("'") + TRAINMEM_BINARY + "' estimate " + flags +
                                        " --world-size " + std::to_string(ranks));
  EXPECT_EQ(under_mpirun, alone);

  // --world-size that contradicts mpirun is refused, naming both
  const testing_support::CommandResult both =
      testing_support::run_command(mpirun(ranks, "estimate " + flags + " --world-size " + std::to_string(ranks + 1)));
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("--world-size " + std::to_string(ranks + 1) + " but mpirun started " + std::to_string(ranks) +
                          " ranks"),
            std::string::npos)
      << both.err;
  EXPECT_TRUE(both.out.empty()) << both.out;
}

INSTANTIATE_TEST_SUITE_P(Ranks, EstimateRanks, testing::Values(2, 4),
                         [](const testing::TestParamInfo<int>& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace trainmem
