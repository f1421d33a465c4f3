// Lazy data loading's registration (common/train/technique.h): where the dataset lives.
//
//   flags      --loader sequential|eager|lazy, --prefetch N, --pinned true|false
//   loader     EagerLoader (eager_loader.h: all of it on the device) or LazyLoader
//              (lazy_loader.h: on the host, batches prefetched by a background thread);
//              sequential is the driver's SequentialBatches (common/data/batch_source.h)
//   remedy     --loader lazy: the dataset leaves the device (eager runs only)
//   formula    the data category: the trainer's tokens and targets, plus the eager dataset or
//              the lazy ring
#pragma once
#include <cstddef>
#include <string>

#include "common/cli/enum_table.h"
#include "common/train/technique.h"

namespace trainmem::lazy_loading {

enum class Loader { sequential, eager, lazy };
inline constexpr auto kLoaders =
    cli::enum_table<Loader>("--loader", {{Loader::sequential, "sequential"}, {Loader::eager, "eager"}, {Loader::lazy, "lazy"}});
inline std::string to_string(Loader loader) { return std::string(kLoaders.name(loader)); }

// The loader the flags choose (an option of the setup).
struct LoaderChoice {
  Loader loader = Loader::sequential;
  std::size_t prefetch = 2;  // lazy: device batch buffers in the ring
  bool pinned = true;        // lazy: pinned host staging
  bool prefetch_given = false, pinned_given = false;  // the flags were given (refused without lazy)
};

const Technique& lazy_loading_technique();

}  // namespace trainmem::lazy_loading
