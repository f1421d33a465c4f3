// trainmem tokens: writes the tokens a run would train on as a token file (common/data/token_file.h),
// so that another program trains on exactly the same tokens (the PyTorch reference, reports/peers/).
//
//   trainmem tokens --out corpus.tok                       # --data synthetic, seed 1, 2^20 tokens
//   trainmem tokens --data notes.txt --out notes.tok       # any file, tokenized as train reads it
//
// `--data synthetic` is the generator `train --data synthetic` uses (synthetic_corpus) with the same
// --seed; a file is read exactly as `train --data FILE` reads it (.tok as is, else byte by byte).
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>

#include "common/cli/output_flags.h"
#include "common/data/token_file.h"
#include "common/util/output_file.h"
#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

namespace {

struct TokensFlags {
  std::string data = "synthetic";
  std::size_t tokens = synthetic_dataset_tokens(0);  // what train makes for any run whose 4 batches fit in it
  std::uint64_t seed = 1;
  std::string out;
};

int run_tokens(const TokensFlags& flags) {
  check_output_path(flags.out, "--out");
  if (flags.data == "synthetic") check_tokens_fit_host_memory(flags.tokens, "--data synthetic --tokens");
  // The largest vocabulary the format holds: every token of a file is accepted, as train checks its own V.
  const std::vector<std::uint16_t> tokens = flags.data == "synthetic"
                                                ? synthetic_corpus(flags.tokens, flags.seed)
                                                : load_dataset(flags.data, 2, std::size_t{65536}, flags.seed);
  write_token_file(flags.out, tokens);
  std::cout << "trainmem tokens: " << tokens.size() << " tokens of --data " << flags.data << " -> " << flags.out
            << '\n';
  return 0;
}

}  // namespace

void add_tokens_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<TokensFlags>();
  CLI::App* cmd = app.add_subcommand("tokens", "Write the tokens of --data as a .tok file (for another trainer)");
  cmd->add_option("--data", flags->data, "synthetic, a .tok token file, or any file (tokenized byte by byte)")
      ->capture_default_str();
  cmd->add_option("--tokens", flags->tokens, "How many tokens --data synthetic makes")
      ->capture_default_str()
      ->check(whole_number(2, std::uint64_t{1} << 40));
  cmd->add_option("--seed", flags->seed, "Seed of the synthetic corpus (train's --seed)")
      ->capture_default_str()
      ->check(whole_number(0, std::numeric_limits<std::uint64_t>::max()));
  add_output_flag(*cmd, "--out", flags->out, "The token file to write (whole or not at all)")->required();
  cmd->callback([flags, &run] { run = [flags] { return run_tokens(*flags); }; });
}

}  // namespace trainmem::cli
