// The pasa command's subcommands; each file registers one.
#pragma once

#include <CLI/CLI.hpp>

namespace pasa::cli {

void add_run_command(CLI::App& app);
void add_study_command(CLI::App& app);
void add_beta_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_overhead_command(CLI::App& app);

}  // namespace pasa::cli
