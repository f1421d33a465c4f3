#include "suites/trainmem/estimator/training_setup.h"

#include <algorithm>
#include <stdexcept>

#include "common/data/token_file.h"
#include "suites/zero/zero_memory.h"

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
  if (sharding.world_size < 1) throw std::invalid_argument("--world-size must be at least 1");
  if (sharding.fsdp && sharding.zero >= 0)
    throw std::invalid_argument("--fsdp and --zero both shard the model states: give one of them");
  if (sharding.zero_stage() >= 0) zero::check_stage(sharding.zero_stage(), static_cast<int>(sharding.world_size));
  if (sharding.offload != Offload::none && sharding.zero < 1)
    throw std::invalid_argument("--offload needs --zero 1, 2 or 3");
  if (sharding.offload == Offload::params && sharding.zero != 3)
    throw std::invalid_argument("--offload params needs --zero 3");
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
