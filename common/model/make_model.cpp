// make_model (model.h): the one place that maps a family to its blocks.
#include "common/model/gpt.h"
#include "common/model/llama.h"
#include "common/model/model.h"

namespace trainmem {

std::unique_ptr<Model> make_model(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options) {
  switch (config.arch) {
    case Arch::gpt: return std::make_unique<GPT>(device, std::move(config), seed, options);
    case Arch::llama: return std::make_unique<Llama>(device, std::move(config), seed, options);
  }
  throw std::invalid_argument("make_model: unknown model family");
}

}  // namespace trainmem
