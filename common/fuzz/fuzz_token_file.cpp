// Fuzz target: `trainmem train --data FILE` on arbitrary bytes. The input is written to a
// temporary file, read as a token file (read_token_file), and loaded as a dataset both as a
// .tok file and as any other file (tokenized byte by byte), for two vocabulary sizes.
//
// Expected, not findings: the std::exception-derived errors main turns into an exit code
// (DataError: "trainmem: error: ..." and exit 2; any other std::exception exit 1). Anything else —
// a crash, a sanitizer report, a hang, a non-std exception — is a finding.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "common/data/token_file.h"
#include "common/fuzz/scratch_file.h"

namespace {

template <typename Load>
void expect_only_std_errors(Load load) {
  try {
    load();
  } catch (const std::exception&) {
    // main catches these: DataError is exit 2, any other std::exception exit 1.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const trainmem::fuzz::ScratchFolder scratch("trainmem_fuzz_token_file");
  const std::string tok = scratch.write("input.tok", data, size);
  const std::string txt = scratch.write("input.txt", data, size);

  expect_only_std_errors([&] { (void)trainmem::read_token_file(tok); });
  // min_tokens is B * T + 1 >= 2 in trainmem train; vocab 256 (byte level) and 50257 (GPT-2).
  for (const std::size_t vocab : {std::size_t{256}, std::size_t{50257}}) {
    expect_only_std_errors([&] { (void)trainmem::load_dataset(tok, 2, vocab, 1); });
    expect_only_std_errors([&] { (void)trainmem::load_dataset(txt, 2, vocab, 1); });
  }
  return 0;
}
