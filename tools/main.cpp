// pasa — robust low-precision attention: run it, study its numerics, solve PASA's beta.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "pasa/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "pasa: fast, robust low-precision attention (FlashAttention, PASA, SageAttention2, "
      "FlashDecoding++) with a CPU emulator of every rounding point."};
  app.require_subcommand(1);
  pasa::cli::add_run_command(app);
  pasa::cli::add_study_command(app);
  pasa::cli::add_beta_command(app);
  pasa::cli::add_inspect_command(app);
  pasa::cli::add_calibrate_command(app);
  pasa::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const pasa::Error& e) {
    fmt::print(stderr, "pasa: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
