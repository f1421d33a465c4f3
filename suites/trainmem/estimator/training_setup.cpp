#include "suites/trainmem/estimator/training_setup.h"

#include <algorithm>
#include <stdexcept>

#include "common/data/token_file.h"
#include "suites/zero/zero_memory.h"
#include "suites/zero/zero_strategy.h"

namespace trainmem::estimator {

Loader parse_loader(const std::string& text) {
  if (text == "sequential") return Loader::sequential;
  if (text == "eager") return Loader::eager;
  if (text == "lazy") return Loader::lazy;
  throw std::invalid_argument("--loader must be sequential, eager or lazy, not '" + text + "'");
}

std::string to_string(Loader loader) {
  switch (loader) {
    case Loader::sequential: return "sequential";
    case Loader::eager: return "eager";
    case Loader::lazy: return "lazy";
  }
  return "?";
}

std::string Sharding::describe() const {
  std::string s = fsdp ? "FSDP " + fsdp::to_string(fsdp_options.mode) : zero::stage_name(zero_stage());
  if (offload != Offload::none) {
    s += ", offload ";
    s += to_string(offload);
  }
  s += " over ";
  s += std::to_string(world_size);
  s += world_size == 1 ? " rank" : " ranks";
  return s;
}

std::size_t TrainingSetup::synthetic_tokens() const {
  // Under mpirun every rank loads the corpus of the global batch (N*B rows), as one process would.
  return synthetic_dataset_tokens(tokens_for_batches(sharding.world_size, batch, seq()));
}

void TrainingSetup::validate() const {
  model.validate();
  if (batch < 1) throw std::invalid_argument("--batch must be at least 1");
  if (accum < 1) throw std::invalid_argument("--accum must be at least 1");
  // The model's own refusals (GPT::GPT), found before anything is simulated.
  if (attention != AttentionKind::naive && backend == DeviceKind::cuda && precision == Precision::fp32)
    throw std::invalid_argument("--attention " + to_string(attention) +
                                " runs on a GPU in 16 bits: add --precision bf16 (or fp16)");
  if (attention == AttentionKind::cudnn && backend != DeviceKind::cuda)
    throw std::invalid_argument("--attention cudnn needs a CUDA device; on the CPU use --attention flash");
  // The sharding flags: the one list of their rules (trainmem train checks them through here too).
  if (sharding.world_size < 1) throw std::invalid_argument("--world-size must be at least 1");
  if (sharding.fsdp && sharding.zero >= 0)
    throw std::invalid_argument("--fsdp and --zero both shard the model states over the ranks: give one of them (--fsdp " +
                                fsdp::to_string(sharding.fsdp_options.mode) + " or --zero " +
                                std::to_string(sharding.zero) + ")");
  if (sharding.offload != Offload::none && sharding.zero < 1)
    throw std::invalid_argument("--offload " + to_string(sharding.offload) +
                                " needs --zero 1, 2 or 3 (offload moves a rank's shard of the optimizer state to the host)");
  if (sharding.zero >= 0) {
    zero::ZeroOptions o;  // the ZeRO suite's own rules (stage range, offload params with stage 3)
    o.stage = sharding.zero;
    o.offload = sharding.offload;
    zero::validate(o);
  }
  if (sharding.fsdp && sharding.fsdp_options.mode == fsdp::ShardingMode::full && recompute.kind == RecomputePolicy::Kind::sqrt)
    throw std::invalid_argument("--recompute sqrt rebuilds a whole segment of layers in one layer's backward, but --fsdp full "
                                "gathers one unit at a time: use --recompute full, selective or every:K, or --fsdp grad_op");
  if (sharding.zero == 3 && recompute.kind == RecomputePolicy::Kind::sqrt)
    throw std::invalid_argument("--recompute sqrt rebuilds a whole segment of layers in one layer's backward, but --zero 3 "
                                "gathers one layer at a time: use --recompute full, selective or every:K with --zero 3");
}

std::string TrainingSetup::describe() const {
  std::string s = trainmem::to_string(precision);
  s += " batch=";
  s += std::to_string(batch);
  s += " accum=";
  s += std::to_string(accum);
  s += " recompute=";
  s += recompute.to_string();
  s += " attention=";
  s += trainmem::to_string(attention);
  s += " loader=";
  s += to_string(loader);
  if (sharding.active()) {
    s += ", ";
    s += sharding.describe();
  }
  return s;
}

}  // namespace trainmem::estimator
